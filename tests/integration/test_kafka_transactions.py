"""Kafka transactions with aiokafka against the real broker: the guarantees the processor uses."""

from __future__ import annotations

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaError, ProducerFenced

from tests.integration.kafka_util import create_topic, group_offsets, read_all, unique

pytestmark = pytest.mark.broker


async def test_committed_records_visible_aborted_never(bootstrap: str) -> None:
    """read_committed sees a committed transaction's records and never an aborted one's."""
    topic = unique("txn")
    await create_topic(bootstrap, topic)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=unique("tid"))
    await producer.start()
    try:
        async with producer.transaction():
            for i in range(10):
                await producer.send(topic, f"committed-{i}".encode())
        await producer.begin_transaction()
        for i in range(10):
            await producer.send(topic, f"aborted-{i}".encode())
        await producer.abort_transaction()
        async with producer.transaction():
            await producer.send(topic, b"after-abort")
    finally:
        await producer.stop()
    committed = [r.value.decode() for r in await read_all(bootstrap, topic)]
    uncommitted = [r.value.decode() for r in await read_all(bootstrap, topic, isolation="read_uncommitted")]
    assert committed == [f"committed-{i}" for i in range(10)] + ["after-abort"]
    assert sum(v.startswith("aborted-") for v in uncommitted) == 10


async def test_second_producer_with_same_transactional_id_fences_the_first(bootstrap: str) -> None:
    """A new owner's InitProducerId fences the old one: its commit fails, its writes stay invisible."""
    topic = unique("fence")
    await create_topic(bootstrap, topic)
    tid = unique("tid")
    old = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=tid)
    new = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=tid)
    await old.start()
    try:
        await old.begin_transaction()
        await old.send_and_wait(topic, b"zombie-before-fence")
        await new.start()  # bumps the epoch: the old producer's open transaction is aborted
        async with new.transaction():
            await new.send(topic, b"new-owner")
        with pytest.raises((ProducerFenced, KafkaError)):
            await _send_and_commit(old, topic, b"zombie-after-fence")
    finally:
        await new.stop()
        await old.stop()
    committed = [r.value for r in await read_all(bootstrap, topic)]
    assert committed == [b"new-owner"]


async def _send_and_commit(producer: AIOKafkaProducer, topic: str, value: bytes) -> None:
    await producer.send_and_wait(topic, value)
    await producer.commit_transaction()


async def test_send_offsets_to_transaction_moves_group_offsets_atomically(bootstrap: str) -> None:
    """Input offsets commit with the output in one transaction; an abort moves neither."""
    source, sink, group = unique("in"), unique("out"), unique("group")
    await create_topic(bootstrap, source)
    await create_topic(bootstrap, sink)
    feeder = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await feeder.start()
    for i in range(6):
        await feeder.send_and_wait(source, str(i).encode())
    await feeder.stop()

    tp = TopicPartition(source, 0)
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
        isolation_level="read_committed", auto_offset_reset="earliest",
    )
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=unique("tid"))
    await consumer.start()
    await producer.start()
    try:
        consumer.assign([tp])
        records = (await consumer.getmany(tp, timeout_ms=10_000, max_records=3))[tp]
        assert len(records) == 3
        async with producer.transaction():
            for record in records:
                await producer.send(sink, record.value)
            await producer.send_offsets_to_transaction({tp: records[-1].offset + 1}, group)
        assert (await group_offsets(bootstrap, group)).get(tp) == 3

        rest = (await consumer.getmany(tp, timeout_ms=10_000, max_records=3))[tp]
        await producer.begin_transaction()
        for record in rest:
            await producer.send(sink, record.value)
        await producer.send_offsets_to_transaction({tp: rest[-1].offset + 1}, group)
        await producer.abort_transaction()
        assert (await group_offsets(bootstrap, group)).get(tp) == 3
    finally:
        await producer.stop()
        await consumer.stop()
    assert [r.value for r in await read_all(bootstrap, sink)] == [b"0", b"1", b"2"]
