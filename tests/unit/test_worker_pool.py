"""The pool consumer's bookkeeping with a fake consumer: the cancel rule's LSO wait, dedupe, commits."""

from __future__ import annotations

import asyncio
import json
from collections import namedtuple
from typing import Any

from aiokafka import TopicPartition

from tickwheel.schemas.mappers import to_bytes
from tickwheel.schemas.model import (
    ExecutorSpec,
    LogChunk,
    Outcome,
    RunCancelled,
    RunDue,
    RunFailed,
    RunStarted,
    RunSucceeded,
    RunTrigger,
)
from tickwheel.settings import Settings
from tickwheel.workers.config import WorkerConfig
from tickwheel.workers.executors import ExecutorEnv, builtin_registry
from tickwheel.workers.metrics import WorkerMetrics
from tickwheel.workers.pool import PoolRunner
from tickwheel.workers.run import RunPhase, Services
from tickwheel.workers.secrets import SecretStore
from tickwheel.workers.ssrf import SsrfGuard, system_resolve

Record = namedtuple("Record", "topic partition offset value")
TOPIC = "t.runs"
TP = TopicPartition(TOPIC, 0)


class FakeConsumer:
    def __init__(self) -> None:
        self.lso = 0
        self.pos = 0
        self.committed: dict[Any, int] = {}
        self.lso_asked = asyncio.Event()

    async def end_offsets(self, tps: list[Any]) -> dict[Any, int]:
        self.lso_asked.set()
        return dict.fromkeys(tps, self.lso)

    async def position(self, tp: Any) -> int:
        return self.pos

    def assignment(self) -> set[Any]:
        return {TP}

    def pause(self, *tps: Any) -> None:
        pass

    def resume(self, *tps: Any) -> None:
        pass

    def partitions_for_topic(self, topic: str) -> set[int]:
        return {0}

    async def commit(self, offsets: dict[Any, Any]) -> None:
        self.committed.update({tp: meta.offset for tp, meta in offsets.items()})


class Sink:
    def __init__(self) -> None:
        self.events: list[Outcome | LogChunk] = []
        self.sent = asyncio.Event()

    async def outcome(self, event: Outcome) -> None:
        self.events.append(event)
        self.sent.set()

    async def log(self, chunk: LogChunk) -> None:
        self.events.append(chunk)


def _runner() -> tuple[PoolRunner, FakeConsumer, Sink]:
    config = WorkerConfig(worker_id="w")
    registry = builtin_registry()
    env = ExecutorEnv(config, SsrfGuard((), system_resolve), registry)
    sink = Sink()
    services = Services(
        config,
        sink,
        lambda: 1_000,
        WorkerMetrics.create(),
        SecretStore(environ={}),
        registry,
        env,
        asyncio.Semaphore(2),
    )
    runner = PoolRunner("default", Settings(topic_prefix="t.", partitions=1), services)
    consumer = FakeConsumer()
    runner.consumer = consumer
    runner.offsets_client = consumer
    runner.on_assigned({TP})
    return runner, consumer, sink


def _due(run_id: str, pool: str = "default") -> RunDue:
    spec = ExecutorSpec("noop", json.dumps({}))
    return RunDue(
        run_id, "job", "team", pool, 1, 1_000, 1_000, 1_000, RunTrigger.SCHEDULED, spec, 60_000, 30_000
    )


async def _feed(runner: PoolRunner, consumer: FakeConsumer, offset: int, event: Any, position: int) -> None:
    runner._on_record(Record(TOPIC, 0, offset, to_bytes(event)))
    consumer.pos = position
    await runner._note_positions()


async def test_start_waits_until_the_partition_is_read_up_to_the_lso() -> None:
    """A run does not lease while its partition's position is below the LSO observed at start."""
    runner, consumer, sink = _runner()
    consumer.lso = 3  # a committed transaction ends at offset 2 (its marker)
    await _feed(runner, consumer, 0, _due("r-1"), position=1)
    async with asyncio.timeout(5):
        await consumer.lso_asked.wait()
    await asyncio.sleep(0)
    assert runner.live[("r-1", 1)].phase is RunPhase.CHECKING
    assert sink.events == []
    consumer.pos = 3  # the consumer stepped over the transaction marker
    await runner._note_positions()
    async with asyncio.timeout(5):
        await sink.sent.wait()
    assert isinstance(sink.events[0], RunStarted)


