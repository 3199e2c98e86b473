"""Wall-clock jumps: the processor's injected clock steps back 5 minutes, then forward an hour.

The processor runs in this process (``Processor(settings, clock=JumpClock())``), so the
jump is exact and affects nothing else. The checker judges lost occurrences in the
processor's own time (its clock at the end), since a clock that is behind has, by design,
not reached occurrences the wall clock has.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.chaos.checker import check
from tests.chaos.conftest import Scale
from tests.chaos.faults import JumpClock
from tests.chaos.recorder import Recorder
from tests.chaos.scenario import (
    deploy,
    every_second_jobs,
    now_ms,
    one_time_jobs,
    read_stores,
    run_ids,
    wait_dispatched,
)
from tickwheel.schemas.model import RunDue
from tickwheel.streams.runtime import Processor

pytestmark = [pytest.mark.broker, pytest.mark.timeout(600)]

MINUTE_MS = 60_000


async def _run_for(processor: Processor, seconds: float) -> None:
    stop = asyncio.Event()
    task = asyncio.create_task(processor.run(stop))
    await asyncio.sleep(seconds)
    stop.set()
    await task


async def test_clock_jumps_back_5_min_and_forward_1_h_lose_and_duplicate_nothing(
    bootstrap: str, tmp_path: Path, scale: Scale, chaos_report: Callable[..., None]
) -> None:
    """Fault: the processor clock jumps -5 min (already decided occurrences lie in its future
    again) and then +1 h (a one-time job 10 min ahead becomes 50 min late; every-second cron
    jobs miss an hour), with a processor restart in between. Checker: no duplicate (run id,
    attempt), nothing lost in processor time, no job 2 h ahead dispatched early, no aborted
    read, store = changelog = fold(log)."""
    deployment = await deploy(bootstrap, tmp_path, 2)
    settings = deployment.settings
    clock = JumpClock()
    recorder = Recorder(settings)
    soon = one_time_jobs("soon", 200, now_ms() + 5_000)
    ahead = one_time_jobs("ahead", 200, now_ms() + 10 * MINUTE_MS)
    later = one_time_jobs("later", 200, now_ms() + 120 * MINUTE_MS)
    async with recorder.tailing():
        await recorder.submit([*every_second_jobs("cron", 10), *soon, *ahead, *later])
        processor = Processor(settings, clock=clock)
        runner = asyncio.create_task(_run_for(processor, 30))
        missing_soon = await wait_dispatched(settings, run_ids(soon), 20)
        clock.jump(-5 * MINUTE_MS)
        await asyncio.sleep(8)
        clock.jump(60 * MINUTE_MS)
        await runner
        await _run_for(Processor(settings, clock=clock), 12)  # restart after the jumps: restore
        missing_ahead = await wait_dispatched(settings, run_ids(ahead), 5)
    stores = read_stores(settings.home, settings.app_id)
    history = await recorder.finish(now_ms=clock())
    # The injected clock moves the processor's at_ms but not its records' Kafka timestamps,
    # which replay's per-record state comparison needs to agree; the final fold still must.
    result = check(history, stores=stores, replay_state_at_record_times=False)
    chaos_report("clock jumps -5 min, +1 h", 2, result)
    assert (missing_soon, missing_ahead) == (set(), set())
    early = {e.run_id for e in _dues(history)} & run_ids(later)
    assert early == set()
    assert result.problems() == {}, result.explain()


def _dues(history: object) -> list[RunDue]:
    from tickwheel.schemas import mappers

    records = history.records("runs")  # type: ignore[attr-defined]
    events = [mappers.run_event_from_bytes(r.value) for r in records]
    return [e for e in events if isinstance(e, RunDue)]
