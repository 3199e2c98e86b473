"""The gateway on the real broker: commands and audit on the log, answers through the projection.

A small stand-in processor consumes ``commands`` and answers on ``job-events`` (and ``runs``
for triggers) in transactions, as the real one does; the gateway's embedded projector folds
the answers, which is what ``?wait=committed`` and every read see.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from tests.integration.kafka_util import read_all, unique
from tests.unit.test_gateway_auth import ISOLATION
from tests.unit.test_gateway_fakes import NOW_MS, answers, auth, job_body, token_table
from tests.unit.test_projection_events import TOPIC_OF, Feeder, chunk, dead_letter, due, started
from tickwheel.gateway.app import build_app
from tickwheel.gateway.config import GatewayConfig
from tickwheel.projections.kv import MemoryKV
from tickwheel.projections.readmodel import ReadModel
from tickwheel.schemas import mappers
from tickwheel.settings import Settings
from tickwheel.topics import create_topics

pytestmark = pytest.mark.broker


class StandInProcessor:
    """Answers each command like the processor would, in one transaction per poll."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.kv = MemoryKV()
        self.model, self.feeder = ReadModel(self.kv), Feeder(self.kv)
        self.consumer = AIOKafkaConsumer(
            bootstrap_servers=settings.bootstrap_servers,
            isolation_level="read_committed",
            enable_auto_commit=False,
        )
        self.producer = AIOKafkaProducer(
            bootstrap_servers=settings.bootstrap_servers, transactional_id=unique("sp")
        )

    async def run(self) -> None:
        await self.producer.start()
        await self.consumer.start()
        topic = self.settings.topic("commands")
        partitions = [TopicPartition(topic, p) for p in range(self.settings.partitions)]
        self.consumer.assign(partitions)
        await self.consumer.seek_to_beginning(*partitions)
        try:
            while True:
                batch = await self.consumer.getmany(timeout_ms=100)
                commands = [mappers.command_from_bytes(r.value) for rows in batch.values() for r in rows]
                if commands:
                    await self._answer(commands)
        finally:
            await self.consumer.stop()
            await self.producer.stop()

    async def _answer(self, commands: list[Any]) -> None:
        async with self.producer.transaction():
            for command in commands:
                events = answers(self.model.job(command.meta.job_id), command, NOW_MS)
                self.feeder.feed(*events)
                for event in events:
                    await self.write(event)

    async def write(self, event: object) -> None:
        key = getattr(event, "job_id", "") or event.key.decode()  # type: ignore[attr-defined]
        topic = self.settings.topic(TOPIC_OF[type(event)])
        await self.producer.send(topic, mappers.to_bytes(event), key=key.encode())  # type: ignore[arg-type]


@dataclass
class Stack:
    settings: Settings
    client: TestClient[Any, Any]
    processor: StandInProcessor


@pytest.fixture(scope="module")
async def stack(bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Stack]:
    """Topics, the stand-in processor and a gateway with its embedded projector, shared by the module."""
    home = Path(tmp_path_factory.mktemp("gateway-home"))
    settings = Settings(
        bootstrap_servers=bootstrap,
        topic_prefix=unique("twg") + ".",
        partitions=3,
        home=home,
        min_interval_ms=60_000,
    )
    await create_topics(settings)
    processor = StandInProcessor(settings)
    task = asyncio.create_task(processor.run())
    config = GatewayConfig(read_model="embedded", wait_timeout_ms=20_000, answer_poll_ms=20)
    client: TestClient[Any, Any] = TestClient(TestServer(build_app(settings, config, tokens=token_table())))
    await client.start_server()
    try:
        yield Stack(settings, client, processor)
    finally:
        await client.close()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def eventually(check: Callable[[], Awaitable[bool]], timeout_s: float = 20.0) -> None:
    """Poll ``check`` until true: the projector folds asynchronously."""
    deadline = time.monotonic() + timeout_s
    while not await check():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.05)


async def created_job(
    stack: Stack, key: str, team: str = "payments", who: str = "pay-owner"
) -> dict[str, Any]:
    response = await stack.client.post(
        "/v1/jobs?wait=committed", json=job_body(team), headers={**auth(who), "Idempotency-Key": key}
    )
    assert response.status == 201, await response.text()
    body: dict[str, Any] = await response.json()
    return body


