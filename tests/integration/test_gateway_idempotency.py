"""One Idempotency-Key, one job, on the real broker, across a gateway restart.

The reproduction of the defect: with no processor running, key ``k-1`` creates job-a (202),
the same key for job-b is 422, the gateway restarts (a new app over the same home: an empty
key cache, the embedded read model reopened), and the same request for job-b must still be
422 and append nothing; once the real processor runs, only job-a is accepted. The answered
variant: after the create was answered, the key for another job is 422, not job-a's answer.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from tests.integration.harness import Deployment
from tests.integration.kafka_util import read_all
from tests.unit.test_gateway_fakes import auth, job_body, token_table
from tickwheel.gateway.app import build_app
from tickwheel.gateway.config import GatewayConfig
from tickwheel.schemas import mappers
from tickwheel.schemas.model import JobAccepted, JobRejected

pytestmark = [pytest.mark.broker, pytest.mark.timeout(180)]


@asynccontextmanager
async def gateway(deployment: Deployment) -> AsyncIterator[TestClient[Any, Any]]:
    """A gateway with its embedded read model under the deployment's home; closing it is a stop."""
    config = GatewayConfig(read_model="embedded", wait_timeout_ms=30_000, answer_poll_ms=20)
    app = build_app(deployment.settings, config, tokens=token_table())
    client: TestClient[Any, Any] = TestClient(TestServer(app))
    await client.start_server()
    try:
        yield client
    finally:
        await client.close()


async def create(client: TestClient[Any, Any], key: str, job_id: str, *, wait: bool = False) -> int:
    path = "/v1/jobs?wait=committed" if wait else "/v1/jobs"
    headers = {**auth("pay-owner"), "Idempotency-Key": key}
    response = await client.post(path, json=job_body(job_id=job_id), headers=headers)
    return response.status


async def commands_for(deployment: Deployment, job_id: str) -> list[Any]:
    records = await read_all(deployment.settings.bootstrap_servers, deployment.settings.topic("commands"))
    return [mappers.command_from_bytes(r.value) for r in records if r.key == job_id.encode()]


async def answers(deployment: Deployment) -> list[Any]:
    records = await read_all(deployment.settings.bootstrap_servers, deployment.settings.topic("job-events"))
    return [mappers.job_event_from_bytes(r.value) for r in records]


async def accepted_jobs(deployment: Deployment, command_id: str, timeout_s: float = 60.0) -> list[str]:
    """Job ids accepted with ``command_id``, once at least one is (the processor may start slowly)."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = [
            e.job_id
            for e in await answers(deployment)
            if isinstance(e, JobAccepted) and e.command_id == command_id
        ]
        if found or time.monotonic() > deadline:
            return found
        await asyncio.sleep(0.5)


@pytest.fixture
async def deployment(bootstrap: str, tmp_path: Path) -> AsyncIterator[Deployment]:
    created = await Deployment.create(bootstrap, tmp_path, min_interval_ms=60_000)
    try:
        yield created
    finally:
        created.stop_all()


async def test_key_reused_for_another_job_across_a_restart_creates_one_job(deployment: Deployment) -> None:
    """Steps 1-4: 202, 422, restart, 422 again with nothing appended; the processor accepts job-a only."""
    async with gateway(deployment) as client:
        assert await create(client, "k-1", "job-a") == 202
        assert await create(client, "k-1", "job-b") == 422
    async with gateway(deployment) as restarted:
        assert await create(restarted, "k-1", "job-b") == 422
        assert await create(restarted, "k-1", "job-a") == 202  # the original request, retried
    assert await commands_for(deployment, "job-b") == []
    (command, *_retries) = await commands_for(deployment, "job-a")
    deployment.start_processor()
    assert await accepted_jobs(deployment, command.meta.command_id) == ["job-a"]
    assert not [e for e in await answers(deployment) if isinstance(e, JobRejected)]


async def test_answered_key_for_another_job_after_a_restart_is_422(deployment: Deployment) -> None:
    """Once k-2 created job-c (201), the restarted gateway refuses k-2 for job-d instead of answering."""
    deployment.start_processor()
    async with gateway(deployment) as client:
        assert await create(client, "k-2", "job-c", wait=True) == 201
    async with gateway(deployment) as restarted:
        assert await create(restarted, "k-2", "job-d", wait=True) == 422
        assert await create(restarted, "k-2", "job-c", wait=True) == 201
    assert await commands_for(deployment, "job-d") == []
