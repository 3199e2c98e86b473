"""Projections against the real broker: fold what we write as processor and worker, live == rebuilt."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer

from tests.integration.kafka_util import unique
from tests.unit.test_projection_events import (
    TOPIC_OF,
    accepted,
    changed,
    chunk,
    dead_letter,
    due,
    failed,
    heartbeat,
    life,
    rejected,
    settled,
    started,
)
from tickwheel.projections import runtime
from tickwheel.projections.kv import RocksKV
from tickwheel.projections.metrics import ProjectionMetrics
from tickwheel.projections.readmodel import PROJECTED_TOPICS, JobFilter, ReadModel
from tickwheel.schemas import mappers
from tickwheel.schemas.model import JobStatus, RunStatus, RunTrigger
from tickwheel.settings import Settings
from tickwheel.topics import create_topics

pytestmark = pytest.mark.broker


@pytest.fixture
async def settings(bootstrap: str, tmp_path: Path) -> Settings:
    """Fresh topics (3 partitions) under a unique prefix, and a home in tmp_path."""
    settings = Settings(
        bootstrap_servers=bootstrap, topic_prefix=unique("twp") + ".", partitions=3, home=tmp_path / "home"
    )
    await create_topics(settings)
    return settings


class Log:
    """Writes events as the processor (transactions) and the workers (plain idempotent sends) would."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.processor = AIOKafkaProducer(
            bootstrap_servers=settings.bootstrap_servers, transactional_id=unique("proc")
        )
        self.worker = AIOKafkaProducer(bootstrap_servers=settings.bootstrap_servers, enable_idempotence=True)

    async def write(self, *events: object) -> None:
        """Processor events in one committed transaction; worker events acknowledged one by one."""
        async with self.processor.transaction():
            for event in events:
                if TOPIC_OF[type(event)] in ("runs", "job-events", "dlq"):
                    await self._send(self.processor, event)
        for event in events:
            if TOPIC_OF[type(event)] in ("outcomes", "logs"):
                await (await self._send(self.worker, event))

    async def _send(self, producer: AIOKafkaProducer, event: object) -> object:
        topic = self.settings.topic(TOPIC_OF[type(event)])
        key = getattr(event, "job_id", None) or event.key.decode()  # type: ignore[attr-defined]
        return await producer.send(topic, mappers.to_bytes(event), key=key.encode())  # type: ignore[arg-type]


@pytest.fixture
async def log(settings: Settings) -> AsyncIterator[Log]:
    writer = Log(settings)
    await writer.processor.start()
    await writer.worker.start()
    yield writer
    await writer.worker.stop()
    await writer.processor.stop()


async def fold_into(settings: Settings, path: Path) -> None:
    """Run the projector until it has caught up with the end offsets, then close the store."""
    kv = RocksKV(path)
    try:
        await runtime.fold_to_end(settings, kv)
    finally:
        kv.close()


def contents(path: Path) -> list[tuple[bytes, bytes]]:
    kv = RocksKV(path)
    try:
        return list(kv.items())
    finally:
        kv.close()


ROUND_ONE: list[object] = [
    *life("job-a", "payments", "r-a1"),
    *life("job-b", "search", "r-b1"),
    accepted("job-c", team="payments", command_id="c-c"),
    rejected("job-z", "c-z"),
]
ROUND_TWO: list[object] = [
    changed("job-a", JobStatus.PAUSED, command_id="c-pause"),
    due("r-c1", "job-c", team="payments"),
    started("r-c1", "job-c"),
    heartbeat("r-c1", "job-c"),
    failed("r-c1", "job-c"),
    due("r-c1", "job-c", attempt=2, team="payments", trigger=RunTrigger.RETRY),
    started("r-c1", "job-c", attempt=2, worker="w-2"),
    failed("r-c1", "job-c", attempt=2, worker="w-2"),
    settled("r-c1", "job-c", status=RunStatus.FAILED, attempts=2),
    dead_letter("job-c"),
    *[chunk("r-c1", "job-c", attempt=2, seq=s, data=f"try {s}\n") for s in range(3)],
]


