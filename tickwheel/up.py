"""``tickwheel up`` / ``tickwheel down``: the whole platform on this machine, in the background.

``up`` starts the broker, creates the topics, starts the processor, a worker, the
projections, the gateway and a local echo target as detached processes (pid files in
``<home>/run``, logs in ``<home>/logs``), loads a few example jobs and prints the UI address
and an admin token. Running it again starts only what is not running and re-submits the
examples under the same idempotency keys (the processor ignores the repeats). ``down``
stops everything, broker last.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tickwheel.localbroker import BrokerConfig, LocalBroker
from tickwheel.procs import read_pid, spawn_detached, terminate
from tickwheel.settings import Settings, load


@dataclass(frozen=True, slots=True)
class Service:
    name: str
    args: tuple[str, ...]


def services(settings: Settings) -> tuple[Service, ...]:
    """What `up` runs, in start order (ports from the settings)."""
    base = settings.metrics_port_base
    return (
        Service("echo-target", ("echo-target", "--port", str(settings.echo_port))),
        Service("processor", ("processor", "--metrics-port", str(base))),
        Service("worker", ("worker", "--pool", "default", "--metrics-port", str(base + 1))),
        Service("projections", ("projections", "--metrics-port", str(base + 2))),
        Service("gateway", ("gateway", "--read-model", "secondary")),
    )


def _admin_token(home: Path) -> str:
    path = home / "admin-token"
    if not path.exists():
        home.mkdir(parents=True, exist_ok=True)
        path.write_text(secrets.token_urlsafe(24) + "\n")
        path.chmod(0o600)
    return path.read_text().strip()


def _env(settings: Settings, token: str) -> dict[str, str]:
    return {
        **os.environ,
        "TICKWHEEL_HOME": str(settings.home.resolve()),
        "TICKWHEEL_BOOTSTRAP_SERVERS": settings.bootstrap_servers,
        "TICKWHEEL_TOKEN": token,
        # The examples call the local echo target, which the SSRF guard would refuse.
        "TICKWHEEL_WORKER_SSRF_ALLOW": f"127.0.0.1:{settings.echo_port}",
    }


def start_services(settings: Settings, token: str) -> list[str]:
    """Start every service not already running; return the names started."""
    home = settings.home.resolve()
    started = []
    for service in services(settings):
        pid_path = home / "run" / f"{service.name}.pid"
        if read_pid(pid_path) is not None:
            continue
        argv = [sys.executable, "-m", "tickwheel", *service.args]
        pid = spawn_detached(argv, _env(settings, token), home / "logs" / f"{service.name}.log")
        pid_path.parent.mkdir(parents=True, exist_ok=True)
        pid_path.write_text(f"{pid}\n")
        started.append(service.name)
    return started


def stop_services(settings: Settings) -> list[str]:
    home = settings.home.resolve()
    stopped = []
    for service in reversed(services(settings)):
        pid_path = home / "run" / f"{service.name}.pid"
        pid = read_pid(pid_path)
        if pid is not None:
            terminate(pid)
            stopped.append(service.name)
        pid_path.unlink(missing_ok=True)
    return stopped


def wait_for_gateway(settings: Settings, timeout_s: float = 60.0) -> bool:
    url = f"http://{settings.gateway_host}:{settings.gateway_port}/healthz"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return True
        except OSError:
            time.sleep(0.5)
    return False


def example_jobs(now_ms: int, echo_port: int) -> list[tuple[str, Any]]:
    """The demo set: one-time, cron in a DST zone, an HTTP callback, and a failing job."""
    from tickwheel.schemas.model import CronSchedule, ExecutorSpec, JobSpec, OneTime, RetryPolicy

    echo = json.dumps({"method": "POST", "url": f"http://127.0.0.1:{echo_port}/effect"})
    return [
        ("example-once", JobSpec(
            team="examples", name="one-time hello", schedule=OneTime(now_ms + 60_000),
            executor=ExecutorSpec("process", json.dumps({"argv": ["echo", "hello from tickwheel"]})),
        )),
        ("example-new-york", JobSpec(
            team="examples", name="every 5 min in New York",
            schedule=CronSchedule("*/5 * * * *", "America/New_York"),
            executor=ExecutorSpec("process", json.dumps({"argv": ["date", "-u"]})),
        )),
        ("example-http", JobSpec(
            team="examples", name="HTTP callback every minute", schedule=CronSchedule("* * * * *"),
            executor=ExecutorSpec("http", echo),
        )),
        ("example-failing", JobSpec(
            team="examples", name="fails, retries, dead-letters", schedule=CronSchedule("*/2 * * * *"),
            executor=ExecutorSpec("process", json.dumps({"argv": ["false"]})),
            retry=RetryPolicy(max_attempts=3, backoff_initial_ms=2_000, backoff_max_ms=10_000),
        )),
    ]


async def load_examples(settings: Settings) -> int:
    from tickwheel.client import CommandClient

    jobs = example_jobs(time.time_ns() // 1_000_000, settings.echo_port)
    async with CommandClient(settings, principal="tickwheel-up") as client:
        for job_id, spec in jobs:
            await client.create(job_id, spec, idempotency_key=f"tickwheel-up:{job_id}")
    return len(jobs)


def up(settings: Settings) -> int:
    from tickwheel.topics import create_topics

    broker = LocalBroker(BrokerConfig.from_settings(settings))
    print("broker:", "started" if broker.start() else "already running", f"on {broker.cfg.bootstrap}")
    created = asyncio.run(create_topics(settings))
    print(f"topics: {len(created)} created")
    token = _admin_token(settings.home.resolve())
    started = start_services(settings, token)
    print("services started:", ", ".join(started) or "(all were running)")
    if not wait_for_gateway(settings):
        log = settings.home.resolve() / "logs" / "gateway.log"
        print(f"the gateway did not answer /healthz; see {log}", file=sys.stderr)
        return 1
    print(f"example jobs submitted: {asyncio.run(load_examples(settings))}")
    print(f"UI:    http://{settings.gateway_host}:{settings.gateway_port}/ui")
    print(f"token: {token}   (export TICKWHEEL_TOKEN={token} for `tickwheel jobs ...`)")
    print(f"logs:  {settings.home.resolve() / 'logs'}   stop with: make down")
    return 0


def down(settings: Settings) -> int:
    stopped = stop_services(settings)
    print("services stopped:", ", ".join(stopped) or "(none were running)")
    broker = LocalBroker(BrokerConfig.from_settings(settings))
    print("broker stopped" if broker.stop() else "broker was not running")
    return 0


def _guarded(action: Any) -> int:
    from tickwheel.cli import CliError
    from tickwheel.localbroker import BrokerError

    try:
        return int(action(load()))
    except BrokerError as exc:
        raise CliError(str(exc)) from exc


def register(subparsers: Any) -> None:
    up_parser = subparsers.add_parser("up", help="start the whole platform locally, in the background")
    up_parser.set_defaults(func=lambda _args: _guarded(up))
    down_parser = subparsers.add_parser("down", help="stop everything `tickwheel up` started")
    down_parser.set_defaults(func=lambda _args: down(load()))
