"""Cancels racing due instants, with workers executing against the idempotent HTTP target."""

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
    cancel_commands,
    deploy,
    http_executor,
    now_ms,
    one_time_jobs,
    wait_answered,
    wait_settled,
)
from tests.integration.http_target import HttpTarget

pytestmark = [pytest.mark.broker, pytest.mark.timeout(600)]


async def test_cancels_racing_due_instants_never_start_a_run_after_the_ack(
    bootstrap: str, tmp_path: Path, scale: Scale, chaos_report: Callable[..., None]
) -> None:
    """Fault: cancels of jobs due at one instant, submitted in random order from 1 s before to
    1 s after it, while a processor and two workers run; a worker SIGKILL halfway. Checker:
    no RunStarted and no target call for a job after its cancel ack was readable, each effect
    once, every run settled (succeeded or cancelled), nothing lost or duplicated."""
    rng = random.Random(scale.seed + 5)
    deployment = await deploy(bootstrap, tmp_path, 3, start_timeout_ms=30_000)
    fleet = Fleet(deployment)
    recorder = Recorder(deployment.settings)
    async with HttpTarget() as target:
        recorder.target = target
        instant = now_ms() + 10_000
        jobs = one_time_jobs("race", scale.cancels, instant, executor=http_executor(target.url("/effect")))
        cancels = cancel_commands(jobs)
        rng.shuffle(cancels)
        try:
            async with recorder.tailing():
                await recorder.submit(jobs)
                fleet.processor("p")
                fleet.worker("w0")
                fleet.worker("w1")
                await asyncio.sleep(max(0.0, (instant - now_ms() - 1_000) / 1000))
                step = 2.0 / max(1, len(cancels))
                for i, cancel in enumerate(cancels):
                    await recorder.submit([cancel])
                    if i == len(cancels) // 2:
                        fleet.kill_random("worker", rng)
                        fleet.worker("w-spare")
                    await asyncio.sleep(step)
                unsettled = await wait_settled(deployment.settings, 90)
                acked = {r.command.meta.command_id for r in recorder.commands if r.outcome == "ok"}
                unanswered = await wait_answered(deployment.settings, acked, 60)
                fleet.stop_all()
            assert not unsettled, fleet.logs()
            assert not unanswered, fleet.logs()
            history = await recorder.finish()
        finally:
            fleet.stop_all()
    result = check(history, settle=True)
    chaos_report("cancels racing due instants", len(cancels), result)
    assert result.problems() == {}, result.explain() + "\n" + fleet.logs()
