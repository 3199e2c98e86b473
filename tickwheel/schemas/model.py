"""Domain events and state: frozen, typed, free of Avro.

These are the public types of Tickwheel. The Avro mappers in ``mappers.py`` turn them into
single-object-encoded bytes at the edge; nothing else in the code base sees Avro.

Times are integer milliseconds since the Unix epoch (UTC) throughout; a field named
``*_ms`` that is a duration says so in its name (``timeout_ms``, ``lease_ms``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

# ---------------------------------------------------------------------------
# Job specification


class GapPolicy(StrEnum):
    """What a fixed local time inside a spring-forward gap does."""

    SHIFT = "shift"  # fire at the first instant after the gap (02:30 -> 03:00)
    SKIP = "skip"  # do not fire that day; emits RunSkipped(reason=dst_gap)


class FoldPolicy(StrEnum):
    """What a fixed local time that occurs twice (fall-back fold) does."""

    FIRST = "first"
    LAST = "last"
    BOTH = "both"


class OverlapPolicy(StrEnum):
    """What happens when an occurrence is due while an earlier run is still in flight."""

    ALLOW = "allow"
    SKIP = "skip"
    BUFFER_ONE = "buffer_one"
    BUFFER_ALL = "buffer_all"
    CANCEL_OTHER = "cancel_other"


class CatchupPolicy(StrEnum):
    """What happens to occurrences missed during downtime (older than now - tolerance)."""

    SKIP = "skip"
    LATEST = "latest"
    ALL = "all"


@dataclass(frozen=True, slots=True)
class OneTime:
    """Fire once at ``at_ms``."""

    at_ms: int


@dataclass(frozen=True, slots=True)
class CronSchedule:
    """5-field (or 6-field with leading seconds) cron expression in an IANA zone."""

    expr: str
    tz: str = "UTC"
    gap: GapPolicy = GapPolicy.SHIFT
    fold: FoldPolicy = FoldPolicy.FIRST


Schedule = OneTime | CronSchedule


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Exponential backoff with jitter and a cap. ``max_attempts`` counts the first try."""

    max_attempts: int = 3
    backoff_initial_ms: int = 1_000
    backoff_max_ms: int = 300_000
    backoff_multiplier: float = 2.0
    jitter: float = 0.2  # +/- fraction of the delay, derived deterministically from run id


@dataclass(frozen=True, slots=True)
class ExecutorSpec:
    """Which executor runs the job and its configuration as a JSON object text.

    ``config_json`` may hold secret *references* (``{"secret": "name"}``), never secrets.
    """

    kind: str
    config_json: str = "{}"


@dataclass(frozen=True, slots=True)
class JobSpec:
    """Everything a job owner states about a job."""

    team: str
    name: str
    schedule: Schedule
    executor: ExecutorSpec
    pool: str = "default"
    overlap: OverlapPolicy = OverlapPolicy.SKIP
    catchup: CatchupPolicy = CatchupPolicy.LATEST
    catchup_window_ms: int = 3_600_000
    spread_ms: int = 0  # deterministic offset in [0, spread_ms) from a hash of the job id
    jitter_ms: int = 0  # deterministic per-occurrence offset in [0, jitter_ms)
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    timeout_ms: int = 3_600_000
    lease_ms: int = 60_000
    auto_pause_after: int = 0  # pause after this many consecutive failed runs; 0 = never
    labels: Mapping[str, str] = field(default_factory=dict)


# ---------------------------------------------------------------------------
# Commands: topic ``commands``, key = job_id. The gateway and producers append these.


@dataclass(frozen=True, slots=True)
class CommandMeta:
    """Who asked for what, when. ``command_id`` is stable across client retries."""

    command_id: str
    job_id: str
    issued_at_ms: int
    principal: str = ""
    request_id: str = ""


@dataclass(frozen=True, slots=True)
class CreateJob:
    meta: CommandMeta
    spec: JobSpec


@dataclass(frozen=True, slots=True)
class UpdateJob:
    """Replace the spec in place; rejected unless the job is at ``expected_version``."""

    meta: CommandMeta
    spec: JobSpec
    expected_version: int


@dataclass(frozen=True, slots=True)
class PauseJob:
    meta: CommandMeta


