"""Workers against the real broker and a real local HTTP target; the test plays the processor.

Each test gets its own topics (unique prefix, 3 partitions) and app id (so its own consumer
groups), writes RunDue / RunCancelled to ``runs`` with a transactional producer as the
processor would, and reads ``outcomes`` and ``logs`` back with read_committed consumers.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.partitioner import DefaultPartitioner

from tests.integration.http_target import HttpTarget
from tests.integration.kafka_util import group_offsets, read_all, unique
from tickwheel import failpoints
from tickwheel.schemas.mappers import log_chunk_from_bytes, outcome_from_bytes, to_bytes
from tickwheel.schemas.model import (
    ExecutorSpec,
    LogChunk,
    Outcome,
    RunCancelled,
    RunDue,
    RunFailed,
    RunHeartbeat,
    RunStarted,
    RunSucceeded,
    RunTrigger,
    run_id_for,
)
from tickwheel.settings import Settings
from tickwheel.topics import CONTRACT, create_topics
from tickwheel.workers.config import WorkerConfig
from tickwheel.workers.secrets import SecretStore
from tickwheel.workers.worker import Worker, wall_clock_ms

pytestmark = [pytest.mark.broker, pytest.mark.timeout(180)]


# -- the test's stand-in for the processor ------------------------------------------------


@dataclass
class Deployment:
    settings: Settings
    producer: AIOKafkaProducer

    @property
    def bootstrap(self) -> str:
        return self.settings.bootstrap_servers

    async def commit(self, *events: RunDue | RunCancelled) -> None:
        """Write run events in one transaction, keyed by job id, as the processor does."""
        async with self.producer.transaction():
            for event in events:
                await self.producer.send(
                    self.settings.topic("runs"), to_bytes(event), key=event.job_id.encode()
                )

    async def outcomes(self) -> list[tuple[int, Outcome]]:
        records = await read_all(self.bootstrap, self.settings.topic("outcomes"))
        return [(r.partition, outcome_from_bytes(r.value)) for r in records]

    async def logs(self) -> list[LogChunk]:
        records = await read_all(self.bootstrap, self.settings.topic("logs"))
        return [log_chunk_from_bytes(r.value) for r in records]

    async def wait_outcomes(
        self, done: Callable[[list[Outcome]], bool], timeout_s: float = 45
    ) -> list[Outcome]:
        """Poll ``outcomes`` until ``done`` holds for the outcomes seen so far."""
        async with asyncio.timeout(timeout_s):
            while True:
                seen = [outcome for _, outcome in await self.outcomes()]
                if done(seen):
                    return seen
                await asyncio.sleep(0.3)


@asynccontextmanager
async def new_deployment(bootstrap: str) -> AsyncIterator[Deployment]:
    """Fresh topics (unique prefix, 3 partitions) and app id, and a transactional run writer."""
    name = unique("tw")
    settings = Settings(bootstrap_servers=bootstrap, topic_prefix=f"{name}.", partitions=3, app_id=name)
    await create_topics(settings)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=f"{name}.sched.test")
    await producer.start()
    try:
        yield Deployment(settings, producer)
    finally:
        await producer.stop()


@pytest.fixture
async def deployment(bootstrap: str) -> AsyncIterator[Deployment]:
    async with new_deployment(bootstrap) as created:
        yield created


@pytest.fixture
async def target() -> AsyncIterator[HttpTarget]:
    async with HttpTarget() as server:
        yield server


def worker_config(**overrides: Any) -> WorkerConfig:
    values: dict[str, Any] = {
        "worker_id": unique("w"),
        "ssrf_allow": ("127.0.0.1",),
        "shutdown_grace_ms": 1_000,
        "kill_grace_ms": 500,
    }
    return WorkerConfig(**{**values, **overrides})


@asynccontextmanager
async def running(
    deployment: Deployment, config: WorkerConfig | None = None, **kwargs: Any
) -> AsyncIterator[Worker]:
    """A worker running in this process until the block ends (then stopped gracefully)."""
    worker = Worker(deployment.settings, config or worker_config(), **kwargs)
    stop = asyncio.Event()
    task = asyncio.create_task(worker.run(stop))
    waiter = asyncio.ensure_future(worker.wait_assigned())
    try:
        async with asyncio.timeout(30):
            await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
        if task.done():
            task.result()  # start-up failed: raise it here
        yield worker
    finally:
        waiter.cancel()
        stop.set()
        await asyncio.wait_for(task, 60)


async def until(condition: Callable[[], bool], timeout_s: float = 30) -> None:
    """Poll in-process state (group membership, held runs) that has no event to wait on."""
    async with asyncio.timeout(timeout_s):
        while not condition():  # noqa: ASYNC110 - the state lives in another component's loop
            await asyncio.sleep(0.05)


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def http(url: str, **config: Any) -> ExecutorSpec:
    return ExecutorSpec("http", json.dumps({"url": url, "method": "POST", **config}))


def run_due(
    job_id: str,
    executor: ExecutorSpec,
    *,
    attempt: int = 1,
    delay_ms: int = 0,
    lease_ms: int = 10_000,
    timeout_ms: int = 60_000,
    scheduled_for: int | None = None,
) -> RunDue:
    now = now_ms()
    scheduled = scheduled_for if scheduled_for is not None else now
    trigger = RunTrigger.SCHEDULED if attempt == 1 else RunTrigger.LEASE_EXPIRED
    return RunDue(
        run_id_for(job_id, scheduled),
        job_id,
        "team-a",
        "default",
        attempt,
        scheduled,
        now + delay_ms,
        now,
        trigger,
        executor,
        timeout_ms,
        lease_ms,
    )


def jobs_on_partitions(count_per_partition: int, partitions: int = 3) -> list[str]:
    """Job ids that the default partitioner spreads evenly, ``count_per_partition`` on each."""
    found: dict[int, list[str]] = {p: [] for p in range(partitions)}
    n = 0
    while any(len(ids) < count_per_partition for ids in found.values()):
        job_id = f"job-{n}"
        p = DefaultPartitioner()(job_id.encode(), list(range(partitions)), list(range(partitions)))
        if len(found[p]) < count_per_partition:
            found[p].append(job_id)
        n += 1
    return [job for ids in found.values() for job in ids]


def sample(worker: Worker, counter: str) -> float:
    value = worker.metrics.registry.get_sample_value(f"tickwheel_worker_{counter}_total", {"pool": "default"})
    return value or 0.0


def of_run(outcomes: Iterable[Outcome], run_id: str, kind: type | None = None) -> list[Outcome]:
    return [o for o in outcomes if o.run_id == run_id and (kind is None or isinstance(o, kind))]


def reported(run_id: str) -> Callable[[list[Outcome]], bool]:
    return lambda seen: any(not isinstance(o, RunStarted | RunHeartbeat) for o in of_run(seen, run_id))


# -- tests ----------------------------------------------------------------------------------


async def test_run_due_is_executed_once_and_reported(deployment: Deployment, target: HttpTarget) -> None:
    """A committed RunDue is leased, called with its idempotency key and reported on outcomes."""
    due = run_due("job-ok", http(target.url("/effect"), body={"n": 1}))
    async with running(deployment) as worker:
        await deployment.commit(due)
        seen = await deployment.wait_outcomes(reported(due.run_id))
    started, succeeded = of_run(seen, due.run_id, RunStarted), of_run(seen, due.run_id, RunSucceeded)
    assert len(started) == 1
    assert len(succeeded) == 1
    assert started[0].attempt == succeeded[0].attempt == 1
    assert started[0].worker_id == succeeded[0].worker_id == worker.config.worker_id
    (call,) = target.calls
    assert (call.idempotency_key, call.attempt, call.run_id) == (due.run_id, 1, due.run_id)
    assert target.effects[due.run_id] == 1
    runs_partition = {
        r.partition for r in await read_all(deployment.bootstrap, deployment.settings.topic("runs"))
    }
    assert {p for p, o in await deployment.outcomes() if o.run_id == due.run_id} == runs_partition
    logs = [c for c in await deployment.logs() if c.run_id == due.run_id]
    assert logs
    assert "HTTP 200" in logs[0].data
    committed = await group_offsets(deployment.bootstrap, f"{deployment.settings.app_id}.workers.default")
    assert sum(committed.values()) >= 2  # past the RunDue and its transaction marker


async def test_cancel_committed_before_start_prevents_the_start(
    deployment: Deployment, target: HttpTarget
) -> None:
    """A RunCancelled committed before the worker starts a run (or while it is held) means no start."""
    early = run_due("job-c", http(target.url("/effect")), scheduled_for=now_ms() - 1)
    held = run_due("job-c", http(target.url("/effect")), delay_ms=3_000, scheduled_for=now_ms() + 1)
    control = run_due("job-c", http(target.url("/effect")), delay_ms=4_500, scheduled_for=now_ms() + 2)
    await deployment.commit(early)
    await deployment.commit(RunCancelled(early.run_id, early.job_id, 1, "cancelled", now_ms()))
    async with running(deployment):
        await deployment.commit(held, control)
        await asyncio.sleep(0.5)
        await deployment.commit(RunCancelled(held.run_id, held.job_id, 1, "cancelled", now_ms()))
        seen = await deployment.wait_outcomes(reported(control.run_id))
    assert of_run(seen, early.run_id) == []
    assert of_run(seen, held.run_id) == []
    assert {c.idempotency_key for c in target.calls} == {control.run_id}


async def test_cancel_during_execution_stops_it(deployment: Deployment, target: HttpTarget) -> None:
    """A RunCancelled for a running attempt aborts the HTTP call and reports RunFailed(Cancelled)."""
    due = run_due("job-x", http(target.url("/slow?ms=60000")))
    async with running(deployment):
        await deployment.commit(due)
        async with asyncio.timeout(30):
            await target.wait_for_calls(1)
        await deployment.commit(RunCancelled(due.run_id, due.job_id, 1, "cancelled", now_ms()))
        seen = await deployment.wait_outcomes(reported(due.run_id), timeout_s=20)
        async with asyncio.timeout(10):
            await target.wait_until(lambda: target.calls[0].aborted)
    (failed,) = of_run(seen, due.run_id, RunFailed)
    assert isinstance(failed, RunFailed)
    assert failed.error_class == "Cancelled"
    assert not failed.retryable
    assert of_run(seen, due.run_id, RunSucceeded) == []


@pytest.mark.parametrize("freeze", ["clock", "failpoint"])
async def test_frozen_heartbeat_stops_the_execution_and_reports_nothing(
    deployment: Deployment, target: HttpTarget, freeze: str
) -> None:
    """A worker that cannot renew its lease in time aborts the call and sends nothing more."""
    offset = {"ms": 0}

    def clock() -> int:
        return wall_clock_ms() + offset["ms"]

    due = run_due("job-f", http(target.url("/slow?ms=60000")), lease_ms=3_000)
    async with running(deployment, clock=clock) as worker:
        await deployment.commit(due)
        async with asyncio.timeout(30):
            await target.wait_for_calls(1)
        if freeze == "clock":
            offset["ms"] = 10_000  # as if the process had been stopped for 10 s
        else:
            failpoints.arm("during_heartbeat=sleep:3000")  # blocks the whole event loop
        try:
            async with asyncio.timeout(20):
                await target.wait_until(lambda: target.calls[0].aborted)
        finally:
            failpoints.arm("")
        await asyncio.sleep(1.0)  # anything the worker would still send has had time to land
        stops = sample(worker, "lease_self_stops")
    seen = [o for _, o in await deployment.outcomes()]
    assert [type(o) for o in of_run(seen, due.run_id) if not isinstance(o, RunHeartbeat)] == [RunStarted]
    assert stops == 1
    assert target.effects[due.run_id] == 1


async def test_rebalance_redelivery_does_not_start_a_run_twice(
    deployment: Deployment, target: HttpTarget
) -> None:
    """Two workers share a pool; one leaves; the survivor re-reads its held runs and starts each once."""
    jobs = jobs_on_partitions(2)
    dues = [run_due(job, http(target.url("/effect")), delay_ms=10_000) for job in jobs]
    async with running(deployment) as survivor:
        async with running(deployment) as leaving:
            pools = [survivor.pools["default"], leaving.pools["default"]]
            await until(lambda: all(p.owned for p in pools) and sum(len(p.owned) for p in pools) == 3)
            await deployment.commit(*dues)
            await until(lambda: sum(len(p.live) for p in pools) == len(dues))
            held_by_survivor = len(pools[0].live)
        seen = await deployment.wait_outcomes(
            lambda s: all(reported(d.run_id)(s) for d in dues), timeout_s=60
        )
        deduped = sample(survivor, "redeliveries_deduped")
    for due in dues:
        assert len(of_run(seen, due.run_id, RunStarted)) == 1
        assert len(of_run(seen, due.run_id, RunSucceeded)) == 1
        assert target.raw_calls(due.run_id) == 1
    assert held_by_survivor > 0
    assert deduped >= held_by_survivor


async def test_secrets_never_reach_any_topic(deployment: Deployment, target: HttpTarget) -> None:
    """Resolved secrets are used by executors but appear in no topic, not even echoed back in output."""
    secret = "tok-" + unique("s")
    secrets = SecretStore(environ={"TICKWHEEL_SECRET_API_TOKEN": secret})
    echo = http(
        target.url("/echo"), headers={"Authorization": {"secret": "API_TOKEN", "template": "Bearer {}"}}
    )
    printer = ExecutorSpec(
        "process",
        json.dumps(
            {
                "argv": [sys.executable, "-c", "import os; print('token is', os.environ['TOKEN'])"],
                "env": {"TOKEN": {"secret": "API_TOKEN"}},
            }
        ),
    )
    dues = [run_due("job-s1", echo), run_due("job-s2", printer)]
    async with running(deployment, secrets=secrets):
        await deployment.commit(*dues)
        await deployment.wait_outcomes(lambda s: all(of_run(s, d.run_id, RunSucceeded) for d in dues))
    assert target.calls[0].headers["Authorization"] == f"Bearer {secret}"
    for spec in CONTRACT:
        records = await read_all(
            deployment.bootstrap, deployment.settings.topic(spec.name), isolation="read_uncommitted"
        )
        for record in records:
            assert secret.encode() not in (record.value or b"") + (record.key or b"")
    logs = "".join(c.data for c in await deployment.logs())
    assert "token is ***" in logs
    assert "Bearer ***" in logs
