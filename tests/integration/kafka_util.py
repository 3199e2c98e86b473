"""Small helpers for integration tests that talk to the suite's real broker."""

from __future__ import annotations

import uuid
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic


def unique(prefix: str) -> str:
    """A fresh name, so tests sharing one broker never see each other's data."""
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


async def create_topic(bootstrap: str, name: str, partitions: int = 1, **configs: str) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(name, partitions, 1, topic_configs=configs)])
    finally:
        await admin.close()


async def partition_count(bootstrap: str, topic: str) -> int:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        (described,) = await admin.describe_topics([topic])
        return len(described["partitions"])
    finally:
        await admin.close()


async def read_all(
    bootstrap: str, topic: str, *, isolation: str = "read_committed", timeout_ms: int = 10_000
) -> list[Any]:
    """Every record of ``topic`` up to its end offsets (LSO for read_committed) at call time."""
    partitions = [TopicPartition(topic, p) for p in range(await partition_count(bootstrap, topic))]
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, isolation_level=isolation, enable_auto_commit=False
    )
    await consumer.start()
    try:
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        end = await consumer.end_offsets(partitions)
        records: list[Any] = []
        while [tp for tp in partitions if await consumer.position(tp) < end[tp]]:
            batch = await consumer.getmany(timeout_ms=timeout_ms)
            if not batch:
                break
            for tp_records in batch.values():
                records.extend(tp_records)
        return records
    finally:
        await consumer.stop()


async def group_offsets(bootstrap: str, group: str) -> dict[TopicPartition, int]:
    """The committed offsets of a consumer group, read fresh from the coordinator."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        offsets = await admin.list_consumer_group_offsets(group)
        return {tp: meta.offset for tp, meta in offsets.items()}
    finally:
        await admin.close()