@dataclass(frozen=True, slots=True)
class ResumeJob:
    meta: CommandMeta


@dataclass(frozen=True, slots=True)
class CancelJob:
    """Stop the job for good and cancel its in-flight runs."""

    meta: CommandMeta


@dataclass(frozen=True, slots=True)
class TriggerJob:
    """Run now, outside the schedule. The run id derives from the command id."""

    meta: CommandMeta


@dataclass(frozen=True, slots=True)
class DeleteJob:
    """Cancel and forget the job (its state becomes a tombstone)."""

    meta: CommandMeta


Command = CreateJob | UpdateJob | PauseJob | ResumeJob | CancelJob | TriggerJob | DeleteJob


# ---------------------------------------------------------------------------
# Runs: topic ``runs``, key = job_id. Only the processor writes these.


class RunTrigger(StrEnum):
    SCHEDULED = "scheduled"
    MANUAL = "manual"
    RETRY = "retry"
    LEASE_EXPIRED = "lease_expired"


class SkipReason(StrEnum):
    PAUSED = "paused"
    OVERLAP = "overlap"
    OUTSIDE_CATCHUP_WINDOW = "outside_catchup_window"
    QUOTA = "quota"
    DST_GAP = "dst_gap"
    CANCELLED = "cancelled"


@dataclass(frozen=True, slots=True)
class RunDue:
    """Dispatch intent: a worker of ``pool`` should execute this attempt after ``not_before_ms``."""

    run_id: str
    job_id: str
    team: str
    pool: str
    attempt: int
    scheduled_for_ms: int
    not_before_ms: int
    emitted_at_ms: int
    trigger: RunTrigger
    executor: ExecutorSpec
    timeout_ms: int
    lease_ms: int
    tz_version: str = ""
    flags: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class RunCancelled:
    run_id: str
    job_id: str
    attempt: int
    reason: str
    at_ms: int


@dataclass(frozen=True, slots=True)
class RunSkipped:
    """An occurrence that did not fire, and why (invariant 1: no silent loss)."""

    run_id: str
    job_id: str
    team: str
    scheduled_for_ms: int
    reason: SkipReason
    detail: str
    at_ms: int


RunEvent = RunDue | RunCancelled | RunSkipped


# ---------------------------------------------------------------------------
# Outcomes: topic ``outcomes`` (key = job_id), written by workers. LogChunk goes to ``logs``.


@dataclass(frozen=True, slots=True)
class RunStarted:
    """The worker took a lease on (run_id, attempt) until ``lease_until_ms``."""

    run_id: str
    job_id: str
    attempt: int
    worker_id: str
    lease_until_ms: int
    at_ms: int


@dataclass(frozen=True, slots=True)
class RunHeartbeat:
    run_id: str
    job_id: str
    attempt: int
    worker_id: str
    lease_until_ms: int
    at_ms: int


@dataclass(frozen=True, slots=True)
class RunSucceeded:
    run_id: str
    job_id: str
    attempt: int
    worker_id: str
    at_ms: int
    result: str = ""


@dataclass(frozen=True, slots=True)
class RunFailed:
    run_id: str
    job_id: str
    attempt: int
    worker_id: str
    at_ms: int
    retryable: bool
    error_class: str
    error_message: str


@dataclass(frozen=True, slots=True)
class RunTimedOut:
    run_id: str
    job_id: str
    attempt: int
    worker_id: str
    at_ms: int


@dataclass(frozen=True, slots=True)
class LogChunk:
    run_id: str
    job_id: str
    attempt: int
    seq: int
    at_ms: int
    data: str
    truncated: bool = False


Outcome = RunStarted | RunHeartbeat | RunSucceeded | RunFailed | RunTimedOut


# ---------------------------------------------------------------------------
# Job events: topic ``job-events``, key = job_id. The processor's answer to each command,
# and the settlement of each run, for projections and ``?wait=committed``.


class JobStatus(StrEnum):
    ACTIVE = "active"
    PAUSED = "paused"
    COMPLETED = "completed"  # a one-time job whose run settled
    CANCELLED = "cancelled"
    DELETED = "deleted"


