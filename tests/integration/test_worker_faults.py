"""Workers as real processes, SIGKILLed and SIGSTOPped mid-call: the worker's side of the faults.

The processor's side (the lease-expiry timer, re-dispatch with ``attempt + 1``, ignoring a
stale attempt's outcome) is played by the test: once the lease of attempt 1 has lapsed it
commits ``RunCancelled(attempt 1, "lease_expired")`` and ``RunDue(attempt 2,
LEASE_EXPIRED)``, as ``streams/core.py`` does. With the real processor the same scenario
needs only the processor process started alongside (see the report to the lead).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from tests.integration.http_target import HttpTarget
from tests.integration.kafka_util import unique
from tests.integration.test_worker_runtime import (
    Deployment,
    http,
    new_deployment,
    now_ms,
    of_run,
    reported,
    run_due,
)
from tickwheel.schemas.model import (
    Outcome,
    RunCancelled,
    RunDue,
    RunHeartbeat,
    RunStarted,
    RunSucceeded,
    RunTrigger,
)

pytestmark = [pytest.mark.broker, pytest.mark.timeout(240)]

LEASE_MS = 3_000


@pytest.fixture
async def deployment(bootstrap: str) -> AsyncIterator[Deployment]:
    async with new_deployment(bootstrap) as created:
        yield created


@pytest.fixture
async def target() -> AsyncIterator[HttpTarget]:
    async with HttpTarget() as server:
        yield server


class Workers:
    """Worker processes started with ``python -m tickwheel.workers.cli``; all killed at the end."""

    def __init__(self, deployment: Deployment, logs: Path) -> None:
        self.deployment = deployment
        self.logs = logs
        self.processes: list[subprocess.Popen[bytes]] = []

    def start(self, worker_id: str, failpoints: str = "") -> subprocess.Popen[bytes]:
        s = self.deployment.settings
        env = {
            **os.environ,
            "TICKWHEEL_BOOTSTRAP_SERVERS": s.bootstrap_servers,
            "TICKWHEEL_TOPIC_PREFIX": s.topic_prefix,
            "TICKWHEEL_PARTITIONS": str(s.partitions),
            "TICKWHEEL_APP_ID": s.app_id,
            "TICKWHEEL_WORKER_ID": worker_id,
            "TICKWHEEL_WORKER_SSRF_ALLOW": "127.0.0.1",
            "TICKWHEEL_WORKER_SHUTDOWN_GRACE_MS": "1000",
        }
        env["TICKWHEEL_FAILPOINTS"] = failpoints
        with (self.logs / f"{worker_id}.log").open("wb") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "tickwheel.workers.cli"], env=env, stdout=log, stderr=subprocess.STDOUT
            )
        self.processes.append(proc)
        return proc

    def kill_all(self) -> None:
        for proc in self.processes:
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.kill()
            proc.wait()

    def output(self) -> str:
        return "\n".join(path.read_text(errors="replace")[-3000:] for path in sorted(self.logs.glob("*.log")))


@pytest.fixture
def workers(deployment: Deployment, tmp_path: Path) -> Iterator[Workers]:
    started = Workers(deployment, tmp_path)
    try:
        yield started
    finally:
        started.kill_all()


async def lease_lapsed(deployment: Deployment, due: RunDue) -> RunStarted:
    """Wait until attempt ``due.attempt``'s lease (as last renewed on the log) has run out."""
    while True:
        leases = [
            o
            for _, o in await deployment.outcomes()
            if o.run_id == due.run_id
            and o.attempt == due.attempt
            and isinstance(o, RunStarted | RunHeartbeat)
        ]
        started = next(o for o in leases if isinstance(o, RunStarted))
        until = max(o.lease_until_ms for o in leases)
        if now_ms() > until:
            return started
        await asyncio.sleep((until - now_ms()) / 1000 + 0.2)


