"""The pure fold: ``fold(view, event, position) -> Changes``. No I/O, no clock.

``view`` answers what the read model holds *before* the event (including earlier events of
the same batch); the returned :class:`Changes` are whole new records plus additive
statistics deltas. ``readmodel.Batch`` turns them into key-value writes and indexes.

Why the result does not depend on topic interleaving (see ``views.py``): each event writes
only the facts its own topic owns, by read-modify-write of the current record, so the final
record is the union of every topic's facts whatever order the topics were folded in. Team
statistics are sums over records of ``contribution(record)``; each record change adds
``contribution(new) - contribution(old)``, so the totals equal the contributions of the
final records, again whatever the order. Facts within one topic are folded in partition
order, which Kafka guarantees for a job's events (key = job id) live and on rebuild alike.

Worker reports are raw: a stale worker may report an attempt it lost. The fold keeps the
first lease of an attempt and only that worker's reports, like the processor; the
processor's ``RunSettled`` is the final word on a run's status.

Audit records (who asked for what) become idempotency-key claims: per command id, the first
request that used its key (:meth:`KeyClaim.rank`). The gateway refuses the key for any other
request, whichever gateway process answers and however often it restarted.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Protocol

from tickwheel.projections.views import (
    FAILED,
    LEASE_EXPIRY_REASONS,
    SUCCEEDED,
    TIMED_OUT,
    AttemptView,
    CommandAnswer,
    DeadLetterView,
    JobView,
    KeyClaim,
    LogLine,
    RunView,
    audit_fingerprint,
)
from tickwheel.schemas.model import (
    AuditRecord,
    DeadLetter,
    JobAccepted,
    JobChanged,
    JobRejected,
    JobStatus,
    LogChunk,
    RunCancelled,
    RunDue,
    RunFailed,
    RunHeartbeat,
    RunSettled,
    RunSkipped,
    RunStarted,
    RunSucceeded,
    RunTimedOut,
)
from tickwheel.streams import schedule

# Per-run log bounds: a chatty job must not fill the read model. Constants, not settings,
# because a rebuild must fold exactly like the live projection did.
MAX_LOG_CHUNKS_PER_RUN = 1_000
MAX_LOG_BYTES_PER_RUN = 1 << 20

# Upper bounds (ms) of the cumulative scheduling-lag histogram kept per team.
LAG_BUCKETS_MS = (10, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 30_000, 60_000, 300_000)

Projected = (
    JobAccepted
    | JobChanged
    | JobRejected
    | RunSettled
    | RunDue
    | RunCancelled
    | RunSkipped
    | RunStarted
    | RunHeartbeat
    | RunSucceeded
    | RunFailed
    | RunTimedOut
    | LogChunk
    | DeadLetter
    | AuditRecord
)


@dataclass(frozen=True, slots=True)
class Position:
    """Where an event was read: logical topic name, partition, offset."""

    topic: str
    partition: int
    offset: int


class ViewReader(Protocol):
    """The read model as it stands before the event being folded."""

    def job(self, job_id: str) -> JobView | None: ...

    def run(self, run_id: str) -> RunView | None: ...

    def has_log(self, run_id: str, attempt: int, seq: int) -> bool: ...

    def claim(self, command_id: str) -> KeyClaim | None: ...


@dataclass(frozen=True, slots=True)
class Changes:
    """What one event changes: new whole records, and per-team statistics deltas."""

    jobs: tuple[JobView, ...] = ()
    runs: tuple[RunView, ...] = ()
    logs: tuple[LogLine, ...] = ()
    answers: tuple[CommandAnswer, ...] = ()
    dead_letters: tuple[DeadLetterView, ...] = ()
    claims: tuple[KeyClaim, ...] = ()
    stats: tuple[tuple[str, Mapping[str, int]], ...] = ()


NO_CHANGES = Changes()


def fold(view: ViewReader, event: object, position: Position) -> Changes:
    """The changes ``event`` (read at ``position``) makes to the read model."""
    match event:
        case JobAccepted() | JobChanged():
            return _job_event(view, event)
        case JobRejected():
            return Changes(answers=(_rejected_answer(event),))
        case RunSettled():
            return _settled(view, event)
        case RunDue() | RunSkipped():
            return _dispatch(view, event)
        case RunCancelled():
            return _run_change(view, event.run_id, event.job_id, lambda r: _cancelled(r, event))
        case RunStarted() | RunHeartbeat() | RunSucceeded() | RunFailed() | RunTimedOut():
            return _run_change(view, event.run_id, event.job_id, lambda r: _outcome(r, event))
        case LogChunk():
            return _log(view, event)
        case DeadLetter():
            return _dead_letter(view, event, position)
        case AuditRecord():
            return _claim(view, event)
    return NO_CHANGES  # commands, states: not part of this read model


# ---------------------------------------------------------------------------
# Statistics contributions


def job_contribution(job: JobView | None) -> dict[str, int]:
    """What one job adds to its team's counts (nothing until its spec is known)."""
    if job is None or job.spec is None:
        return {}
    return {f"jobs.{job.status}": 1, "dead_letters": job.dead_letters}


