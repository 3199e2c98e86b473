"""KafkaSink with a fake producer: batched per partition, each caller released only by its ack."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiokafka.partitioner import DefaultPartitioner

from tickwheel.schemas.mappers import outcome_from_bytes
from tickwheel.schemas.model import LogChunk, RunHeartbeat, RunStarted, RunSucceeded
from tickwheel.workers.sink import KafkaSink

PARTITIONS = (0, 1, 2, 3)


class FakeBuilder:
    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.records: list[tuple[bytes, bytes]] = []
        self.closed = False

    def append(self, *, key: bytes, value: bytes, timestamp: Any) -> object | None:
        if self.closed or (self.records and len(self.records) >= self.capacity):
            return None
        self.records.append((key, value))
        return object()

    def close(self) -> None:
        self.closed = True


class FakeProducer:
    """Records each batch handed over; the test acknowledges (or fails) it."""

    def __init__(self, capacity: int = 100) -> None:
        self.capacity = capacity
        self.batches: list[tuple[str, int, FakeBuilder, asyncio.Future[Any]]] = []
        self.submitted = asyncio.Event()

    async def partitions_for(self, topic: str) -> set[int]:
        return set(PARTITIONS)

    def create_batch(self) -> FakeBuilder:
        return FakeBuilder(self.capacity)

    async def send_batch(self, batch: FakeBuilder, topic: str, *, partition: int) -> asyncio.Future[Any]:
        assert batch.closed
        sent: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.batches.append((topic, partition, batch, sent))
        self.submitted.set()
        return sent

    def ack_all(self) -> None:
        for *_, sent in self.batches:
            if not sent.done():
                sent.set_result(None)


def _started(job: str) -> RunStarted:
    return RunStarted(f"run-{job}", job, 1, "w", 60_000, 1_000)


def _partition(job: str) -> int:
    return int(DefaultPartitioner()(job.encode(), list(PARTITIONS), list(PARTITIONS)))


async def _until(producer: FakeProducer, predicate: Any) -> None:
    """Until ``predicate`` holds; it can only change when a batch is handed over."""
    async with asyncio.timeout(5):
        while not predicate():
            producer.submitted.clear()
            await producer.submitted.wait()


async def test_records_asked_together_share_one_batch_per_partition() -> None:
    """Sends started in one loop iteration go out as one batch per partition, keyed as the producer would."""
    producer = FakeProducer()
    sink = KafkaSink(producer, "outcomes", "logs")
    jobs = [f"job-{i}" for i in range(40)]
    sends = [asyncio.create_task(sink.outcome(_started(job))) for job in jobs]
    await _until(producer, lambda: sum(len(b.records) for _, _, b, _ in producer.batches) == len(jobs))
    assert len(producer.batches) == len({_partition(job) for job in jobs})
    for topic, partition, batch, _ in producer.batches:
        assert topic == "outcomes"
        assert {key.decode() for key, _ in batch.records} == {j for j in jobs if _partition(j) == partition}
    producer.ack_all()
    await asyncio.gather(*sends)


async def test_a_caller_returns_only_when_its_own_batch_is_acknowledged() -> None:
    """Until the broker acknowledges the batch holding its record, outcome() has not returned."""
    producer = FakeProducer()
    sink = KafkaSink(producer, "outcomes", "logs")
    send = asyncio.create_task(sink.outcome(_started("job-a")))
    await producer.submitted.wait()
    for _ in range(5):
        await asyncio.sleep(0)
    assert not send.done()
    producer.batches[0][3].set_result(None)
    await asyncio.wait_for(send, 5)
    assert outcome_from_bytes(producer.batches[0][2].records[0][1]) == _started("job-a")


async def test_a_failed_batch_fails_every_caller_in_it() -> None:
    """A batch the broker rejects raises in each of its callers, not only the first."""
    producer = FakeProducer()
    sink = KafkaSink(producer, "outcomes", "logs")
    same_partition = [j for j in (f"job-{i}" for i in range(50)) if _partition(j) == 0][:3]
    sends = [asyncio.create_task(sink.outcome(_started(job))) for job in same_partition]
    await producer.submitted.wait()
    producer.batches[0][3].set_exception(OSError("not enough replicas"))
    results = await asyncio.gather(*sends, return_exceptions=True)
    assert [type(r) for r in results] == [OSError] * 3


async def test_a_full_batch_splits_and_order_is_kept_within_a_partition() -> None:
    """Records beyond a batch's capacity follow in later batches of the same lane, in the order queued."""
    producer = FakeProducer(capacity=2)
    sink = KafkaSink(producer, "outcomes", "logs")
    job = "job-1"
    events = [RunHeartbeat(f"run-{job}", job, 1, "w", 60_000 + i, i) for i in range(5)]
    sends = [asyncio.create_task(sink.outcome(event)) for event in events]
    await _until(producer, lambda: sum(len(b.records) for _, _, b, _ in producer.batches) == 5)
    sizes = [len(batch.records) for _, _, batch, _ in producer.batches]
    assert sizes == [2, 2, 1]
    sent = [outcome_from_bytes(value) for _, _, batch, _ in producer.batches for _, value in batch.records]
    assert sent == events
    producer.ack_all()
    await asyncio.gather(*sends)


async def test_leases_use_their_own_producer_and_the_rest_share_one() -> None:
    """RunStarted goes through the start producer; heartbeats, outcomes and log chunks through the other."""
    reports, starts = FakeProducer(), FakeProducer()
    sink = KafkaSink(reports, "outcomes", "logs", start_producer=starts)
    sends = [
        asyncio.create_task(sink.outcome(_started("job-a"))),
        asyncio.create_task(sink.outcome(RunSucceeded("run-job-a", "job-a", 1, "w", 2_000, ""))),
        asyncio.create_task(sink.log(LogChunk("run-job-a", "job-a", 1, 0, 2_000, "hi", False))),
    ]
    await _until(starts, lambda: len(starts.batches) == 1)
    await _until(reports, lambda: len(reports.batches) == 2)
    assert isinstance(outcome_from_bytes(starts.batches[0][2].records[0][1]), RunStarted)
    assert sorted(topic for topic, *_ in reports.batches) == ["logs", "outcomes"]
    starts.ack_all()
    reports.ack_all()
    await asyncio.gather(*sends)


async def test_a_caller_that_stops_waiting_leaves_the_others_unharmed() -> None:
    """A send abandoned by its caller's timeout still goes out; the rest of its batch is acknowledged."""
    producer = FakeProducer()
    sink = KafkaSink(producer, "outcomes", "logs")
    jobs = [j for j in (f"job-{i}" for i in range(50)) if _partition(j) == 1][:2]
    impatient = asyncio.create_task(sink.outcome(_started(jobs[0])))
    patient = asyncio.create_task(sink.outcome(_started(jobs[1])))
    await producer.submitted.wait()
    impatient.cancel()
    with pytest.raises(asyncio.CancelledError):
        await impatient
    producer.ack_all()
    await asyncio.wait_for(patient, 5)
    assert len(producer.batches[0][2].records) == 2