class RunStatus(StrEnum):
    DUE = "due"  # RunDue committed, no lease yet
    RUNNING = "running"  # leased by a worker
    RETRY_WAIT = "retry_wait"  # failed, next attempt scheduled
    SUCCEEDED = "succeeded"
    FAILED = "failed"  # not retryable, or attempts exhausted (dead-lettered)
    TIMED_OUT = "timed_out"
    CANCELLED = "cancelled"


@dataclass(frozen=True, slots=True)
class JobAccepted:
    job_id: str
    command_id: str
    version: int
    spec: JobSpec
    at_ms: int


@dataclass(frozen=True, slots=True)
class JobChanged:
    """A lifecycle change (paused, resumed, cancelled, deleted, updated, auto_paused, completed)."""

    job_id: str
    command_id: str
    version: int
    status: JobStatus
    change: str
    reason: str
    at_ms: int


@dataclass(frozen=True, slots=True)
class JobRejected:
    job_id: str
    command_id: str
    reason: str
    field: str
    at_ms: int


@dataclass(frozen=True, slots=True)
class RunSettled:
    """A run reached a terminal status after ``attempts`` attempts."""

    run_id: str
    job_id: str
    team: str
    status: RunStatus
    attempts: int
    scheduled_for_ms: int
    at_ms: int
    detail: str = ""


JobEvent = JobAccepted | JobChanged | JobRejected | RunSettled


# ---------------------------------------------------------------------------
# Dead letters (topic ``dlq``) and audit (topic ``audit``).


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """An input that could not be processed, or a run that exhausted its attempts."""

    source_topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    reason: str
    at_ms: int
    history_json: str = "[]"


@dataclass(frozen=True, slots=True)
class AuditRecord:
    principal: str
    team: str
    request_id: str
    command_id: str
    action: str
    job_id: str
    at_ms: int
    detail: str = ""


# ---------------------------------------------------------------------------
# Processor state: topic ``sched-changelog`` (compacted, key = job_id), cached in RocksDB.


@dataclass(frozen=True, slots=True)
class AttemptRecord:
    """One finished attempt of a run, kept for the dead-letter history and the run page."""

    attempt: int
    worker_id: str
    outcome: str
    at_ms: int
    error: str = ""


@dataclass(frozen=True, slots=True)
class RunState:
    """A run that has been dispatched and not yet settled."""

    run_id: str
    scheduled_for_ms: int
    attempt: int
    status: RunStatus
    trigger: RunTrigger
    worker_id: str = ""
    lease_until_ms: int = 0  # lease expiry timer while RUNNING (or the first lease deadline)
    deadline_ms: int = 0  # execution-timeout timer while RUNNING
    retry_at_ms: int = 0  # retry timer while RETRY_WAIT
    history: tuple[AttemptRecord, ...] = ()


@dataclass(frozen=True, slots=True)
class JobState:
    """The processor's whole knowledge of one job."""

    job_id: str
    spec: JobSpec
    version: int
    status: JobStatus
    next_fire_ms: int | None  # the next scheduled occurrence (before spread/jitter), if any
    last_scheduled_ms: int | None  # the last occurrence decided (fired or skipped)
    runs: tuple[RunState, ...] = ()
    buffered: tuple[int, ...] = ()  # scheduled_for_ms of occurrences held by buffer_* overlap
    consecutive_failures: int = 0
    recent_command_ids: tuple[str, ...] = ()  # bounded, for idempotent command handling
    tz_version: str = ""


# ---------------------------------------------------------------------------
# Deterministic identifiers


def run_id_for(job_id: str, scheduled_for_ms: int) -> str:
    """The run id of a scheduled occurrence: the same inputs give the same id on any owner."""
    digest = hashlib.sha256(f"{job_id}\x00{scheduled_for_ms}".encode()).hexdigest()
    return f"r-{digest[:32]}"


def manual_run_id_for(command_id: str) -> str:
    """The run id of a manual trigger, derived from the command id."""
    digest = hashlib.sha256(f"manual\x00{command_id}".encode()).hexdigest()
    return f"m-{digest[:32]}"


def command_id_for(idempotency_key: str, principal: str) -> str:
    """A command id derived from a client's idempotency key: same key, same command."""
    digest = hashlib.sha256(f"{principal}\x00{idempotency_key}".encode()).hexdigest()
    return f"c-{digest[:32]}"
