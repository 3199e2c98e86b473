"""Worker faults: every worker failpoint and random SIGKILLs of workers mid-call.

Runs call a real local idempotent HTTP target (``tests/integration/http_target.py``) that
keeps a ledger of every arrival; the checker proves each effect was applied exactly once
per run, every run settled, and no RunDue was lost or duplicated.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.chaos.checker import check
from tests.chaos.conftest import Scale
from tests.chaos.faults import Fleet
from tests.chaos.recorder import Recorder
from tests.chaos.scenario import (
    create_command,
    deploy,
    http_executor,
    now_ms,
    one_time_spec,
    run_ids,
    wait_dispatched,
    wait_settled,
)
from tests.integration.http_target import HttpTarget

pytestmark = [pytest.mark.broker, pytest.mark.timeout(900)]

WORKER_FAILPOINTS = ("worker_before_call=kill@2", "worker_after_call_before_outcome=kill@2",
                     "during_heartbeat=kill@2")


async def test_worker_failpoints_and_random_sigkills_apply_each_effect_once(
    bootstrap: str, tmp_path: Path, scale: Scale, chaos_report: Callable[..., None]
) -> None:
    """Fault: three workers armed with worker_before_call / worker_after_call_before_outcome /
    during_heartbeat = kill, and random SIGKILLs of workers while slow http calls (1.5 s) are in
    flight; leases of 3 s lapse and runs are re-dispatched with attempt + 1. Checker: each run's
    effect applied once at the target (none missing), every run settled, nothing lost,
    unexpected or duplicated, no aborted read, replay verify clean."""
    rng = random.Random(scale.seed + 2)
    deployment = await deploy(bootstrap, tmp_path, 3, start_timeout_ms=20_000)
    fleet = Fleet(deployment)
    recorder = Recorder(deployment.settings)
    async with HttpTarget() as target:
        recorder.target = target
        executor = http_executor(target.url("/slow?ms=1500&until_attempt=1"))
        start = now_ms() + 8_000
        span_ms = max(15_000, scale.worker_runs * 100)
        jobs = [
            create_command(f"w-{i:05d}", one_time_spec(start + i * span_ms // scale.worker_runs,
                                                       executor=executor, lease_ms=3_000))
            for i in range(scale.worker_runs)
        ]
        try:
            async with recorder.tailing():
                await recorder.submit(jobs)
                fleet.processor("p")
                for i, failpoint in enumerate(WORKER_FAILPOINTS):
                    fleet.worker(f"armed{i}", TICKWHEEL_FAILPOINTS=failpoint)
                fleet.worker("w0")
                fleet.worker("w1")
                await asyncio.sleep(9)
                for kill in range(scale.worker_kills):
                    await asyncio.sleep(rng.uniform(1, 4))
                    fleet.kill_random("worker", rng)
                    fleet.worker(f"spare{kill}")
                missing = await wait_dispatched(deployment.settings, run_ids(jobs), 60)
                unsettled = await wait_settled(deployment.settings, 120)
                fleet.stop_all()
            assert not missing, fleet.logs()
            assert not unsettled, fleet.logs()
            history = await recorder.finish()
        finally:
            fleet.stop_all()
    result = check(history, settle=True)
    chaos_report("worker failpoints + SIGKILL", len(WORKER_FAILPOINTS) + scale.worker_kills, result)
    assert result.problems() == {}, result.explain() + "\n" + fleet.logs()
    armed = [m for m in fleet.members if m.name.startswith("armed")]
    assert any(m.proc.returncode == -9 for m in armed), fleet.logs()
