"""Event builders shared by the projection and gateway unit tests (and their own check)."""

from __future__ import annotations

from tickwheel.projections.fold import Position
from tickwheel.projections.kv import KV
from tickwheel.projections.readmodel import Projector, RawRecord
from tickwheel.projections.views import audit_detail
from tickwheel.schemas import mappers
from tickwheel.schemas.model import (
    AuditRecord,
    CronSchedule,
    DeadLetter,
    ExecutorSpec,
    JobAccepted,
    JobChanged,
    JobRejected,
    JobSpec,
    JobStatus,
    LogChunk,
    OneTime,
    RunDue,
    RunFailed,
    RunHeartbeat,
    RunSettled,
    RunStarted,
    RunStatus,
    RunSucceeded,
    RunTrigger,
)

T0 = 1_767_225_600_000  # 2026-01-01T00:00Z


def spec(
    team: str = "payments",
    name: str = "nightly",
    *,
    cron: str | None = "0 3 * * *",
    pool: str = "default",
    tz: str = "UTC",
) -> JobSpec:
    schedule = CronSchedule(cron, tz) if cron is not None else OneTime(T0 + 3_600_000)
    return JobSpec(
        team=team, name=name, schedule=schedule, executor=ExecutorSpec("http", '{"url": "x"}'), pool=pool
    )


def accepted(
    job_id: str = "job-1",
    *,
    version: int = 1,
    team: str = "payments",
    name: str = "nightly",
    command_id: str = "c-1",
    at_ms: int = T0,
    pool: str = "default",
) -> JobAccepted:
    return JobAccepted(job_id, command_id, version, spec(team, name, pool=pool), at_ms)


def changed(
    job_id: str = "job-1",
    status: JobStatus = JobStatus.PAUSED,
    *,
    change: str = "paused",
    command_id: str = "c-2",
    version: int = 1,
    reason: str = "",
    at_ms: int = T0 + 1,
) -> JobChanged:
    return JobChanged(job_id, command_id, version, status, change, reason, at_ms)


def rejected(job_id: str = "job-1", command_id: str = "c-9") -> JobRejected:
    return JobRejected(job_id, command_id, "version_conflict", "expected_version", T0 + 2)


def due(
    run_id: str = "r-1",
    job_id: str = "job-1",
    *,
    attempt: int = 1,
    team: str = "payments",
    scheduled_for_ms: int = T0 + 10_000,
    not_before_ms: int | None = None,
    trigger: RunTrigger = RunTrigger.SCHEDULED,
) -> RunDue:
    not_before = scheduled_for_ms if not_before_ms is None else not_before_ms
    return RunDue(
        run_id,
        job_id,
        team,
        "default",
        attempt,
        scheduled_for_ms,
        not_before,
        not_before - 100,
        trigger,
        ExecutorSpec("http"),
        60_000,
        30_000,
    )


def started(
    run_id: str = "r-1",
    job_id: str = "job-1",
    *,
    attempt: int = 1,
    worker: str = "w-1",
    at_ms: int = T0 + 10_050,
) -> RunStarted:
    return RunStarted(run_id, job_id, attempt, worker, at_ms + 30_000, at_ms)


def heartbeat(
    run_id: str = "r-1",
    job_id: str = "job-1",
    *,
    attempt: int = 1,
    worker: str = "w-1",
    at_ms: int = T0 + 20_000,
) -> RunHeartbeat:
    return RunHeartbeat(run_id, job_id, attempt, worker, at_ms + 30_000, at_ms)


def succeeded(
    run_id: str = "r-1",
    job_id: str = "job-1",
    *,
    attempt: int = 1,
    worker: str = "w-1",
    at_ms: int = T0 + 12_050,
) -> RunSucceeded:
    return RunSucceeded(run_id, job_id, attempt, worker, at_ms, "ok")


def failed(
    run_id: str = "r-1",
    job_id: str = "job-1",
    *,
    attempt: int = 1,
    worker: str = "w-1",
    at_ms: int = T0 + 12_050,
) -> RunFailed:
    return RunFailed(run_id, job_id, attempt, worker, at_ms, True, "HTTPError", "503 from target")


def settled(
    run_id: str = "r-1",
    job_id: str = "job-1",
    *,
    status: RunStatus = RunStatus.SUCCEEDED,
    attempts: int = 1,
    team: str = "payments",
    scheduled_for_ms: int = T0 + 10_000,
) -> RunSettled:
    return RunSettled(run_id, job_id, team, status, attempts, scheduled_for_ms, T0 + 13_000)


def chunk(
    run_id: str = "r-1", job_id: str = "job-1", *, attempt: int = 1, seq: int = 0, data: str = "hello\n"
) -> LogChunk:
    return LogChunk(run_id, job_id, attempt, seq, T0 + 11_000 + seq, data)


def dead_letter(job_id: str = "job-1", reason: str = "attempts_exhausted: run r-1") -> DeadLetter:
    return DeadLetter("runs", -1, -1, job_id.encode(), None, reason, T0 + 14_000, "[]")


def audit(
    command_id: str = "c-1",
    job_id: str = "job-1",
    *,
    action: str = "create",
    fingerprint: str = "a" * 64,
    at_ms: int = T0,
    detail: str = "nightly",
    principal: str = "alice",
) -> AuditRecord:
    """A gateway's audit record; its detail carries ``fingerprint`` unless that is empty."""
    text = audit_detail(detail, fingerprint) if fingerprint else detail
    return AuditRecord(principal, "payments", "req-1", command_id, action, job_id, at_ms, text)


TOPIC_OF = {
    JobAccepted: "job-events",
    JobChanged: "job-events",
    JobRejected: "job-events",
    RunSettled: "job-events",
    RunDue: "runs",
    RunStarted: "outcomes",
    RunHeartbeat: "outcomes",
    RunSucceeded: "outcomes",
    RunFailed: "outcomes",
    LogChunk: "logs",
    DeadLetter: "dlq",
    AuditRecord: "audit",
}


def life(job_id: str = "job-1", team: str = "payments", run_id: str = "r-1") -> list[object]:
    """A job created, one run dispatched, started, logging, succeeded and settled."""
    return [
        accepted(job_id, team=team, command_id=f"c-{job_id}"),
        due(run_id, job_id, team=team),
        started(run_id, job_id),
        chunk(run_id, job_id, seq=0),
        chunk(run_id, job_id, seq=1, data="world\n"),
        succeeded(run_id, job_id),
        settled(run_id, job_id, team=team),
    ]


class Feeder:
    """Folds events into a store as the projector would, numbering offsets per topic."""

    def __init__(self, kv: KV) -> None:
        self.projector = Projector(kv)
        self.offsets: dict[str, int] = {}

    def record(self, event: object) -> RawRecord:
        topic = TOPIC_OF[type(event)]
        offset = self.offsets.get(topic, 0)
        self.offsets[topic] = offset + 1
        return RawRecord(Position(topic, 0, offset), mappers.to_bytes(event))  # type: ignore[arg-type]

    def feed(self, *events: object) -> None:
        self.projector.apply([self.record(e) for e in events])


def test_builders_round_trip_through_the_avro_mappers() -> None:
    """Every event a test builds here is one the projector can decode from its topic."""
    events = [*life(), heartbeat(), failed(), rejected(), changed(), dead_letter(), audit()]
    for event in events:
        assert mappers.from_bytes(mappers.to_bytes(event)) == event  # type: ignore[arg-type]