async def test_cancel_read_before_the_lso_prevents_the_start() -> None:
    """A RunCancelled consumed while the run waits for the LSO stops it from ever being leased."""
    runner, consumer, sink = _runner()
    consumer.lso = 3
    await _feed(runner, consumer, 0, _due("r-1"), position=1)
    async with asyncio.timeout(5):
        await consumer.lso_asked.wait()
    run = runner.live[("r-1", 1)]
    await _feed(runner, consumer, 1, RunCancelled("r-1", "job", 1, "cancelled", 1_000), position=3)
    assert run.task is not None
    await asyncio.wait_for(run.task, 5)
    assert run.phase is RunPhase.DROPPED
    assert sink.events == []
    await runner._commit()
    assert consumer.committed == {TP: 3}


class MovingLso(FakeConsumer):
    """Answers each LSO request with the next value: what the broker saw at each moment."""

    def __init__(self, *answers: int) -> None:
        super().__init__()
        self.answers = list(answers)

    async def end_offsets(self, tps: list[Any]) -> dict[Any, int]:
        self.lso = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        return await super().end_offsets(tps)


def _moving_runner(*answers: int) -> tuple[PoolRunner, MovingLso, Sink]:
    runner, _, sink = _runner()
    consumer = MovingLso(*answers)
    runner.consumer = runner.offsets_client = consumer
    return runner, consumer, sink


async def test_a_cancel_committed_between_the_check_and_the_lease_stops_the_call() -> None:
    """Fault: the LSO is 1 at the first check (RunDue only) and 3 after the lease (a
    RunCancelled and its marker committed meanwhile). Checker: the second check waits for
    the partition up to 3, reads the cancel, and the executor is never called."""
    runner, consumer, sink = _moving_runner(1, 3)
    await _feed(runner, consumer, 0, _due("r-1"), position=1)
    async with asyncio.timeout(5):
        await sink.sent.wait()
    run = runner.live[("r-1", 1)]
    await asyncio.sleep(0.01)
    assert [type(e) for e in sink.events] == [RunStarted]  # leased, waiting in the second check
    await _feed(runner, consumer, 1, RunCancelled("r-1", "job", 1, "cancelled", 1_000), position=3)
    assert run.task is not None
    await asyncio.wait_for(run.task, 5)
    assert [type(e) for e in sink.events] == [RunStarted, RunFailed]
    failed = sink.events[-1]
    assert isinstance(failed, RunFailed)
    assert failed.error_class == "Cancelled"


async def test_a_leased_run_whose_partition_is_revoked_during_the_second_check_goes_on() -> None:
    """The partition moves away while a leased run waits to read it: the run executes (as it
    would have without the second check) instead of waiting, without heartbeats, forever."""
    runner, consumer, sink = _moving_runner(1, 3)
    await _feed(runner, consumer, 0, _due("r-1"), position=1)
    async with asyncio.timeout(5):
        await sink.sent.wait()
    run = runner.live[("r-1", 1)]
    await runner.on_revoked({TP})
    assert run.task is not None
    await asyncio.wait_for(run.task, 5)
    assert [type(e) for e in sink.events] == [RunStarted, RunSucceeded]


async def test_redelivered_attempt_is_ignored_and_other_pools_skipped() -> None:
    """The same (run_id, attempt) delivered twice is held once; another pool's RunDue is not taken."""
    runner, consumer, sink = _runner()
    consumer.lso = 3  # r-1 cannot start before its partition is read past the gpu RunDue
    await _feed(runner, consumer, 0, _due("r-1"), position=1)
    await _feed(runner, consumer, 0, _due("r-1"), position=1)
    await _feed(runner, consumer, 1, _due("r-2", pool="gpu"), position=2)
    assert list(runner.live) == [("r-1", 1)]
    task = runner.live[("r-1", 1)].task
    assert task is not None
    consumer.pos = 3
    await runner._note_positions()
    await asyncio.wait_for(task, 5)
    assert [type(e) for e in sink.events] == [RunStarted, RunSucceeded]
    await _feed(runner, consumer, 0, _due("r-1"), position=2)  # after it ran: still deduped
    assert not runner.live
    deduped = runner.s.metrics.registry.get_sample_value(
        "tickwheel_worker_redeliveries_deduped_total", {"pool": "default"}
    )
    assert deduped == 2


