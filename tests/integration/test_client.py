"""The client library's bulk path writes each command where Kafka's default partitioner would."""

from __future__ import annotations

from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer

from tests.integration.harness import Deployment, create_command, now_ms, one_time_spec
from tests.integration.kafka_util import read_all
from tickwheel.client import CommandClient
from tickwheel.schemas import mappers

pytestmark = pytest.mark.broker


async def test_submit_many_partitions_like_send(bootstrap: str, tmp_path: Path) -> None:
    """Each command lands on the partition Kafka's default partitioner gives its job id."""
    deployment = await Deployment.create(bootstrap, tmp_path, partitions=5)
    commands = [create_command(f"bulk-{i}", one_time_spec(now_ms() + 3_600_000)) for i in range(300)]
    async with CommandClient(deployment.settings, principal="t") as client:
        ids = await client.submit_many(commands)  # type: ignore[arg-type]
    assert ids == [c.meta.command_id for c in commands]
    probe = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await probe.start()
    try:
        expected = {}
        for command in commands[:40]:
            meta = await probe.send_and_wait(
                deployment.settings.topic("dlq"), b"probe", key=command.meta.job_id.encode()
            )
            expected[command.meta.job_id] = meta.partition
    finally:
        await probe.stop()
    records = await read_all(bootstrap, deployment.settings.topic("commands"))
    landed = {mappers.command_from_bytes(r.value).meta.job_id: r.partition for r in records}
    assert len(records) == len(commands)
    assert {job: landed[job] for job in expected} == expected