def run_contribution(run: RunView | None) -> dict[str, int]:
    """What one run adds to its team's counts (nothing until its team is known)."""
    if run is None or not run.team:
        return {}
    counts = {f"runs.{run.status}": 1}
    for attempt in run.attempts:
        _add_attempt(counts, attempt)
    return counts


def _add_attempt(counts: dict[str, int], attempt: AttemptView) -> None:
    def add(key: str, amount: int = 1) -> None:
        counts[key] = counts.get(key, 0) + amount

    if attempt.not_before_ms is not None:
        add("attempts.dispatched")
        if attempt.attempt > 1:
            add("attempts.retried")
    if attempt.started_at_ms is not None:
        add("attempts.started")
    if attempt.outcome in (FAILED, TIMED_OUT):
        add("attempts.failed")
    if attempt.cancelled_reason in LEASE_EXPIRY_REASONS:
        add("leases.expired")
    lag = attempt.lag_ms
    if lag is not None:
        add("lag.count")
        add("lag.sum_ms", lag)
        for bound in LAG_BUCKETS_MS:
            if lag <= bound:
                add(f"lag.le_{bound}")


def _delta(
    team_old: str, old: Mapping[str, int], team_new: str, new: Mapping[str, int]
) -> list[tuple[str, Mapping[str, int]]]:
    """Stats entries turning ``old`` (counted under ``team_old``) into ``new``."""
    if team_old == team_new:
        keys = set(old) | set(new)
        diff = {k: new.get(k, 0) - old.get(k, 0) for k in sorted(keys)}
        diff = {k: v for k, v in diff.items() if v}
        return [(team_new, diff)] if diff and team_new else []
    entries: list[tuple[str, Mapping[str, int]]] = []
    if team_old and old:
        entries.append((team_old, {k: -v for k, v in old.items()}))
    if team_new and new:
        entries.append((team_new, dict(new)))
    return entries


def _job_changes(old: JobView | None, new: JobView) -> Changes:
    stats = _delta(old.team if old else "", job_contribution(old), new.team, job_contribution(new))
    return Changes(jobs=(new,), stats=tuple(stats))


def _run_changes(old: RunView | None, new: RunView) -> Changes:
    stats = _delta(old.team if old else "", run_contribution(old), new.team, run_contribution(new))
    return Changes(runs=(new,), stats=tuple(stats))


# ---------------------------------------------------------------------------
# job-events


def _job_event(view: ViewReader, event: JobAccepted | JobChanged) -> Changes:
    old = view.job(event.job_id)
    base = old if old is not None else JobView(event.job_id)
    if isinstance(event, JobAccepted):
        new = _accepted(base, event)
        answer = CommandAnswer(
            event.command_id,
            event.job_id,
            "accepted",
            event.at_ms,
            event.version,
            new.status,
            new.last_change,
        )
    else:
        new = replace(
            base,
            version=event.version,
            status=event.status.value,
            last_change=event.change,
            last_reason=event.reason,
            updated_at_ms=event.at_ms,
        )
        answer = CommandAnswer(
            event.command_id,
            event.job_id,
            "changed",
            event.at_ms,
            event.version,
            event.status.value,
            event.change,
            event.reason,
        )
    # Processor-initiated changes (auto-pause, completion, buffering) answer no command.
    answers = (answer,) if event.command_id else ()
    return replace(_job_changes(old, new), answers=answers)


