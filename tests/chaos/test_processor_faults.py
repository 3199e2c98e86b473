"""Processor faults: every failpoint, random SIGKILLs during a hot instant, SIGSTOP zombies.

Each scenario runs real processor processes on the suite's broker, records with
:class:`Recorder` and asserts that :func:`check` finds nothing: no lost occurrence, no
unexpected or duplicate dispatch, no aborted read, recovered state = changelog = fold(log).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.chaos.checker import check
from tests.chaos.conftest import Scale
from tests.chaos.faults import Fleet, pause, resume
from tests.chaos.recorder import Recorder
from tests.chaos.scenario import (
    deploy,
    every_second_jobs,
    now_ms,
    one_time_jobs,
    recover_and_read_stores,
    run_ids,
    wait_dispatched,
    wait_for_exit,
)

pytestmark = [pytest.mark.broker, pytest.mark.timeout(900)]

PROCESSOR_FAILPOINTS = ("after_decide", "after_produce_before_commit", "after_commit_before_store",
                        "inside_store_write")
SESSION_TIMEOUT_S = 10  # runtime.Processor's consumer session timeout


async def test_failpoint_kills_and_random_sigkills_lose_and_duplicate_nothing(
    bootstrap: str, tmp_path: Path, scale: Scale, chaos_report: Callable[..., None]
) -> None:
    """Fault: per cycle, four processors each armed with one processor failpoint (=kill@N) die at
    it during a hot instant; then random SIGKILLs of live processors while every-second cron
    jobs fire. Checker: nothing lost/unexpected/duplicated, no aborted read, the state
    recovered on a crashed member's home equals the changelog, replay verify clean."""
    rng = random.Random(scale.seed)
    deployment = await deploy(bootstrap, tmp_path, 4, max_fires_per_step=100,
                                         transaction_timeout_ms=10_000)
    fleet = Fleet(deployment)
    recorder = Recorder(deployment.settings)
    per_cycle = max(100, scale.hot_instant_runs // max(1, scale.failpoint_cycles))
    expected: set[str] = set()
    try:
        async with recorder.tailing():
            await recorder.submit(every_second_jobs("cron", 10))
            for cycle in range(scale.failpoint_cycles):
                instant = now_ms() + 6_000
                jobs = one_time_jobs(f"hot{cycle}", per_cycle, instant)
                expected |= run_ids(jobs)
                await recorder.submit(jobs)
                armed = [
                    fleet.processor(f"fp-{name}-{cycle}",
                                    TICKWHEEL_FAILPOINTS=f"{name}=kill@{rng.randint(2, 4)}")
                    for name in PROCESSOR_FAILPOINTS
                ]
                await asyncio.gather(*(wait_for_exit(m, 45) for m in armed))
                for member in armed:
                    if member.alive:  # its failpoint was not reached this cycle: retire it
                        fleet.kill(member)
            survivors = [fleet.processor(f"steady-{i}") for i in range(2)]
            for kill in range(scale.processor_kills):
                await asyncio.sleep(rng.uniform(3, 7))
                fleet.kill_random("processor", rng)
                fleet.processor(f"replacement-{kill}")
            # The last replacement may take the partitions of the last victim only after its
            # session times out; then the backlog drains (>= 500 runs/s even on a loaded
            # two-core machine), so the wait grows with the hot instant's size.
            drain_s = max(60, len(expected) // 500)
            missing = await wait_dispatched(deployment.settings, expected, drain_s + SESSION_TIMEOUT_S)
            await asyncio.sleep(SESSION_TIMEOUT_S + 5)  # the last victim's partitions catch up
            fleet.stop_all()
        assert not missing, fleet.logs()
        crashed_home = fleet.home / fleet.members[0].name
        stores = await recover_and_read_stores(fleet, crashed_home, partitions=4)
        history = await recorder.finish()
    finally:
        fleet.stop_all()
    result = check(history, stores=stores)
    chaos_report("processor failpoints + SIGKILL", scale.failpoint_cycles * 4 + scale.processor_kills,
                  result, kills=fleet.kills, survivors=len(survivors))
    assert result.problems() == {}, result.explain() + "\n" + fleet.logs()
    assert result.runs >= len(expected)
    codes = [m.proc.returncode for m in fleet.members if m.name.startswith("fp-")]
    assert codes.count(-9) >= len(PROCESSOR_FAILPOINTS) * scale.failpoint_cycles // 2, codes


async def test_sigstopped_zombie_past_session_and_transaction_timeouts_commits_nothing(
    bootstrap: str, tmp_path: Path, scale: Scale, chaos_report: Callable[..., None]
) -> None:
    """Fault: SIGSTOP one of two processors while every-second jobs fire, keep it stopped past the
    session timeout (10 s) and the transaction timeout (5 s) so the other takes its
    partitions, then SIGCONT it: the zombie's pending commit must be fenced. Checker: no
    duplicate, nothing lost, no aborted read, recovered state = changelog = fold(log)."""
    rng = random.Random(scale.seed + 1)
    deployment = await deploy(bootstrap, tmp_path, 4, transaction_timeout_ms=5_000)
    fleet = Fleet(deployment)
    recorder = Recorder(deployment.settings)
    instant = now_ms() + 8_000
    jobs = one_time_jobs("hot", min(scale.hot_instant_runs, 2_000), instant)
    try:
        async with recorder.tailing():
            await recorder.submit([*every_second_jobs("cron", 10), *jobs])
            fleet.processor("a")
            fleet.processor("b")
            await asyncio.sleep(8)
            for cycle in range(scale.zombie_cycles):
                zombie = fleet.live("processor")[rng.randrange(len(fleet.live("processor")))]
                pause(zombie)
                await asyncio.sleep(SESSION_TIMEOUT_S + rng.uniform(3, 6))
                resume(zombie)
                await asyncio.sleep(6)
                if len(fleet.live("processor")) < 2:
                    fleet.processor(f"spare-{cycle}")
            missing = await wait_dispatched(deployment.settings, run_ids(jobs), 60)
            await asyncio.sleep(5)
            fleet.stop_all()
        assert not missing, fleet.logs()
        stores = await recover_and_read_stores(fleet, fleet.home / "a", partitions=4)
        history = await recorder.finish()
    finally:
        fleet.stop_all()
    result = check(history, stores=stores)
    chaos_report("SIGSTOP zombies", scale.zombie_cycles, result)
    assert result.problems() == {}, result.explain() + "\n" + fleet.logs()
