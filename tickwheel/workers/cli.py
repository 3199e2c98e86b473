"""``tickwheel worker``: run a worker process.

Configuration comes from the environment (``TICKWHEEL_*`` for the shared settings,
``TICKWHEEL_WORKER_*`` for the worker, ``TICKWHEEL_SECRET_*`` for secrets); the flags
override the worker's. ``python -m tickwheel.workers.cli`` runs the same command on its own
(for tests that start workers as processes, to SIGKILL or SIGSTOP them).
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from collections.abc import Sequence
from typing import Any

from tickwheel.workers.config import WorkerConfig


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("worker", help="execute due runs of one or more pools")
    add_arguments(parser)
    parser.set_defaults(func=run_cli)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--pool",
        action="append",
        dest="pools",
        metavar="POOL",
        help="a pool to serve (repeatable; default: TICKWHEEL_WORKER_POOLS or 'default')",
    )
    parser.add_argument("--concurrency", type=int, help="executions in flight in this process")
    parser.add_argument("--worker-id", help="identity in outcomes (default: host-pid)")
    parser.add_argument(
        "--metrics-port", type=int, help="serve Prometheus /metrics on 127.0.0.1:PORT (0: off)"
    )


def run_cli(args: argparse.Namespace) -> int:
    from aiokafka.errors import KafkaConnectionError

    from tickwheel.cli import CliError
    from tickwheel.gctune import tune_gc
    from tickwheel.logs import configure_logging
    from tickwheel.settings import load
    from tickwheel.workers.worker import Worker

    configure_logging()
    settings = load()
    tune_gc()
    try:
        config = WorkerConfig.from_env(
            pools=tuple(args.pools) if args.pools else None,
            concurrency=args.concurrency,
            worker_id=args.worker_id,
            metrics_port=args.metrics_port,
        )
        worker = Worker(settings, config)
    except (ValueError, OSError) as exc:
        raise CliError(f"bad worker configuration: {exc}", code=2) from exc
    if config.metrics_port:
        from prometheus_client import start_http_server

        start_http_server(config.metrics_port, addr=settings.metrics_host, registry=worker.metrics.registry)
    try:
        asyncio.run(_serve(worker))
    except KafkaConnectionError as exc:
        raise CliError(f"cannot reach Kafka at {settings.bootstrap_servers}: {exc}") from exc
    return 0


async def _serve(worker: Any) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await worker.run(stop)


def main(argv: Sequence[str] | None = None) -> int:
    from tickwheel.cli import CliError

    parser = argparse.ArgumentParser(prog="tickwheel worker", description=__doc__.splitlines()[0])
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return run_cli(args)
    except CliError as exc:
        print(f"tickwheel worker: {exc}", file=sys.stderr)
        return exc.code


if __name__ == "__main__":
    sys.exit(main())