async def redispatch(deployment: Deployment, due: RunDue) -> RunDue:
    """What the processor does when a lease lapses: cancel the attempt, dispatch attempt + 1."""
    again = RunDue(
        due.run_id,
        due.job_id,
        due.team,
        due.pool,
        due.attempt + 1,
        due.scheduled_for_ms,
        now_ms(),
        now_ms(),
        RunTrigger.LEASE_EXPIRED,
        due.executor,
        due.timeout_ms,
        due.lease_ms,
    )
    await deployment.commit(
        RunCancelled(due.run_id, due.job_id, due.attempt, "lease_expired", now_ms()), again
    )
    return again


def attempt_kinds(outcomes: list[Outcome], run_id: str, attempt: int) -> list[str]:
    return [
        type(o).__name__
        for o in of_run(outcomes, run_id)
        if o.attempt == attempt and not isinstance(o, RunHeartbeat)
    ]


@pytest.mark.parametrize("kill", ["sigkill_mid_call", "failpoint_after_call"])
async def test_killed_worker_then_redispatch_applies_the_effect_once(
    deployment: Deployment, target: HttpTarget, workers: Workers, kill: str
) -> None:
    """A worker killed mid-call (or after the call, before its outcome): attempt 2 hits the same key once."""
    if kill == "sigkill_mid_call":
        url, failpoints = target.url("/slow?ms=60000&until_attempt=1"), ""
    else:
        url, failpoints = target.url("/effect"), "worker_after_call_before_outcome=kill"
    due = run_due(unique("job-k"), http(url), lease_ms=LEASE_MS)
    first = workers.start("w-killed", failpoints)
    await deployment.commit(due)
    async with asyncio.timeout(60):
        await target.wait_for_calls(1)
    if kill == "sigkill_mid_call":
        first.send_signal(signal.SIGKILL)
    async with asyncio.timeout(30):
        while first.poll() is None:  # noqa: ASYNC110 - a child's exit has no event to await here
            await asyncio.sleep(0.05)
    async with asyncio.timeout(30):
        await lease_lapsed(deployment, due)
        again = await redispatch(deployment, due)
    workers.start("w-second")
    seen = await deployment.wait_outcomes(reported(again.run_id), timeout_s=60)
    calls = target.calls_for(due.run_id)
    assert [c.attempt for c in calls] == [1, 2], workers.output()
    assert target.effects[due.run_id] == 1
    assert calls[0].applied
    assert not calls[1].applied
    assert attempt_kinds(seen, due.run_id, 1) == ["RunStarted"]
    assert attempt_kinds(seen, due.run_id, 2) == ["RunStarted", "RunSucceeded"]
    (succeeded,) = of_run(seen, due.run_id, RunSucceeded)
    assert succeeded.worker_id == "w-second"


async def test_sigstop_past_the_lease_stops_the_call_and_reports_nothing_for_it(
    deployment: Deployment, target: HttpTarget, workers: Workers
) -> None:
    """A worker frozen past its lease aborts the call on resume and sends nothing more for that attempt."""
    due = run_due(unique("job-s"), http(target.url("/slow?ms=60000&until_attempt=1")), lease_ms=LEASE_MS)
    frozen = workers.start("w-frozen")
    await deployment.commit(due)
    async with asyncio.timeout(60):
        await target.wait_for_calls(1)
    frozen.send_signal(signal.SIGSTOP)
    try:
        async with asyncio.timeout(30):
            await lease_lapsed(deployment, due)
            again = await redispatch(deployment, due)
        resumed_at = now_ms()
    finally:
        frozen.send_signal(signal.SIGCONT)
    async with asyncio.timeout(20):
        await target.wait_until(lambda: target.calls[0].aborted)
    seen = await deployment.wait_outcomes(reported(again.run_id), timeout_s=60)
    await asyncio.sleep(1.0)  # let anything late from attempt 1 land before looking
    seen = [o for _, o in await deployment.outcomes()]
    assert attempt_kinds(seen, due.run_id, 1) == ["RunStarted"], workers.output()
    assert not [o for o in of_run(seen, due.run_id) if o.attempt == 1 and o.at_ms >= resumed_at]
    assert attempt_kinds(seen, due.run_id, 2) == ["RunStarted", "RunSucceeded"]
    assert target.effects[due.run_id] == 1