def _accepted(job: JobView, event: JobAccepted) -> JobView:
    """A create (version 1, also re-creating a deleted id) or an in-place update."""
    created = event.version == 1
    if created:
        status = JobStatus.ACTIVE.value
    elif job.status == JobStatus.COMPLETED.value and _has_future(event):
        status = JobStatus.ACTIVE.value  # the processor reactivates it for its new schedule
    else:
        status = job.status or JobStatus.ACTIVE.value
    return replace(
        job,
        spec=event.spec,
        version=event.version,
        status=status,
        last_change="created" if created else "updated",
        last_reason="",
        created_at_ms=event.at_ms if created or job.created_at_ms is None else job.created_at_ms,
        updated_at_ms=event.at_ms,
    )


def _has_future(event: JobAccepted) -> bool:
    try:
        return schedule.next_occurrence(event.spec.schedule, event.at_ms - 1) is not None
    except schedule.ScheduleError:
        return False


def _rejected_answer(event: JobRejected) -> CommandAnswer:
    return CommandAnswer(
        event.command_id,
        event.job_id,
        "rejected",
        event.at_ms,
        reason=event.reason,
        field=event.field,
    )


def _settled(view: ViewReader, event: RunSettled) -> Changes:
    old = view.run(event.run_id)
    run = old if old is not None else RunView(event.run_id, event.job_id)
    new = replace(
        run,
        team=run.team or event.team,
        scheduled_for_ms=_first(run.scheduled_for_ms, event.scheduled_for_ms),
        settled_status=event.status.value,
        settled_attempts=event.attempts,
        settled_at_ms=event.at_ms,
        settled_detail=event.detail,
    )
    return _run_changes(old, new)


# ---------------------------------------------------------------------------
# runs


def _dispatch(view: ViewReader, event: RunDue | RunSkipped) -> Changes:
    """RunDue or RunSkipped: the run's identity facts, and the job's latest run."""
    old = view.run(event.run_id)
    run = old if old is not None else RunView(event.run_id, event.job_id)
    run = replace(run, team=event.team, scheduled_for_ms=_first(run.scheduled_for_ms, event.scheduled_for_ms))
    new = (
        _due(run, event)
        if isinstance(event, RunDue)
        else replace(
            run,
            skipped_reason=event.reason.value,
            skipped_detail=event.detail,
            skipped_at_ms=event.at_ms,
        )
    )
    run_changes = _run_changes(old, new)
    job_changes = _latest_run(view, event.job_id, event.run_id, event.scheduled_for_ms)
    return Changes(jobs=job_changes.jobs, runs=run_changes.runs, stats=run_changes.stats + job_changes.stats)


def _due(run: RunView, event: RunDue) -> RunView:
    attempt = run.attempt(event.attempt) or AttemptView(event.attempt)
    attempt = replace(
        attempt,
        not_before_ms=event.not_before_ms,
        emitted_at_ms=event.emitted_at_ms,
        trigger=event.trigger.value,
    )
    first_known = not run.trigger or event.attempt == 1
    return replace(
        _with_attempt(run, attempt),
        pool=event.pool,
        flags=event.flags or run.flags,
        tz_version=event.tz_version or run.tz_version,
        trigger=event.trigger.value if first_known else run.trigger,
    )


def _latest_run(view: ViewReader, job_id: str, run_id: str, scheduled_for_ms: int) -> Changes:
    old = view.job(job_id)
    job = old if old is not None else JobView(job_id)
    current = (job.latest_run_scheduled_ms, job.latest_run_id)
    if job.latest_run_scheduled_ms is not None and current >= (scheduled_for_ms, run_id):
        return Changes()
    new = replace(job, latest_run_id=run_id, latest_run_scheduled_ms=scheduled_for_ms)
    return _job_changes(old, new)


def _cancelled(run: RunView, event: RunCancelled) -> RunView:
    attempt = run.attempt(event.attempt) or AttemptView(event.attempt)
    return _with_attempt(run, replace(attempt, cancelled_reason=event.reason, cancelled_at_ms=event.at_ms))


# ---------------------------------------------------------------------------
# outcomes


def _outcome(
    run: RunView, event: RunStarted | RunHeartbeat | RunSucceeded | RunFailed | RunTimedOut
) -> RunView:
    attempt = run.attempt(event.attempt) or AttemptView(event.attempt)
    if attempt.worker_id and attempt.worker_id != event.worker_id:
        return run  # a stale worker's report: the lease belongs to another worker
    match event:
        case RunStarted() | RunHeartbeat():
            updated = _leased(attempt, event)
        case _:
            updated = _finished(attempt, event)
    return _with_attempt(run, updated)


