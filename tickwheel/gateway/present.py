"""Read-model records to API responses, and schedule previews. Pure: time is passed in."""

from __future__ import annotations

import json
from typing import Any

from tickwheel.gateway.models import (
    AnswerOut,
    AttemptOut,
    CommandOut,
    DeadLetterOut,
    FireOut,
    JobOut,
    LagBucketOut,
    LogLineOut,
    RunOut,
    TeamStatsOut,
    spec_to_api,
)
from tickwheel.projections.fold import LAG_BUCKETS_MS
from tickwheel.projections.views import (
    AttemptView,
    CommandAnswer,
    Counts,
    DeadLetterView,
    JobView,
    LogLine,
    RunView,
)
from tickwheel.schemas.model import JobStatus, Schedule
from tickwheel.streams import schedule as sched

NEXT_FIRES_SHOWN = 5
_FIRING = (JobStatus.ACTIVE.value,)


def fires(
    job_id: str, schedule: Schedule, *, spread_ms: int, jitter_ms: int, after_ms: int, count: int
) -> list[FireOut]:
    """The next ``count`` occurrences after ``after_ms``, with the spread/jitter each gets.

    Raises ``ScheduleError`` for a schedule that cannot be evaluated.
    """
    return [
        FireOut(
            at_ms=o.at_ms,
            fire_at_ms=o.at_ms + sched.offset_ms(job_id, o.at_ms, spread_ms, jitter_ms),
            local_iso=o.local_iso,
            flags=list(o.flags),
            skipped=o.skipped,
        )
        for o in sched.occurrences(schedule, after_ms, count)
    ]


def next_fires(job: JobView, now_ms: int, count: int = NEXT_FIRES_SHOWN) -> list[FireOut]:
    """What an active job will fire next; nothing for paused, finished or broken schedules."""
    if job.spec is None or job.status not in _FIRING:
        return []
    after = max(now_ms, job.latest_run_scheduled_ms or 0)
    try:
        return fires(
            job.job_id,
            job.spec.schedule,
            spread_ms=job.spec.spread_ms,
            jitter_ms=job.spec.jitter_ms,
            after_ms=after,
            count=count,
        )
    except ValueError:  # ScheduleError, or a spec another producer wrote that cannot be evaluated
        return []


def job_out(job: JobView, now_ms: int | None = None) -> JobOut:
    """The API view of a job; ``now_ms`` asks for its next fires (detail pages)."""
    assert job.spec is not None  # the read model only returns jobs with a spec
    return JobOut(
        job_id=job.job_id,
        version=job.version,
        status=job.status,
        spec=spec_to_api(job.spec),
        last_change=job.last_change,
        last_reason=job.last_reason,
        created_at_ms=job.created_at_ms,
        updated_at_ms=job.updated_at_ms,
        latest_run_id=job.latest_run_id or None,
        dead_letters=job.dead_letters,
        next_fires=[] if now_ms is None else next_fires(job, now_ms),
    )


def attempt_out(a: AttemptView) -> AttemptOut:
    return AttemptOut(
        attempt=a.attempt,
        trigger=a.trigger,
        not_before_ms=a.not_before_ms,
        started_at_ms=a.started_at_ms,
        finished_at_ms=a.finished_at_ms,
        worker_id=a.worker_id,
        lease_until_ms=a.lease_until_ms,
        outcome=a.outcome,
        retryable=a.retryable,
        error=a.error,
        result=a.result,
        cancelled_reason=a.cancelled_reason,
        duration_ms=a.duration_ms,
        lag_ms=a.lag_ms,
    )


def run_out(r: RunView) -> RunOut:
    return RunOut(
        run_id=r.run_id,
        job_id=r.job_id,
        team=r.team,
        status=r.status,
        trigger=r.trigger,
        pool=r.pool,
        scheduled_for_ms=r.scheduled_for_ms,
        flags=list(r.flags),
        tz_version=r.tz_version,
        attempts=[attempt_out(a) for a in r.attempts],
        skipped_reason=r.skipped_reason,
        skipped_detail=r.skipped_detail,
        settled_at_ms=r.settled_at_ms,
        settled_detail=r.settled_detail,
        log_chunks=r.log_chunks,
        log_dropped=r.log_dropped,
    )


def log_out(line: LogLine) -> LogLineOut:
    return LogLineOut(
        attempt=line.attempt, seq=line.seq, at_ms=line.at_ms, data=line.data, truncated=line.truncated
    )


def answer_out(a: CommandAnswer) -> AnswerOut:
    return AnswerOut(
        outcome=a.outcome,  # type: ignore[arg-type]  # the fold writes only the three outcomes
        at_ms=a.at_ms,
        version=a.version,
        status=a.status,
        change=a.change,
        reason=a.reason,
        field=a.field,
    )


def command_out(
    command_id: str,
    job_id: str,
    answer: CommandAnswer | None,
    *,
    run_id: str | None = None,
    job: JobOut | None = None,
) -> CommandOut:
    state = "pending" if answer is None else answer.outcome
    return CommandOut(
        command_id=command_id,
        job_id=job_id,
        state=state,  # type: ignore[arg-type]
        answer=None if answer is None else answer_out(answer),
        run_id=run_id,
        job=job,
    )


def _history(text: str) -> list[dict[str, Any]]:
    try:
        value = json.loads(text)
    except ValueError:
        return []
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def dead_letter_out(d: DeadLetterView) -> DeadLetterOut:
    return DeadLetterOut(
        partition=d.partition,
        offset=d.offset,
        job_id=d.job_id,
        source_topic=d.source_topic,
        source_partition=d.source_partition,
        source_offset=d.source_offset,
        reason=d.reason,
        at_ms=d.at_ms,
        history=_history(d.history_json),
    )


def _ratio(part: int, whole: int) -> float:
    return 0.0 if whole <= 0 else round(part / whole, 6)


def _group(counts: Counts, prefix: str) -> dict[str, int]:
    return {k[len(prefix) :]: v for k, v in counts.values.items() if k.startswith(prefix)}


def team_stats_out(c: Counts) -> TeamStatsOut:
    lag_count = c.get("lag.count")
    return TeamStatsOut(
        jobs=_group(c, "jobs."),
        runs=_group(c, "runs."),
        attempts_dispatched=c.get("attempts.dispatched"),
        attempts_started=c.get("attempts.started"),
        attempts_failed=c.get("attempts.failed"),
        attempts_retried=c.get("attempts.retried"),
        leases_expired=c.get("leases.expired"),
        dead_letters=c.get("dead_letters"),
        failure_rate=_ratio(c.get("attempts.failed"), c.get("attempts.started")),
        retry_rate=_ratio(c.get("attempts.retried"), c.get("attempts.dispatched")),
        lag_count=lag_count,
        lag_mean_ms=0.0 if lag_count == 0 else round(c.get("lag.sum_ms") / lag_count, 3),
        lag_buckets=[LagBucketOut(le_ms=b, count=c.get(f"lag.le_{b}")) for b in LAG_BUCKETS_MS],
    )