async def test_projection_shows_what_was_written(settings: Settings, log: Log) -> None:
    """Jobs, runs with attempts, logs, answers, stats and dead letters appear after folding."""
    await log.write(*ROUND_ONE, *ROUND_TWO)
    path = settings.home / "projections"
    await fold_into(settings, path)
    model = ReadModel(RocksKV(path))
    try:
        job = model.job("job-a")
        assert job is not None
        assert (job.status, job.latest_run_id) == ("paused", "r-a1")
        run = model.run("r-c1")
        assert run is not None
        assert (run.status, [a.worker_id for a in run.attempts]) == ("failed", ["w-1", "w-2"])
        assert [line.data for line in model.logs("r-c1", None, 10).items] == ["try 0\n", "try 1\n", "try 2\n"]
        assert model.answer("c-z") is not None
        assert model.answer("c-pause") is not None
        counts = model.stats("payments")
        assert (
            counts.get("attempts.failed"),
            counts.get("dead_letters"),
            counts.get("attempts.retried"),
        ) == (2, 1, 1)
        listed = model.jobs(JobFilter(team="payments"), None, 10).items
        assert [j.job_id for j in listed] == ["job-a", "job-c"]
        assert [d.job_id for d in model.dead_letters("payments", None, 10).items] == ["job-c"]
    finally:
        model.kv.close()


async def test_live_projection_equals_rebuilt_one(settings: Settings, log: Log, tmp_path: Path) -> None:
    """Folding in rounds as events arrive, with restarts, gives the same bytes as one rebuild."""
    live = tmp_path / "live"
    await log.write(*ROUND_ONE)
    await fold_into(settings, live)  # round one, then the projector stops
    await log.write(*ROUND_TWO[:5])
    await fold_into(settings, live)  # restarts from the offsets stored with the data
    await log.write(*ROUND_TWO[5:])
    await fold_into(settings, live)
    rebuilt = tmp_path / "rebuilt"
    await fold_into(settings, rebuilt)
    assert contents(live) == contents(rebuilt)
    assert len(contents(live)) > 30


async def test_rebuild_command_swaps_in_an_identical_store(settings: Settings, log: Log) -> None:
    """``rebuild`` folds the log again beside the live store and swaps it in: same content."""
    await log.write(*ROUND_ONE, *ROUND_TWO)
    path = runtime.projections_path(settings)
    await fold_into(settings, path)
    before = contents(path)
    result = await runtime.rebuild(settings)
    assert result.path == path
    assert result.folded == len(ROUND_ONE) + len(ROUND_TWO)
    assert contents(path) == before


async def test_rebuild_refuses_while_a_projector_holds_the_store(settings: Settings) -> None:
    """A rebuild while the live projector runs fails instead of folding beside a moving store."""
    path = runtime.projections_path(settings)
    holder = RocksKV(path)
    try:
        with pytest.raises(Exception, match=r"(?i)lock"):
            await runtime.rebuild(settings)
    finally:
        holder.close()


async def test_lag_reaches_zero_on_transactional_topics(settings: Settings, log: Log) -> None:
    """After catching up the measured lag is zero, commit markers included."""
    await log.write(*ROUND_ONE)
    path = settings.home / "projections"
    kv = RocksKV(path)
    probe = runtime.new_consumer(settings)
    await probe.start()
    try:
        metrics = ProjectionMetrics.create()
        before = await runtime.update_lag(settings, probe, ReadModel(kv), metrics)
        assert sum(before.values()) >= len(ROUND_ONE)
        await runtime.fold_to_end(settings, kv)
        after = await runtime.update_lag(settings, probe, ReadModel(kv), metrics)
        assert after == dict.fromkeys(PROJECTED_TOPICS, 0)
    finally:
        await probe.stop()
        kv.close()


async def test_undecodable_records_are_skipped_not_fatal(settings: Settings, log: Log) -> None:
    """A garbage record on a projected topic is counted and skipped; folding goes on."""
    await log.worker.send_and_wait(settings.topic("outcomes"), b"not avro", key=b"job-a")
    await log.write(*ROUND_ONE)
    kv = RocksKV(settings.home / "projections")
    try:
        projector = await runtime.fold_to_end(settings, kv)
        assert projector.undecodable == 1
        assert ReadModel(kv).job("job-a") is not None
    finally:
        kv.close()
