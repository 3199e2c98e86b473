"""The Kafka side of a worker's reports: outcomes and log chunks, batched per partition.

At a hot instant a worker sends thousands of RunStarted (and then RunSucceeded) within a
few hundred milliseconds. One ``send_and_wait`` per event costs a coroutine, a per-message
future, a partitioner call and a wake-up per ack inside the client; worse, when a partition's
batch fills, every sender waiting on it is woken again for each drain. So :class:`KafkaSink`
coalesces instead: an event is encoded by its caller, queued on the *lane* of its
(topic, partition), and the lane's one task hands everything queued meanwhile to the
producer as one closed batch (``send_batch``), then settles each caller's future when
that batch is acknowledged.

What does not change: each caller still waits for *its* event's ack (the lease protocol
needs the RunStarted on the broker before the executor is called), with the producer's
``acks=all`` and idempotence; events of one partition reach the log in the order they
were queued (a lane has one batch in flight at a time), so an attempt's heartbeat cannot
land after its outcome; and a caller that stops waiting (its own timeout) only abandons
the wait, as with a cancelled ``send_and_wait``: the event may still be written.
"""

from __future__ import annotations

import asyncio
import functools
from collections import deque
from dataclasses import dataclass
from typing import Any

from aiokafka.errors import KafkaError
from aiokafka.partitioner import DefaultPartitioner

from tickwheel.schemas.mappers import to_bytes
from tickwheel.schemas.model import LogChunk, Outcome, RunStarted

PARTITIONS_TTL_S = 60.0
_DEFAULT_PARTITIONER = DefaultPartitioner()


@dataclass(frozen=True, slots=True)
class _Pending:
    key: bytes
    value: bytes
    acked: asyncio.Future[None]


class KafkaSink:
    """Outcomes and log chunks keyed by job id (co-partitioned with the job's runs).

    RunStarted may go through a producer of its own (``start_producer``): a producer has
    one request in flight per broker, so a lease would otherwise wait behind the outcomes
    and heartbeats already queued, while its run holds a worker slot doing nothing. An
    attempt's later events are sent only once its RunStarted is acknowledged, so the
    split cannot reorder them; heartbeats, outcomes and logs share one producer, so their
    order holds.
    """

    def __init__(
        self, producer: Any, outcomes_topic: str, logs_topic: str, *, start_producer: Any = None
    ) -> None:
        self.producer = producer
        self.start_producer = start_producer if start_producer is not None else producer
        self.outcomes_topic = outcomes_topic
        self.logs_topic = logs_topic
        self._partitions: dict[str, tuple[float, tuple[int, ...]]] = {}  # topic -> (looked up at, ids)
        self._lanes: dict[tuple[Any, str, int], _Lane] = {}

    async def outcome(self, event: Outcome) -> None:
        producer = self.start_producer if isinstance(event, RunStarted) else self.producer
        await self._send(producer, self.outcomes_topic, event.job_id.encode(), to_bytes(event))

    async def log(self, chunk: LogChunk) -> None:
        await self._send(self.producer, self.logs_topic, chunk.job_id.encode(), to_bytes(chunk))

    async def _send(self, producer: Any, topic: str, key: bytes, value: bytes) -> None:
        """Queue one record on its partition's lane; return once the broker acknowledged it."""
        partition = _partition(key, await self._partition_ids(topic))
        lane = self._lanes.get((producer, topic, partition))
        if lane is None:
            lane = self._lanes[(producer, topic, partition)] = _Lane(producer, topic, partition)
        acked: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        lane.put(_Pending(key, value, acked))
        await acked

    async def _partition_ids(self, topic: str) -> tuple[int, ...]:
        """The topic's partitions, looked up again now and then (a topic may grow)."""
        now = asyncio.get_running_loop().time()
        known = self._partitions.get(topic)
        if known is None or now - known[0] > PARTITIONS_TTL_S:
            known = self._partitions[topic] = (now, tuple(sorted(await self.producer.partitions_for(topic))))
        return known[1]


@functools.lru_cache(maxsize=65_536)
def _partition(key: bytes, partitions: tuple[int, ...]) -> int:
    """The producer's default partitioner (murmur2, in Python), once per job for both its events."""
    return int(_DEFAULT_PARTITIONER(key, partitions, partitions))


class _Lane:
    """One (topic, partition): what was queued meanwhile goes out as one batch, in queue order."""

    def __init__(self, producer: Any, topic: str, partition: int) -> None:
        self.producer = producer
        self.topic = topic
        self.partition = partition
        self.queue: deque[_Pending] = deque()
        self.batches = 0  # handed to the producer so far
        self._task: asyncio.Task[None] | None = None

    def put(self, item: _Pending) -> None:
        self.queue.append(item)
        if self._task is None or self._task.done():
            # Created, not yet run: whatever is queued before it first runs joins its batch.
            self._task = asyncio.create_task(self._drain(), name=f"sink-{self.topic}-{self.partition}")

    async def _drain(self) -> None:
        while self.queue:
            builder, items = self._take_batch()
            try:
                # Returns once the partition's previous batch has left the producer's queue, so
                # batches keep their order, and what arrives meanwhile makes the next batch.
                sent = await self.producer.send_batch(builder, self.topic, partition=self.partition)
            except asyncio.CancelledError:
                _settle(items, KafkaError("the sink stopped before this record was queued"))
                raise
            except Exception as exc:  # noqa: BLE001 - not queued: every caller of this batch is told why
                _settle(items, exc)
                continue
            self.batches += 1
            sent.add_done_callback(lambda done, items=items: _settle_from(items, done))

    def _take_batch(self) -> tuple[Any, list[_Pending]]:
        """Records from the head of the queue that fit one batch (at least one, however large)."""
        builder = self.producer.create_batch()
        items: list[_Pending] = []
        while self.queue:
            head = self.queue[0]
            if builder.append(key=head.key, value=head.value, timestamp=None) is None:
                break  # full
            items.append(self.queue.popleft())
        builder.close()
        return builder, items


def _settle_from(items: list[_Pending], sent: asyncio.Future[Any]) -> None:
    if sent.cancelled():  # the producer was closed under it
        _settle(items, KafkaError("batch cancelled before it was acknowledged"))
    else:
        _settle(items, sent.exception())


def _settle(items: list[_Pending], error: BaseException | None) -> None:
    for item in items:
        if item.acked.done():
            continue  # its caller gave up waiting
        if error is None:
            item.acked.set_result(None)
        else:
            item.acked.set_exception(error)