def _leased(attempt: AttemptView, event: RunStarted | RunHeartbeat) -> AttemptView:
    if isinstance(event, RunHeartbeat) and attempt.started_at_ms is None:
        return attempt  # a heartbeat without a start names no lease we know
    return replace(
        attempt,
        worker_id=event.worker_id,
        started_at_ms=_first(attempt.started_at_ms, event.at_ms),
        lease_until_ms=max(attempt.lease_until_ms or 0, event.lease_until_ms),
    )


def _finished(attempt: AttemptView, event: RunSucceeded | RunFailed | RunTimedOut) -> AttemptView:
    if attempt.outcome:
        return attempt  # the first result of an attempt stands
    updated = replace(attempt, worker_id=event.worker_id, finished_at_ms=event.at_ms)
    match event:
        case RunSucceeded():
            return replace(updated, outcome=SUCCEEDED, result=event.result)
        case RunFailed():
            error = f"{event.error_class}: {event.error_message}".strip(": ")
            return replace(updated, outcome=FAILED, retryable=event.retryable, error=error)
        case RunTimedOut():
            return replace(updated, outcome=TIMED_OUT, error="timed out")


def _run_change(view: ViewReader, run_id: str, job_id: str, change: _RunUpdate) -> Changes:
    old = view.run(run_id)
    new = change(old if old is not None else RunView(run_id, job_id))
    if new == old:
        return NO_CHANGES
    return _run_changes(old, new)


class _RunUpdate(Protocol):
    def __call__(self, run: RunView, /) -> RunView: ...


def _with_attempt(run: RunView, attempt: AttemptView) -> RunView:
    others = [a for a in run.attempts if a.attempt != attempt.attempt]
    return replace(run, attempts=tuple(sorted([*others, attempt], key=lambda a: a.attempt)))


def _first(current: int | None, candidate: int) -> int:
    return candidate if current is None else current


# ---------------------------------------------------------------------------
# logs and dead letters


def _log(view: ViewReader, event: LogChunk) -> Changes:
    if view.has_log(event.run_id, event.attempt, event.seq):
        return NO_CHANGES  # a redelivered chunk
    old = view.run(event.run_id)
    run = old if old is not None else RunView(event.run_id, event.job_id)
    size = len(event.data.encode())
    if run.log_chunks >= MAX_LOG_CHUNKS_PER_RUN or run.log_bytes + size > MAX_LOG_BYTES_PER_RUN:
        return _run_changes(old, replace(run, log_dropped=run.log_dropped + 1))
    line = LogLine(event.run_id, event.attempt, event.seq, event.at_ms, event.data, event.truncated)
    new = replace(run, log_chunks=run.log_chunks + 1, log_bytes=run.log_bytes + size)
    return replace(_run_changes(old, new), logs=(line,))


def _dead_letter(view: ViewReader, event: DeadLetter, position: Position) -> Changes:
    job_id = event.key.decode("utf-8", "replace") if event.key else ""
    letter = DeadLetterView(
        partition=position.partition,
        offset=position.offset,
        job_id=job_id,
        source_topic=event.source_topic,
        source_partition=event.partition,
        source_offset=event.offset,
        reason=event.reason,
        at_ms=event.at_ms,
        history_json=event.history_json,
        value_size=len(event.value or b""),
    )
    if not job_id:
        return Changes(dead_letters=(letter,))
    old = view.job(job_id)
    job = old if old is not None else JobView(job_id)
    changes = _job_changes(old, replace(job, dead_letters=job.dead_letters + 1))
    return replace(changes, dead_letters=(letter,))


# ---------------------------------------------------------------------------
# audit


def _claim(view: ViewReader, event: AuditRecord) -> Changes:
    """The key claim an audit record makes, unless an earlier claim of its command id stands."""
    if not event.command_id:
        return NO_CHANGES
    new = KeyClaim(
        command_id=event.command_id,
        principal=event.principal,
        action=event.action,
        job_id=event.job_id,
        at_ms=event.at_ms,
        fingerprint=audit_fingerprint(event.detail),
    )
    old = view.claim(event.command_id)
    if old is not None and old.rank() <= new.rank():
        return NO_CHANGES  # a retry of the claimed request, or a later (refused) reuse
    return Changes(claims=(new,))