async def test_offset_is_committed_only_after_the_lease_is_acked() -> None:
    """While a run is held its offset blocks the commit point; after the ack the commit moves on."""
    runner, consumer, _ = _runner()
    consumer.lso = 2
    await _feed(runner, consumer, 0, _due("r-1"), position=2)
    gate = asyncio.Event()
    original = runner.lease_acked

    def lease_acked(run: Any) -> None:
        original(run)
        gate.set()

    runner.lease_acked = lease_acked  # type: ignore[method-assign]
    await runner._commit()
    assert consumer.committed in ({}, {TP: 0})
    async with asyncio.timeout(5):
        await gate.wait()
    await runner._commit()
    assert consumer.committed == {TP: 2}


async def test_run_cancelled_in_the_same_batch_is_dropped_and_committed_past() -> None:
    """A RunDue and its RunCancelled read together: never started, forgotten, and its offset released."""
    runner, consumer, sink = _runner()
    consumer.lso = 2
    runner._on_record(Record(TOPIC, 0, 0, to_bytes(_due("r-1"))))
    runner._on_record(Record(TOPIC, 0, 1, to_bytes(RunCancelled("r-1", "job", 1, "cancelled", 1_000))))
    consumer.pos = 2
    await runner._note_positions()
    await asyncio.sleep(0)
    assert runner.live == {}
    assert sink.events == []
    await runner._commit()
    assert consumer.committed == {TP: 2}
    dropped = runner.s.metrics.registry.get_sample_value(
        "tickwheel_worker_runs_dropped_total", {"pool": "default", "reason": "cancelled"}
    )
    assert dropped == 1


async def test_lso_probe_coalesces_and_answers_only_from_later_requests() -> None:
    """Concurrent askers share one request; one asking during a request waits for the next."""
    from tickwheel.workers.pool import LsoProbe

    lso = {"value": 10}
    in_flight = asyncio.Event()
    release = asyncio.Event()
    asked: list[list[str]] = []

    async def fetch(tps: list[str]) -> dict[str, int]:
        asked.append(sorted(tps))
        seen = lso["value"]
        in_flight.set()
        await release.wait()
        return dict.fromkeys(tps, seen)

    probe = LsoProbe(fetch)
    early = [asyncio.create_task(probe.observe(tp)) for tp in ("p0", "p0", "p1")]
    async with asyncio.timeout(5):
        await in_flight.wait()
    lso["value"] = 20  # a cancel committed after the first request was sent
    late = asyncio.create_task(probe.observe("p0"))
    await asyncio.sleep(0)
    release.set()
    assert await asyncio.gather(*early) == [10, 10, 10]
    assert await asyncio.wait_for(late, 5) == 20
    assert asked == [["p0", "p1"], ["p0"]]


async def test_the_pending_count_follows_the_runs_phases() -> None:
    """Held and queued runs are counted as they move (no scan of every run per poll), back to 0 when done."""
    from dataclasses import replace

    runner, consumer, _ = _runner()
    consumer.lso = 3
    for offset in range(3):
        due = replace(_due(f"r-{offset}"), not_before_ms=1_000_000)  # held well past the fake clock
        runner._on_record(Record(TOPIC, 0, offset, to_bytes(due)))
    await asyncio.sleep(0)

    def recount() -> int:
        return sum(run.phase in (RunPhase.HELD, RunPhase.QUEUED) for run in runner.live.values())

    assert runner.phases[RunPhase.HELD] + runner.phases[RunPhase.QUEUED] == recount() == 3
    runner._on_record(Record(TOPIC, 0, 3, to_bytes(RunCancelled("r-1", "job", 1, "cancelled", 1_000))))
    await asyncio.sleep(0)
    assert runner.phases[RunPhase.HELD] == recount() == 2
    tasks = [run.task for run in runner.live.values() if run.task is not None]
    runner.on_assigned(set())  # the partition went elsewhere: the held runs are dropped
    await asyncio.wait_for(asyncio.wait(tasks), 5)
    assert not runner.live
    assert +runner.phases == {}
