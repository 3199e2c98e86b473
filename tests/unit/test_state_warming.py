"""Idle ticks warm the decoded-state cache with the jobs whose FIRE timers entered the wheel.

No broker: the partition task is built over a MemoryStore and never started; these tests
drive the wheel's refill, the task's ``_warm`` and its ``_load`` directly.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tickwheel.schemas import mappers
from tickwheel.schemas.codec import CodecError
from tickwheel.schemas.model import ExecutorSpec, JobSpec, JobState, JobStatus, OneTime
from tickwheel.settings import Settings
from tickwheel.streams.metrics import ProcessorMetrics
from tickwheel.streams.processor import PartitionTask
from tickwheel.streams.store import MemoryStore, StoreBatch
from tickwheel.streams.timers import Timer, TimerKind

NOW = 1_800_000_000_000


class CountingStore(MemoryStore):
    """Counts the job states read, as the processor's loads would pay for them."""

    def __init__(self) -> None:
        super().__init__()
        self.state_reads = 0

    def get_many(self, job_ids):  # type: ignore[no-untyped-def]
        ids = list(job_ids)
        self.state_reads += len(ids)
        return super().get_many(ids)


def _state(job_id: str, due_ms: int) -> JobState:
    spec = JobSpec(team="t", name=job_id, schedule=OneTime(due_ms), executor=ExecutorSpec("noop"))
    return JobState(job_id, spec, 1, JobStatus.ACTIVE, next_fire_ms=due_ms, last_scheduled_ms=None)


MakeTask = Callable[..., PartitionTask]


@pytest.fixture
def make_task(tmp_path: Path) -> Iterator[MakeTask]:
    """Partition tasks over a given store; their store threads are shut down afterwards."""
    made: list[PartitionTask] = []

    def make(store: MemoryStore, **overrides: int) -> PartitionTask:
        settings = Settings(home=tmp_path, **overrides)
        task = PartitionTask(
            0, settings=settings, store=store, clock=lambda: NOW, metrics=ProcessorMetrics.create()
        )
        made.append(task)
        return task

    yield make
    for task in made:
        task._store.close()


def _store_with(jobs: dict[str, bytes], timers: set[Timer]) -> CountingStore:
    store = CountingStore()
    store.apply(StoreBatch(jobs, timers, set()))
    return store


def _hot_instant(n: int, due_ms: int = NOW + 30_000) -> tuple[dict[str, JobState], set[Timer]]:
    states = {f"job-{i:03d}": _state(f"job-{i:03d}", due_ms) for i in range(n)}
    return states, {Timer(due_ms, job_id, TimerKind.FIRE, team="t") for job_id in states}


async def test_an_idle_tick_warms_the_states_of_timers_entering_the_wheel(make_task: MakeTask) -> None:
    states, timers = _hot_instant(40)
    store = _store_with({j: mappers.state_to_bytes(s) for j, s in states.items()}, timers)
    task = make_task(store)
    task.wheel.refill(NOW)  # the instant enters the 60 s horizon
    assert await task._warm() == 40
    reads = store.state_reads
    loaded = await task._load(set(states))
    assert loaded == states  # the instant finds every state decoded...
    assert store.state_reads == reads  # ...and reads none from the store
    assert task.metrics.states_warmed._value.get() == 40


async def test_warming_is_bounded_per_tick_and_by_half_the_cache(make_task: MakeTask) -> None:
    states, timers = _hot_instant(100)
    store = _store_with({j: mappers.state_to_bytes(s) for j, s in states.items()}, timers)
    task = make_task(store, state_cache_size=60, state_warm_batch=20)
    task.wheel.refill(NOW)
    assert [await task._warm() for _ in range(3)] == [20, 10, 0]  # 30 = half of 60, then done
    assert len(task._states) == 30


async def test_timers_beyond_the_horizon_and_other_kinds_are_not_warmed(make_task: MakeTask) -> None:
    far, near = _state("far", NOW + 3_600_000), _state("near", NOW + 1_000)
    timers = {
        Timer(NOW + 3_600_000, "far", TimerKind.FIRE),
        Timer(NOW + 1_000, "near", TimerKind.FIRE),
        Timer(NOW + 2_000, "leased", TimerKind.LEASE, run_id="r-1"),
    }
    store = _store_with(
        {"far": mappers.state_to_bytes(far), "near": mappers.state_to_bytes(near)}, timers
    )
    task = make_task(store)
    task.wheel.refill(NOW)
    assert await task._warm() == 1
    assert "near" in task._states
    assert "far" not in task._states
    assert "leased" not in task._states


async def test_a_state_that_does_not_decode_is_left_to_the_step_that_needs_it(make_task: MakeTask) -> None:
    good = _state("good", NOW + 1_000)
    timers = {Timer(NOW + 1_000, "good", TimerKind.FIRE), Timer(NOW + 1_000, "bad", TimerKind.FIRE)}
    store = _store_with({"good": mappers.state_to_bytes(good), "bad": b"\xc3\x01garbage"}, timers)
    task = make_task(store)
    task.wheel.refill(NOW)
    assert await task._warm() == 1  # no exception: warming is only an optimisation
    with pytest.raises(CodecError):
        await task._load({"bad"})  # the step's own load still reports it


async def test_warming_off_keeps_nothing_queued(make_task: MakeTask) -> None:
    states, timers = _hot_instant(10)
    store = _store_with({j: mappers.state_to_bytes(s) for j, s in states.items()}, timers)
    task = make_task(store, state_warm_batch=0)
    task.wheel.refill(NOW)
    assert await task._warm() == 0
    assert not task._to_warm
    assert len(task._states) == 0
