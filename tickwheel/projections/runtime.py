"""The projector's shell: a read_committed consumer folding into the read model, and rebuild.

The consumer is assigned every partition of the projected topics (one read model holds all
teams, so no group member may own a subset) and seeks to the offsets stored *in* the read
model. Each poll is folded and written with those offsets as one atomic RocksDB write, so
a crash anywhere resumes exactly after the last write: exactly once into the read model.
Offsets are also committed to the consumer group now and then, only so that standard
tools show the projection's lag; the read model's own offsets are the ones used.

Positions are taken from the consumer, not from the last record: with read_committed the
position moves past transaction commit markers, which ``offset + 1`` would not, and the
lag (end offset minus position) would never reach zero on transactional topics.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.structs import OffsetAndMetadata

from tickwheel.projections.fold import Position
from tickwheel.projections.kv import RocksKV
from tickwheel.projections.metrics import ProjectionMetrics
from tickwheel.projections.readmodel import PROJECTED_TOPICS, Projector, RawRecord, ReadModel
from tickwheel.settings import Settings

log = logging.getLogger(__name__)

POLL_MS = 200
MAX_RECORDS = 2_000
GROUP_COMMIT_INTERVAL_S = 5.0
TOPIC_WAIT_S = 1.0
RESTART_PAUSE_S = 2.0


def projections_path(settings: Settings) -> Path:
    return settings.home / "projections"


def group_id(settings: Settings) -> str:
    return f"{settings.app_id}.projections"


def lag(ends: Mapping[tuple[str, int], int], positions: Mapping[tuple[str, int], int]) -> dict[str, int]:
    """Records not yet folded, per logical topic: end offset minus position (never negative)."""
    found: dict[str, int] = {}
    for (topic, partition), end in ends.items():
        behind = max(0, end - positions.get((topic, partition), 0))
        found[topic] = found.get(topic, 0) + behind
    return found


def new_consumer(settings: Settings, *, group: str | None = None) -> AIOKafkaConsumer:
    """A read_committed consumer without auto-commit, for folding or for end offsets."""
    return AIOKafkaConsumer(
        bootstrap_servers=settings.bootstrap_servers,
        group_id=group,
        isolation_level="read_committed",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )


async def projected_partitions(consumer: AIOKafkaConsumer, settings: Settings) -> list[TopicPartition] | None:
    """Every partition of the projected topics, or None while one of them does not exist."""
    # The consumer's own metadata only covers topics it already follows, and aiokafka has
    # no public way to ask about others: fetch the whole cluster's metadata once.
    cluster = await consumer._client.fetch_all_metadata()
    found: list[TopicPartition] = []
    for name in PROJECTED_TOPICS:
        topic = settings.topic(name)
        partitions = cluster.partitions_for_topic(topic)
        if not partitions:
            return None
        found.extend(TopicPartition(topic, p) for p in sorted(partitions))
    return found


async def end_offsets(consumer: AIOKafkaConsumer, settings: Settings) -> dict[tuple[str, int], int]:
    """The last stable offset of every projected partition (empty if topics are missing)."""
    partitions = await projected_partitions(consumer, settings)
    if not partitions:
        return {}
    ends = await consumer.end_offsets(partitions)
    prefix = len(settings.topic_prefix)
    return {(tp.topic[prefix:], tp.partition): int(offset) for tp, offset in ends.items()}


@dataclass
class Runner:
    """Folds the projected topics into one read-model store until stopped (or caught up)."""

    settings: Settings
    projector: Projector
    metrics: ProjectionMetrics
    executor: ThreadPoolExecutor

    async def run_forever(self, stop: asyncio.Event) -> None:
        """:meth:`run` until ``stop``, starting again after a failure (broker away, say)."""
        while not stop.is_set():
            try:
                await self.run(stop)
            except Exception:
                log.exception("projector failed; restarting from the stored offsets")
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), RESTART_PAUSE_S)

    async def run(self, stop: asyncio.Event, *, until_end: bool = False) -> None:
        """Fold until ``stop`` is set, or with ``until_end`` until the end offsets seen at start."""
        consumer = new_consumer(self.settings, group=group_id(self.settings))
        await consumer.start()
        try:
            partitions = await self._await_topics(consumer, stop)
            if partitions is None:
                return
            await self._seek(consumer, partitions)
            target = await consumer.end_offsets(partitions) if until_end else None
            await self._loop(consumer, partitions, stop, target)
        finally:
            await consumer.stop()

    async def _await_topics(
        self, consumer: AIOKafkaConsumer, stop: asyncio.Event
    ) -> list[TopicPartition] | None:
        while not stop.is_set():
            partitions = await projected_partitions(consumer, self.settings)
            if partitions is not None:
                return partitions
            log.warning("projected topics missing; run `tickwheel topics create`")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), TOPIC_WAIT_S)
        return None

    async def _seek(self, consumer: AIOKafkaConsumer, partitions: list[TopicPartition]) -> None:
        consumer.assign(partitions)
        stored = await self._call(ReadModel(self.projector.kv).positions)
        for tp in partitions:
            offset = stored.get((self._logical(tp.topic), tp.partition))
            if offset is None:
                await consumer.seek_to_beginning(tp)
            else:
                consumer.seek(tp, offset)

    async def _loop(
        self,
        consumer: AIOKafkaConsumer,
        partitions: list[TopicPartition],
        stop: asyncio.Event,
        target: dict[TopicPartition, int] | None,
    ) -> None:
        last_commit = time.monotonic()
        written: dict[TopicPartition, int] = {}
        while not stop.is_set():
            batch = await consumer.getmany(timeout_ms=POLL_MS, max_records=MAX_RECORDS)
            positions = {tp: await consumer.position(tp) for tp in partitions}
            if batch or positions != written:  # an idle poll has nothing to write
                await self._fold(batch, positions)
                written = positions
            if time.monotonic() - last_commit > GROUP_COMMIT_INTERVAL_S:
                await self._commit_group(consumer, positions)
                last_commit = time.monotonic()
            if target is not None and all(positions[tp] >= end for tp, end in target.items()):
                await self._commit_group(consumer, positions)
                return

    async def _fold(
        self, batch: Mapping[TopicPartition, list[Any]], positions: Mapping[TopicPartition, int]
    ) -> None:
        records = [
            RawRecord(Position(self._logical(tp.topic), tp.partition, r.offset), r.value)
            for tp, rows in batch.items()
            for r in rows
        ]
        logical = {(self._logical(tp.topic), tp.partition): offset for tp, offset in positions.items()}
        started = time.perf_counter()
        undecodable = self.projector.undecodable
        count = await self._call(self.projector.apply, records, logical)
        self.metrics.batch_seconds.observe(time.perf_counter() - started)
        self.metrics.folded.inc(count)
        self.metrics.undecodable.inc(self.projector.undecodable - undecodable)

    async def _commit_group(
        self, consumer: AIOKafkaConsumer, positions: Mapping[TopicPartition, int]
    ) -> None:
        offsets = {tp: OffsetAndMetadata(offset, "") for tp, offset in positions.items()}
        try:
            await consumer.commit(offsets)
        except Exception as exc:  # noqa: BLE001 - informational only; the read model holds the truth
            log.debug("group offset commit failed: %s", exc)

    def _logical(self, topic: str) -> str:
        return topic[len(self.settings.topic_prefix) :]

    async def _call(self, fn: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self.executor, fn, *args)


async def update_lag(
    settings: Settings, consumer: AIOKafkaConsumer, model: ReadModel, metrics: ProjectionMetrics
) -> dict[str, int]:
    """Measure the projection lag now, set the gauge, and return it per topic."""
    ends = await end_offsets(consumer, settings)
    positions = await asyncio.to_thread(model.positions)
    behind = lag(ends, positions)
    for topic in PROJECTED_TOPICS:
        metrics.lag.labels(topic=topic).set(behind.get(topic, 0))
    return behind


async def serve(settings: Settings, stop: asyncio.Event, metrics: ProjectionMetrics) -> None:
    """``tickwheel projections``: fold continuously, measuring lag every few seconds."""
    kv = RocksKV(projections_path(settings))
    executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="projections-db")
    runner = Runner(settings, Projector(kv), metrics, executor)
    probe = new_consumer(settings)
    await probe.start()
    lag_task = asyncio.create_task(_measure_lag(settings, probe, ReadModel(kv), metrics, stop))
    try:
        await runner.run_forever(stop)
    finally:
        stop.set()
        await lag_task
        await probe.stop()
        executor.shutdown(wait=True)
        kv.close()


async def _measure_lag(
    settings: Settings,
    probe: AIOKafkaConsumer,
    model: ReadModel,
    metrics: ProjectionMetrics,
    stop: asyncio.Event,
) -> None:
    while not stop.is_set():
        try:
            await update_lag(settings, probe, model, metrics)
        except Exception as exc:  # noqa: BLE001 - a missed measurement is retried next round
            log.warning("projection lag measurement failed: %s", exc)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), GROUP_COMMIT_INTERVAL_S)


@dataclass(frozen=True, slots=True)
class RebuildResult:
    folded: int
    undecodable: int
    seconds: float
    path: Path


async def fold_to_end(settings: Settings, kv: RocksKV, metrics: ProjectionMetrics | None = None) -> Projector:
    """Fold every projected record up to the end offsets seen at start into ``kv``."""
    executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="projections-rebuild")
    projector = Projector(kv)
    try:
        runner = Runner(settings, projector, metrics or ProjectionMetrics.create(), executor)
        await runner.run(asyncio.Event(), until_end=True)
    finally:
        executor.shutdown(wait=True)
    return projector


async def rebuild(settings: Settings, path: Path | None = None) -> RebuildResult:
    """Fold the log again into a fresh store beside ``path``, then swap it in.

    The live projector must be stopped: it holds the store's lock, and opening the store
    here first is how that is checked (RocksDB refuses a second writer).
    """
    target = path or projections_path(settings)
    if target.exists():
        RocksKV(target).close()  # raises if a live projector holds the lock
    fresh = target.with_name(target.name + ".rebuild")
    shutil.rmtree(fresh, ignore_errors=True)
    started = time.perf_counter()
    kv = RocksKV(fresh)
    try:
        projector = await fold_to_end(settings, kv)
    finally:
        kv.close()
    retired = target.with_name(target.name + ".old")
    shutil.rmtree(retired, ignore_errors=True)
    if target.exists():
        target.rename(retired)
    fresh.rename(target)
    shutil.rmtree(retired, ignore_errors=True)
    return RebuildResult(projector.folded, projector.undecodable, time.perf_counter() - started, target)
