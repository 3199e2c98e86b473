"""Fakes for the gateway's HTTP tests (and a check of the fake processor itself).

``FakeSink`` records appended commands and audit records and, like a tiny processor, folds
the answer events each command would cause into the in-memory read model, so a created job
is visible to the next request. ``answer=False`` makes it a silent log (nothing answers).
It folds each audit record too, as the projector would (``fold_audit=False`` holds them back,
like a projection that has not caught up). A gateway "restart" is a second :func:`harness`
over the same store and sink: a new app with an empty in-process key cache.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp.test_utils import TestClient, TestServer

from tests.unit.test_projection_events import Feeder
from tickwheel.gateway.app import Deps, build_app
from tickwheel.gateway.auth import Role, TokenEntry, TokenTable
from tickwheel.gateway.config import GatewayConfig
from tickwheel.projections.kv import MemoryKV
from tickwheel.projections.readmodel import ReadModel
from tickwheel.projections.views import JobView
from tickwheel.schemas.model import (
    AuditRecord,
    CancelJob,
    Command,
    CommandMeta,
    CreateJob,
    DeleteJob,
    ExecutorSpec,
    JobAccepted,
    JobChanged,
    JobRejected,
    JobStatus,
    PauseJob,
    ResumeJob,
    RunDue,
    RunTrigger,
    TriggerJob,
    UpdateJob,
    manual_run_id_for,
)
from tickwheel.settings import Settings

NOW_MS = 1_767_225_600_000  # 2026-01-01T00:00Z

TOKENS = {
    "admin": ("admin-token-0123456789", "root", "ops", Role.ADMIN),
    "pay-owner": ("pay-owner-token-0123456789", "alice", "payments", Role.OWNER),
    "pay-viewer": ("pay-viewer-token-0123456789", "victor", "payments", Role.VIEWER),
    "search-owner": ("search-owner-token-0123456789", "sam", "search", Role.OWNER),
}


def token_table() -> TokenTable:
    return TokenTable(
        TokenEntry(token=t, principal=p, team=team, role=r) for t, p, team, r in TOKENS.values()
    )


def auth(who: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKENS[who][0]}"}


@dataclass
class ManualClock:
    now_ms: int = NOW_MS
    mono: float = 1_000.0

    def wall_ms(self) -> int:
        return self.now_ms

    def monotonic(self) -> float:
        return self.mono


@dataclass
class FakeLag:
    value: dict[str, int] | None = field(default_factory=lambda: {"job-events": 0, "runs": 0})
    end_offsets: dict[tuple[str, int], int] | None = field(default_factory=dict)

    async def lag(self, positions: Mapping[tuple[str, int], int]) -> dict[str, int] | None:
        return self.value

    async def ends(self) -> dict[tuple[str, int], int] | None:
        return self.end_offsets


class FakeSink:
    """A command log that answers like the processor (when ``answer``) into the read model."""

    def __init__(self, kv: MemoryKV, *, answer: bool = True, fold_audit: bool = True) -> None:
        self.kv = kv
        self.model = ReadModel(kv)
        self.feeder = Feeder(kv)
        self.answer = answer
        self.fold_audit = fold_audit
        self.down = False
        self.commands: list[Command] = []
        self.audits: list[AuditRecord] = []
        self._seen: set[str] = set()

    async def submit(self, command: Command, audit: AuditRecord) -> None:
        if self.down:
            raise ConnectionError("broker unreachable")
        self.commands.append(command)
        self.audits.append(audit)
        if self.fold_audit:
            self.feeder.feed(audit)
        if self.answer and command.meta.command_id not in self._seen:
            self._seen.add(command.meta.command_id)
            self.feeder.feed(*answers(self.model.job(command.meta.job_id), command, NOW_MS))

    async def ping(self) -> None:
        if self.down:
            raise ConnectionError("broker unreachable")


def answers(job: JobView | None, command: Command, now: int) -> list[object]:
    """What the processor answers to ``command`` for a job in state ``job`` (simplified)."""
    meta = command.meta
    live = job is not None and job.status != "deleted"
    if isinstance(command, CreateJob):
        if live:
            return [JobRejected(meta.job_id, meta.command_id, "already_exists", "job_id", now)]
        return [JobAccepted(meta.job_id, meta.command_id, 1, command.spec, now)]
    if job is None or not live:
        return [JobRejected(meta.job_id, meta.command_id, "not_found", "job_id", now)]
    return _on_existing(job, command, now)


def _on_existing(job: JobView, command: Command, now: int) -> list[object]:
    meta = command.meta
    status = JobStatus(job.status)
    match command:
        case UpdateJob():
            if command.expected_version != job.version:
                return [
                    JobRejected(meta.job_id, meta.command_id, "version_conflict", "expected_version", now)
                ]
            return [JobAccepted(meta.job_id, meta.command_id, job.version + 1, command.spec, now)]
        case PauseJob() | ResumeJob():
            target = JobStatus.PAUSED if isinstance(command, PauseJob) else JobStatus.ACTIVE
            change = "paused" if isinstance(command, PauseJob) else "resumed"
            return [JobChanged(meta.job_id, meta.command_id, job.version, target, change, "", now)]
        case CancelJob() | DeleteJob():
            target = JobStatus.CANCELLED if isinstance(command, CancelJob) else JobStatus.DELETED
            return [JobChanged(meta.job_id, meta.command_id, job.version, target, target.value, "", now)]
        case TriggerJob():
            run_id = manual_run_id_for(meta.command_id)
            assert job.spec is not None
            due = RunDue(
                run_id,
                meta.job_id,
                job.team,
                job.spec.pool,
                1,
                now,
                now,
                now,
                RunTrigger.MANUAL,
                ExecutorSpec("http"),
                60_000,
                30_000,
            )
            return [
                due,
                JobChanged(meta.job_id, meta.command_id, job.version, status, "triggered", run_id, now),
            ]
    return []


@dataclass
class Harness:
    client: TestClient[Any, Any]
    sink: FakeSink
    kv: MemoryKV
    clock: ManualClock
    lag: FakeLag

    @property
    def feeder(self) -> Feeder:
        return self.sink.feeder


@asynccontextmanager
async def harness(
    *,
    answer: bool = True,
    config: GatewayConfig | None = None,
    static_dir: Path | None = None,
    settings: Settings | None = None,
    sink: FakeSink | None = None,
    lag: FakeLag | None = None,
) -> AsyncIterator[Harness]:
    """A gateway app on a test server with fakes and an in-memory read model (``sink``'s, when
    given: a restarted gateway over the same log and store)."""
    sink = sink or FakeSink(MemoryKV(), answer=answer)
    kv = sink.kv
    clock, lag = ManualClock(), lag or FakeLag()
    config = config or GatewayConfig(wait_timeout_ms=200, answer_poll_ms=5)
    settings = settings or Settings(min_interval_ms=60_000)
    extra = {} if static_dir is None else {"static_dir": static_dir}
    app = build_app(
        settings, config, deps=Deps(ReadModel(kv), sink, lag, clock), tokens=token_table(), **extra
    )
    client: TestClient[Any, Any] = TestClient(TestServer(app))
    await client.start_server()
    try:
        yield Harness(client, sink, kv, clock, lag)
    finally:
        await client.close()


def job_body(team: str = "payments", name: str = "nightly", **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "team": team,
        "name": name,
        "schedule": {"kind": "cron", "expr": "0 3 * * *", "tz": "Europe/Berlin"},
        "executor": {"kind": "http", "config": {"url": "http://127.0.0.1:9/echo"}},
    }
    body.update(extra)
    return body


async def create(h: Harness, who: str = "pay-owner", key: str = "k-1", **extra: Any) -> dict[str, Any]:
    """Create a job with ?wait=committed and return the response body (must be 201)."""
    team = TOKENS[who][2] if TOKENS[who][3] is not Role.ADMIN else "payments"
    response = await h.client.post(
        "/v1/jobs?wait=committed", json=job_body(team, **extra), headers={**auth(who), "Idempotency-Key": key}
    )
    assert response.status == 201, await response.text()
    body: dict[str, Any] = await response.json()
    return body


# ---------------------------------------------------------------------------


async def test_fake_processor_answers_like_the_scheduler() -> None:
    """The fake answers creates, duplicates, version conflicts, triggers and unknown jobs."""
    from tests.unit.test_projection_events import spec

    sink = FakeSink(MemoryKV())
    model = sink.model

    def meta(command_id: str, job_id: str = "j") -> CommandMeta:
        return CommandMeta(command_id, job_id, NOW_MS)

    await sink.submit(PauseJob(meta("c0")), _audit())
    await sink.submit(CreateJob(meta("c1"), spec()), _audit())
    await sink.submit(CreateJob(meta("c2"), spec()), _audit())
    await sink.submit(UpdateJob(meta("c3"), spec(), 7), _audit())
    await sink.submit(TriggerJob(meta("c4")), _audit())
    outcomes = {c: (a.outcome, a.reason) for c, a in model.answers(["c0", "c1", "c2", "c3", "c4"]).items()}
    assert outcomes == {
        "c0": ("rejected", "not_found"),
        "c1": ("accepted", ""),
        "c2": ("rejected", "already_exists"),
        "c3": ("rejected", "version_conflict"),
        "c4": ("changed", manual_run_id_for("c4")),
    }
    assert model.run(manual_run_id_for("c4")) is not None


def _audit() -> AuditRecord:
    return AuditRecord("p", "t", "r", "c", "a", "j", NOW_MS)
