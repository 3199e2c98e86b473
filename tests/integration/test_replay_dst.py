"""``why`` for DST-shaped occurrences, against the real broker.

The processor takes its clock from the wall, so a spring-forward night cannot be made to
happen on a live processor. Instead this test drives the pure core (``core.step``, through
``SyntheticProcessor``) over New York's 2026 DST changes and writes each step to a fresh
topic set *exactly as the processor would*: one Kafka transaction per step, the input, the
step's events to runs/job-events/dlq in emission order, then the changed states to the
changelog, each record on the job's partition with the step's timestamp. Replay then reads
the live topics (read_committed) and, after ``export``, the archive.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from tests.fixtures.replay.scenarios import dst_history
from tests.integration.harness import Deployment
from tickwheel.replay import Replayer, Source, Verdict
from tickwheel.replay.cli import main
from tickwheel.replay.live import read_topics
from tickwheel.replay.log import DEFAULT_ROLES, LogRecord
from tickwheel.replay.times import parse_time
from tickwheel.settings import Settings

pytestmark = pytest.mark.broker


async def _keep_old_records(settings: Settings) -> None:
    """The history is months old: keep time-based retention from deleting it mid-test."""
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.bootstrap_servers)
    await admin.start()
    try:
        await admin.alter_configs([
            ConfigResource(ConfigResourceType.TOPIC, settings.topic(name),
                           configs={"cleanup.policy": "delete", "retention.ms": "-1"})
            for name in ("runs", "outcomes", "job-events", "dlq")
        ])
    finally:
        await admin.close()


async def _produce(settings: Settings, transactions: list[list[LogRecord]]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=settings.bootstrap_servers,
                                transactional_id=f"{settings.app_id}.dst-writer")
    await producer.start()
    try:
        for transaction in transactions:
            async with producer.transaction():
                for record in transaction:
                    await producer.send(record.topic, record.value, key=record.key,
                                        partition=record.partition, timestamp_ms=record.timestamp)
    finally:
        await producer.stop()


async def test_why_explains_dst_shaped_occurrences_from_live_topics_and_an_export(
    bootstrap: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Shifted fire (gap=shift), gap skip, fold first pass: live and --in give the same answers."""
    deployment = await Deployment.create(bootstrap, tmp_path, partitions=2)
    settings = deployment.settings
    await _keep_old_records(settings)
    history = dst_history(prefix=settings.topic_prefix, partitions=settings.partitions)
    await _produce(settings, history.transactions)

    records = await read_topics(settings, DEFAULT_ROLES)
    assert len(records) == len(history.records)
    result = Replayer(Source(prefix=settings.topic_prefix)).replay(records)
    shifted = result.why("nightly-ny", parse_time("2026-03-08T07:20:00Z"))
    assert (shifted.verdict, shifted.scheduled_for_ms) == (Verdict.FIRED, parse_time("2026-03-08T07:00:00Z"))
    assert shifted.local_time == "2026-03-08T03:00:00-04:00"
    assert any("gap=shift fires at the first instant after the gap" in link.text for link in shifted.chain)
    skipped = result.why("skipper-ny", parse_time("2026-03-08T07:00:00Z"))
    assert (skipped.verdict, skipped.reason) == (Verdict.SKIPPED, "dst_gap")
    folded = result.why("fold-ny", parse_time("2026-11-01T06:30:00Z"))
    assert (folded.verdict, folded.local_time) == (Verdict.FIRED, "2026-11-01T01:30:00-04:00")
    report = result.verify(parse_time("2026-03-01T00:00:00Z"), parse_time("2026-11-03T00:00:00Z"))
    assert report.violations == ()

    for name, value in (("BOOTSTRAP_SERVERS", settings.bootstrap_servers),
                        ("TOPIC_PREFIX", settings.topic_prefix), ("PARTITIONS", "2")):
        monkeypatch.setenv(f"TICKWHEEL_{name}", value)
    archive = tmp_path / "dst.avro"
    assert await _cli(["export", "--from", "2026-03-01T00:00:00Z", "--to", "2026-11-03T00:00:00Z",
                       "--out", str(archive)]) == 0
    for job, at in (("nightly-ny", "2026-03-08T07:20:00Z"), ("skipper-ny", "2026-03-08T07:00:00Z"),
                    ("fold-ny", "2026-11-01T06:30:00Z")):
        live = await _json(["why", job, "--at", at, "--json"], tmp_path)
        archived = await _json(["why", job, "--at", at, "--json", "--in", str(archive)], tmp_path)
        assert archived == live


async def _cli(argv: list[str], out: Path | None = None) -> int:
    def run() -> int:
        buffer = io.StringIO()
        with contextlib.redirect_stdout(buffer):
            code = main(["replay", *argv])
        if out is not None:
            out.write_text(buffer.getvalue())
        return code

    # The CLI runs its own event loop (asyncio.run), so it gets a thread of its own here.
    return await asyncio.to_thread(run)


async def _json(argv: list[str], tmp_path: Path) -> Any:
    out = tmp_path / "answer.json"
    assert await _cli(argv, out) == 0
    return json.loads(out.read_text())
