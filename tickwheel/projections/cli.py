"""``tickwheel projections``: run the projector, or rebuild the read model from the log."""

from __future__ import annotations

import argparse
import asyncio
import signal
from typing import Any

from tickwheel.settings import load


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("projections", help="fold the log into the read model (or rebuild it)")
    parser.add_argument(
        "action",
        nargs="?",
        choices=("run", "rebuild"),
        default="run",
        help="run: fold continuously (default); rebuild: fold the whole log again, then exit",
    )
    parser.add_argument("--metrics-port", type=int, default=0, help="serve /metrics here (0: off)")
    parser.set_defaults(func=_cli)


def _cli(args: argparse.Namespace) -> int:
    from tickwheel.cli import CliError
    from tickwheel.logs import configure_logging
    from tickwheel.projections import runtime
    from tickwheel.projections.metrics import ProjectionMetrics

    configure_logging()
    settings = load()
    if args.action == "rebuild":
        try:
            result = asyncio.run(runtime.rebuild(settings))
        except Exception as exc:
            raise CliError(f"rebuild failed (is `tickwheel projections` still running?): {exc}") from exc
        print(
            f"rebuilt {result.path}: {result.folded} events folded, {result.undecodable} skipped, "
            f"{result.seconds:.1f}s"
        )
        return 0
    metrics = ProjectionMetrics.create()
    if args.metrics_port:
        from prometheus_client import start_http_server

        start_http_server(args.metrics_port, addr=settings.metrics_host, registry=metrics.registry)
    asyncio.run(_serve(settings, metrics))
    return 0


async def _serve(settings: Any, metrics: Any) -> None:
    from tickwheel.projections import runtime

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await runtime.serve(settings, stop, metrics)
