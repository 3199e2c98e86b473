"""Reading the committed log from the live topics (read_committed), and choosing an export slice.

Reads go from each partition's beginning to its end as of the start of the read (the last
stable offset, so open transactions are not waited for). With a job id only that job's
partition of each topic is read, found with Kafka's default partitioner as producers do.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from tickwheel.replay.log import LogRecord, Role, role_of
from tickwheel.replay.progress import Progress
from tickwheel.replay.synth import partition_for
from tickwheel.schemas import mappers
from tickwheel.schemas.codec import CodecError
from tickwheel.schemas.model import JobAccepted, JobChanged, JobStatus
from tickwheel.settings import Settings

STALL_S = 30.0  # no new record for this long while short of the end offsets: give up
_LIVE = (JobStatus.ACTIVE, JobStatus.PAUSED)


class LiveReadError(RuntimeError):
    """The topics could not be read (broker unreachable, topic missing, read stalled)."""


async def read_topics(
    settings: Settings,
    roles: Sequence[Role],
    *,
    job_id: str | None = None,
    progress: Progress | None = None,
) -> list[LogRecord]:
    """Every committed record of the topics playing ``roles`` (only ``job_id``'s, if given)."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=settings.bootstrap_servers, isolation_level="read_committed",
        enable_auto_commit=False, max_partition_fetch_bytes=8 * 1024 * 1024,
        request_timeout_ms=30_000,
    )
    await consumer.start()
    try:
        partitions = await _partitions(settings, roles, job_id)
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        start = await consumer.beginning_offsets(partitions)
        end = await consumer.end_offsets(partitions)
        if progress is not None:
            progress.total = sum(end[tp] - start[tp] for tp in partitions)
        key = None if job_id is None else job_id.encode()
        return await _drain(consumer, partitions, end, key, progress)
    finally:
        await consumer.stop()


async def _read_so_far(consumer: AIOKafkaConsumer, partitions: list[TopicPartition],
                       start: dict[TopicPartition, int]) -> int:
    """Offsets consumed so far: transaction markers take offsets too, so count positions."""
    return sum([await consumer.position(tp) - start[tp] for tp in partitions])


async def _partitions(settings: Settings, roles: Sequence[Role],
                      job_id: str | None) -> list[TopicPartition]:
    topics = [settings.topic(role.value) for role in roles]
    counts = await _partition_counts(settings, topics)
    found: list[TopicPartition] = []
    for topic in topics:
        count = counts.get(topic, 0)
        if not count:
            raise LiveReadError(f"topic {topic} does not exist on {settings.bootstrap_servers}")
        ids = [partition_for(job_id, count)] if job_id is not None else list(range(count))
        found += [TopicPartition(topic, p) for p in ids]
    return found


async def _partition_counts(settings: Settings, topics: list[str]) -> dict[str, int]:
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.bootstrap_servers,
                                request_timeout_ms=30_000)
    await admin.start()
    try:
        described = await admin.describe_topics(topics)
    finally:
        await admin.close()
    return {t["topic"]: len(t["partitions"]) for t in described if t.get("error_code", 0) == 0}


async def _drain(consumer: AIOKafkaConsumer, partitions: list[TopicPartition],
                 end: dict[TopicPartition, int], key: bytes | None,
                 progress: Progress | None) -> list[LogRecord]:
    records: list[LogRecord] = []
    last_progress = time.monotonic()
    begin = {tp: await consumer.position(tp) for tp in partitions}
    shown = 0
    while pending := [tp for tp in partitions if await consumer.position(tp) < end[tp]]:
        batch = await consumer.getmany(*pending, timeout_ms=1_000, max_records=10_000)
        fetched = 0
        for tp, found in batch.items():
            for r in found:
                if r.offset >= end[tp]:
                    continue  # committed after the read began: not part of this snapshot
                fetched += 1
                if key is None or r.key == key:
                    records.append(LogRecord(r.topic, r.partition, r.offset, r.timestamp,
                                             r.key, r.value))
        if progress is not None:
            done = await _read_so_far(consumer, partitions, begin)
            progress.advance(done - shown)
            shown = done
        if fetched:
            last_progress = time.monotonic()
        elif time.monotonic() - last_progress > STALL_S:
            raise LiveReadError(f"read stalled short of the end offsets on {pending}")
    return records


def select_window(records: Iterable[LogRecord], from_ms: int, to_ms: int) -> list[LogRecord]:
    """An export slice: records up to ``to_ms`` of every job seen in ``[from_ms, to_ms]`` or
    live (active or paused) at ``from_ms``, with those jobs' earlier history, so that an
    archive can be folded and verified on its own. Unkeyed records only from the window.
    """
    kept = [r for r in records if r.timestamp <= to_ms]
    jobs = {r.key for r in kept if r.timestamp >= from_ms and r.key is not None}
    jobs |= _live_at(kept, from_ms)
    chosen = [r for r in kept if _keep(r, jobs, from_ms)]
    # Time order reads best in an archive; replay itself re-sorts each topic by offset.
    return sorted(chosen, key=lambda r: (r.timestamp, r.topic, r.partition, r.offset))


def _keep(record: LogRecord, jobs: set[bytes], from_ms: int) -> bool:
    if record.key is None:
        return record.timestamp >= from_ms
    return record.key in jobs


def _live_at(records: Iterable[LogRecord], at_ms: int) -> set[bytes]:
    """Keys of jobs whose last lifecycle answer before ``at_ms`` left them active or paused."""
    status: dict[bytes, JobStatus] = {}
    for record in sorted(records, key=lambda r: (r.partition, r.offset)):
        if record.timestamp >= at_ms or record.key is None or record.value is None:
            continue
        if role_of(record.topic) is not Role.JOB_EVENTS:
            continue
        try:
            event = mappers.job_event_from_bytes(record.value)
        except CodecError:
            continue
        if isinstance(event, JobAccepted):  # a create, or an update (which keeps a pause)
            paused = status.get(record.key) is JobStatus.PAUSED
            status[record.key] = JobStatus.PAUSED if paused else JobStatus.ACTIVE
        elif isinstance(event, JobChanged):
            status[record.key] = event.status
    return {key for key, value in status.items() if value in _LIVE}