async def test_retried_create_appends_one_command_id_and_audits_it(stack: Stack) -> None:
    """Two POSTs with one key put one command id on the log and one job in the projection."""
    headers = {**auth("pay-owner"), "Idempotency-Key": "retry-1", "X-Request-Id": "req-retry"}
    first = await (await stack.client.post("/v1/jobs", json=job_body(), headers=headers)).json()
    second = await (await stack.client.post("/v1/jobs", json=job_body(), headers=headers)).json()
    assert first["command_id"] == second["command_id"]
    records = await read_all(stack.settings.bootstrap_servers, stack.settings.topic("commands"))
    mine = [mappers.command_from_bytes(r.value) for r in records if r.key == first["job_id"].encode()]
    assert mine
    assert {c.meta.command_id for c in mine} == {first["command_id"]}
    audits = [
        mappers.audit_record_from_bytes(r.value)
        for r in await read_all(stack.settings.bootstrap_servers, stack.settings.topic("audit"))
    ]
    assert any(
        (a.principal, a.request_id, a.command_id, a.action)
        == ("alice", "req-retry", first["command_id"], "create")
        for a in audits
    )

    async def one_job() -> bool:
        page = await (await stack.client.get("/v1/jobs", headers=auth("pay-owner"))).json()
        return [j["job_id"] for j in page["items"]].count(first["job_id"]) == 1

    await eventually(one_job)


async def test_wait_committed_round_trip_and_read_your_writes(stack: Stack) -> None:
    """?wait=committed answers once the answer is folded; the next GET already shows the change."""
    created = await created_job(stack, "rt-1")
    assert created["state"] == "accepted"
    job_id = created["job_id"]
    shown = await stack.client.get(f"/v1/jobs/{job_id}", headers=auth("pay-viewer"))
    assert shown.status == 200
    paused = await stack.client.post(
        f"/v1/jobs/{job_id}/pause?wait=committed",
        headers={**auth("pay-owner"), "Idempotency-Key": "rt-pause"},
    )
    assert (await paused.json())["job"]["status"] == "paused"
    again = await (await stack.client.get(f"/v1/jobs/{job_id}", headers=auth("pay-viewer"))).json()
    assert again["status"] == "paused"


async def test_runs_and_logs_written_by_workers_show_in_the_api(stack: Stack) -> None:
    """RunDue, RunStarted and LogChunk on the log appear as run detail and logs."""
    job_id = (await created_job(stack, "runs-1"))["job_id"]
    worker = AIOKafkaProducer(bootstrap_servers=stack.settings.bootstrap_servers)
    await worker.start()
    try:
        async with stack.processor.producer.transaction():
            await stack.processor.write(due("r-int-1", job_id))
        for event in (started("r-int-1", job_id), chunk("r-int-1", job_id, data="from the worker\n")):
            await worker.send_and_wait(
                stack.settings.topic(TOPIC_OF[type(event)]),
                mappers.to_bytes(event),
                key=job_id.encode(),  # type: ignore[arg-type]
            )
    finally:
        await worker.stop()

    async def logged() -> bool:
        response = await stack.client.get("/v1/runs/r-int-1/logs", headers=auth("pay-viewer"))
        return response.status == 200 and bool((await response.json())["items"])

    await eventually(logged)
    run = await (await stack.client.get("/v1/runs/r-int-1", headers=auth("pay-viewer"))).json()
    assert run["status"] == "running"
    runs = await (await stack.client.get(f"/v1/jobs/{job_id}/runs", headers=auth("pay-viewer"))).json()
    assert [r["run_id"] for r in runs["items"]] == ["r-int-1"]


@pytest.fixture(scope="module")
async def payments_world(stack: Stack) -> dict[str, str]:
    """A payments job with a run, a log chunk and a dead letter, all folded."""
    created = await created_job(stack, "iso-world")
    job_id = created["job_id"]
    async with stack.processor.producer.transaction():
        for event in (due("r-iso", job_id), chunk("r-iso", job_id), dead_letter(job_id)):
            await stack.processor.write(event)

    async def folded() -> bool:
        letters = await (await stack.client.get("/v1/dead-letters", headers=auth("pay-viewer"))).json()
        logs = await stack.client.get("/v1/runs/r-iso/logs", headers=auth("pay-viewer"))
        return bool(letters["items"]) and logs.status == 200 and bool((await logs.json())["items"])

    await eventually(folded)
    return {"job_id": job_id, "run_id": "r-iso", "command_id": created["command_id"]}


@pytest.mark.parametrize("operation", sorted(ISOLATION))
async def test_team_isolation_on_every_route(
    stack: Stack, payments_world: dict[str, str], operation: str
) -> None:
    """A search-team token gets 403/404 on every payments object, and appends nothing."""
    case, statuses = ISOLATION[operation]
    before = len(await read_all(stack.settings.bootstrap_servers, stack.settings.topic("commands")))
    response = await case(stack, payments_world)  # type: ignore[arg-type]
    assert response.status in statuses, await response.text()
    after = len(await read_all(stack.settings.bootstrap_servers, stack.settings.topic("commands")))
    assert after == before


async def test_ready_and_metrics_report_projection_lag(stack: Stack) -> None:
    """readyz passes once Kafka answers and the projection has caught up; /metrics shows the lag."""

    async def ready() -> bool:
        return (await stack.client.get("/readyz")).status == 200

    await eventually(ready)
    stats = await (await stack.client.get("/v1/stats", headers=auth("admin"))).json()
    assert stats["projection"]["lag"] is not None
    text = await (await stack.client.get("/metrics")).text()
    assert 'tickwheel_projection_lag_records{topic="job-events"}' in text
