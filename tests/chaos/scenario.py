"""What chaos scenarios share: the jobs they submit, polling the log, reading recovered stores."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from tests.chaos.faults import Fleet, Member
from tests.chaos.recorder import scan
from tests.integration.harness import Deployment, create_command, now_ms
from tickwheel.schemas import mappers
from tickwheel.schemas.model import (
    CancelJob,
    CommandMeta,
    CreateJob,
    CronSchedule,
    ExecutorSpec,
    JobSpec,
    JobState,
    OneTime,
    OverlapPolicy,
    RunDue,
    RunSettled,
)
from tickwheel.settings import Settings
from tickwheel.streams.store import RocksDBStore

__all__ = ["create_command", "now_ms"]


def one_time_spec(at_ms: int, *, executor: ExecutorSpec | None = None, **overrides: Any) -> JobSpec:
    """A one-time job at ``at_ms`` (noop executor unless given)."""
    return JobSpec(team="team-a", name="job", schedule=OneTime(at_ms),
                   executor=executor or ExecutorSpec("noop"), **overrides)


def one_time_jobs(prefix: str, count: int, at_ms: int, **spec: Any) -> list[CreateJob]:
    return [create_command(f"{prefix}-{i:06d}", one_time_spec(at_ms, **spec)) for i in range(count)]


def every_second_jobs(prefix: str, count: int, executor: ExecutorSpec | None = None) -> list[CreateJob]:
    """Cron jobs firing every second (overlap allowed): a steady stream of steps to crash into."""
    spec = JobSpec(
        team="team-cron",
        name="every-second",
        schedule=CronSchedule("* * * * * *"),
        executor=executor or ExecutorSpec("noop"),
        overlap=OverlapPolicy.ALLOW,
    )
    return [create_command(f"{prefix}-{i:03d}", spec) for i in range(count)]


def http_executor(url: str) -> ExecutorSpec:
    return ExecutorSpec("http", json.dumps({"url": url, "method": "POST", "timeout_ms": 10_000}))


async def committed_events(settings: Settings, role: str) -> list[object]:
    decode = mappers.run_event_from_bytes if role == "runs" else mappers.job_event_from_bytes
    return [decode(r.value) for r in await scan(settings, role, isolation="read_committed") if r.value]


async def wait_until(
    probe: Callable[[], object], done: Callable[[object], bool], timeout_s: float, every_s: float = 1.0
) -> object:
    """Poll the async ``probe`` until ``done(result)`` or the timeout; returns the last result."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = await probe()  # type: ignore[misc]
        if done(result) or time.monotonic() > deadline:
            return result
        await asyncio.sleep(every_s)


async def wait_dispatched(settings: Settings, run_ids: set[str], timeout_s: float) -> set[str]:
    """Until every run id in ``run_ids`` has a committed RunDue; returns those still missing."""

    async def missing() -> set[str]:
        events = await committed_events(settings, "runs")
        return run_ids - {e.run_id for e in events if isinstance(e, RunDue)}

    return await wait_until(missing, lambda left: not left, timeout_s)  # type: ignore[return-value]


async def wait_settled(settings: Settings, timeout_s: float) -> set[str]:
    """Until every dispatched run has a RunSettled; returns the run ids still unsettled."""

    async def unsettled() -> set[str]:
        runs = await committed_events(settings, "runs")
        answers = await committed_events(settings, "job-events")
        dispatched = {e.run_id for e in runs if isinstance(e, RunDue)}
        return dispatched - {e.run_id for e in answers if isinstance(e, RunSettled)}

    return await wait_until(unsettled, lambda left: not left, timeout_s, every_s=2.0)  # type: ignore[return-value]


async def wait_answered(settings: Settings, command_ids: set[str], timeout_s: float) -> set[str]:
    """Until the processor answered every command id on ``job-events``; returns the unanswered.

    Runs settling is not enough before stopping the processor: a cancel that arrives after
    its job's run settled is answered (changes nothing) but may still be in flight.
    """

    async def unanswered() -> set[str]:
        answers = await committed_events(settings, "job-events")
        return command_ids - {getattr(e, "command_id", "") for e in answers}

    return await wait_until(unanswered, lambda left: not left, timeout_s, every_s=1.0)  # type: ignore[return-value]


async def wait_for_exit(member: Member, timeout_s: float) -> int | None:
    """The member's exit code, or None if it is still running after ``timeout_s``."""
    try:
        return await asyncio.to_thread(member.proc.wait, timeout_s)
    except subprocess.TimeoutExpired:
        return None


async def wait_running(member: Member, partitions: int, timeout_s: float = 60) -> bool:
    """Until the processor's log shows ``partitions`` tasks reaching RUNNING."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        text = member.log_path.read_text(errors="replace") if member.log_path.exists() else ""
        if text.count("-> running") >= partitions:
            return True
        if not member.alive:
            return False
        await asyncio.sleep(0.3)
    return False


async def recover_and_read_stores(fleet: Fleet, home: Path, partitions: int) -> dict[str, JobState | None]:
    """Start a processor on ``home`` (a crashed member's state), let it restore every partition,
    stop it cleanly, and return its RocksDB contents: the state "after the crash"."""
    member = fleet.processor("recovery", home=home)
    running = await wait_running(member, partitions)
    member.proc.terminate()
    await asyncio.to_thread(member.proc.wait, 30)
    assert running, fleet.logs()
    return read_stores(home, fleet.deployment.settings.app_id)


def read_stores(home: Path, app_id: str) -> dict[str, JobState | None]:
    states: dict[str, JobState | None] = {}
    root = home / "state" / app_id
    for path in sorted(p for p in root.iterdir() if p.is_dir()):
        store = RocksDBStore(path)
        try:
            for job_id, value in store.iter_jobs():
                states[job_id] = mappers.state_from_bytes(value)
        finally:
            store.close()
    return states


def run_ids(commands: Iterable[CreateJob]) -> set[str]:
    from tickwheel.schemas.model import OneTime, run_id_for

    return {
        run_id_for(c.meta.job_id, c.spec.schedule.at_ms)
        for c in commands
        if isinstance(c.spec.schedule, OneTime)
    }


async def deploy(bootstrap: str, tmp_path: Path, partitions: int, **overrides: object) -> Deployment:
    """A fresh deployment whose topics all have leaders (a new topic's first seconds answer
    NotLeaderForPartition, which is not the fault under test)."""
    deployment = await Deployment.create(bootstrap, tmp_path, partitions=partitions, **overrides)
    await wait_topics_ready(deployment.settings)
    return deployment


async def wait_topics_ready(settings: Settings, timeout_s: float = 60) -> None:
    """Until every partition of every contract topic answers an offsets request (has a leader)."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    from tickwheel.topics import CONTRACT

    tps = [TopicPartition(settings.topic(s.name), p) for s in CONTRACT for p in range(settings.partitions)]
    consumer = AIOKafkaConsumer(bootstrap_servers=settings.bootstrap_servers, request_timeout_ms=5_000)
    await consumer.start()
    try:
        consumer.assign(tps)
        async with asyncio.timeout(timeout_s):
            while True:
                try:
                    await asyncio.wait_for(consumer.end_offsets(tps), 10)
                except Exception:  # not ready yet (NotLeaderForPartition, timeouts)
                    await asyncio.sleep(0.5)
                else:
                    return
    finally:
        await consumer.stop()


def cancel_commands(jobs: Iterable[CreateJob]) -> list[CancelJob]:
    return [
        CancelJob(CommandMeta(f"cancel-{c.meta.job_id}", c.meta.job_id, now_ms(), "chaos")) for c in jobs
    ]
