"""The HTTP API's request and response models (pydantic), and their mapping to domain types.

These models are the single source of the API contract: handlers validate requests with
them and build responses from them, and ``openapi.py`` documents exactly them.

Input models are strict (``"5"`` is not an integer, unknown fields are refused, NaN is not
a number; ``3.0`` is 3, as in JSON Schema) and bounded (every string, list and number has a
limit), so a request either maps to a well-formed domain command or is answered with a
problem naming the field.
Output models carry no input patterns: jobs written by other producers through the client
library are shown as they are.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from tickwheel.schemas.model import (
    CatchupPolicy,
    CronSchedule,
    ExecutorSpec,
    FoldPolicy,
    GapPolicy,
    JobSpec,
    JobStatus,
    OneTime,
    OverlapPolicy,
    RetryPolicy,
    Schedule,
)

TEAM_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,62}$"
JOB_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$"
STATIC_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"  # a file of the web UI
_LABEL_KEY_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,62}$"
_EXECUTOR_KIND_PATTERN = r"^[a-z][a-z0-9_-]{0,31}$"

MINUTE_MS = 60_000
DAY_MS = 86_400_000
LATEST_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z
MAX_CONFIG_BYTES = 16 * 1024
RunStatusName = Literal[
    "due", "running", "retry_wait", "succeeded", "failed", "timed_out", "cancelled", "skipped", "unknown"
]


def _printable(value: str) -> str:
    if not value.isprintable():
        raise ValueError("must not contain control characters")
    if value != value.strip() or not value:
        raise ValueError("must not be empty or start or end with spaces")
    return value


def _small_json(value: dict[str, Any]) -> dict[str, Any]:
    if len(json.dumps(value, separators=(",", ":"))) > MAX_CONFIG_BYTES:
        raise ValueError(f"must encode to at most {MAX_CONFIG_BYTES} bytes")
    return value


Team = Annotated[str, Field(pattern=TEAM_PATTERN, description="lower-case team id")]
JobId = Annotated[str, Field(pattern=JOB_ID_PATTERN, description="letters, digits and . _ : -; max 128")]
Name = Annotated[str, Field(min_length=1, max_length=200), AfterValidator(_printable)]
LabelValue = Annotated[str, Field(max_length=256), AfterValidator(lambda v: _printable(v) if v else v)]


def _whole(value: Any) -> Any:
    """3.0 as 3: JSON has one number type, and JSON Schema's ``integer`` includes 3.0."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


# An integer of a JSON body: strict (no strings, no booleans) but for integral floats. Bounds
# go in the field's own Field(): stacked after the validator in an Annotated alias, pydantic
# documents them as "ge"/"le", keywords JSON Schema does not know, instead of minimum/maximum.
Whole = Annotated[int, BeforeValidator(_whole)]


def _only_pattern_keys(schema: dict[str, Any]) -> None:
    """Document a dict with constrained keys as the model validates it: pydantic emits
    ``patternProperties``, which admits any key that does not match (with any value)."""
    ((pattern, value),) = schema.pop("patternProperties").items()
    schema["propertyNames"] = {"pattern": pattern}
    schema["additionalProperties"] = value


class _Input(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


class _Output(BaseModel):
    model_config = ConfigDict(frozen=True)


# ---------------------------------------------------------------------------
# Job specification (input)


class CronIn(_Input):
    kind: Literal["cron"]
    expr: str = Field(min_length=1, max_length=256, description="5 or 6 field cron expression")
    tz: str = Field(default="UTC", min_length=1, max_length=64, description="IANA zone")
    gap: GapPolicy = GapPolicy.SHIFT
    fold: FoldPolicy = FoldPolicy.FIRST


class OnceIn(_Input):
    kind: Literal["once"]
    at_ms: Whole = Field(ge=0, le=LATEST_MS, description="UTC epoch milliseconds")


ScheduleIn = Annotated[CronIn | OnceIn, Field(discriminator="kind")]


class ExecutorIn(_Input):
    kind: str = Field(pattern=_EXECUTOR_KIND_PATTERN)
    config: Annotated[dict[str, Any], AfterValidator(_small_json)] = Field(
        default_factory=dict, description="executor configuration; secret references only"
    )


class RetryIn(_Input):
    max_attempts: Whole = Field(default=3, ge=1, le=100)
    backoff_initial_ms: Whole = Field(default=1_000, ge=0, le=DAY_MS)
    backoff_max_ms: Whole = Field(default=300_000, ge=0, le=7 * DAY_MS)
    backoff_multiplier: float = Field(default=2.0, ge=1.0, le=100.0)
    jitter: float = Field(default=0.2, ge=0.0, le=1.0)

    @model_validator(mode="after")
    def _max_not_below_initial(self) -> RetryIn:
        if self.backoff_max_ms < self.backoff_initial_ms:
            raise ValueError("backoff_max_ms must be >= backoff_initial_ms")
        return self


class JobSpecIn(_Input):
    """Everything a job owner states about a job."""

    team: Team
    name: Name
    schedule: ScheduleIn
    executor: ExecutorIn
    pool: Team = "default"
    overlap: OverlapPolicy = OverlapPolicy.SKIP
    catchup: CatchupPolicy = CatchupPolicy.LATEST
    catchup_window_ms: Whole = Field(default=3_600_000, ge=0, le=30 * DAY_MS)
    spread_ms: Whole = Field(default=0, ge=0, le=DAY_MS)
    jitter_ms: Whole = Field(default=0, ge=0, le=DAY_MS)
    retry: RetryIn = Field(default_factory=RetryIn)
    timeout_ms: Whole = Field(default=3_600_000, ge=1, le=7 * DAY_MS)
    lease_ms: Whole = Field(default=60_000, ge=1_000, le=DAY_MS)
    auto_pause_after: Whole = Field(default=0, ge=0, le=10_000)
    labels: dict[Annotated[str, Field(pattern=_LABEL_KEY_PATTERN)], LabelValue] = Field(
        default_factory=dict, max_length=32, json_schema_extra=_only_pattern_keys
    )


class JobCreateIn(JobSpecIn):
    """A new job; without ``job_id`` the gateway derives one from the idempotency key."""

    job_id: JobId | None = None


def schedule_from_api(schedule: CronIn | OnceIn) -> Schedule:
    if isinstance(schedule, OnceIn):
        return OneTime(schedule.at_ms)
    return CronSchedule(schedule.expr, schedule.tz, schedule.gap, schedule.fold)


def spec_from_api(spec: JobSpecIn) -> JobSpec:
    """The domain spec of a validated API spec."""
    retry = spec.retry
    return JobSpec(
        team=spec.team,
        name=spec.name,
        schedule=schedule_from_api(spec.schedule),
        executor=ExecutorSpec(spec.executor.kind, json.dumps(spec.executor.config, separators=(",", ":"))),
        pool=spec.pool,
        overlap=spec.overlap,
        catchup=spec.catchup,
        catchup_window_ms=spec.catchup_window_ms,
        spread_ms=spec.spread_ms,
        jitter_ms=spec.jitter_ms,
        retry=RetryPolicy(
            retry.max_attempts,
            retry.backoff_initial_ms,
            retry.backoff_max_ms,
            retry.backoff_multiplier,
            retry.jitter,
        ),
        timeout_ms=spec.timeout_ms,
        lease_ms=spec.lease_ms,
        auto_pause_after=spec.auto_pause_after,
        labels=dict(spec.labels),
    )


# ---------------------------------------------------------------------------
# Job specification (output)


class CronOut(_Output):
    kind: Literal["cron"]
    expr: str
    tz: str
    gap: str
    fold: str


class OnceOut(_Output):
    kind: Literal["once"]
    at_ms: int


class ExecutorOut(_Output):
    kind: str
    config: dict[str, Any]


class RetryOut(_Output):
    max_attempts: int
    backoff_initial_ms: int
    backoff_max_ms: int
    backoff_multiplier: float
    jitter: float


class JobSpecOut(_Output):
    team: str
    name: str
    schedule: Annotated[CronOut | OnceOut, Field(discriminator="kind")]
    executor: ExecutorOut
    pool: str
    overlap: str
    catchup: str
    catchup_window_ms: int
    spread_ms: int
    jitter_ms: int
    retry: RetryOut
    timeout_ms: int
    lease_ms: int
    auto_pause_after: int
    labels: dict[str, str]


def _config(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def spec_to_api(spec: JobSpec) -> JobSpecOut:
    s = spec.schedule
    schedule: CronOut | OnceOut = (
        OnceOut(kind="once", at_ms=s.at_ms)
        if isinstance(s, OneTime)
        else CronOut(kind="cron", expr=s.expr, tz=s.tz, gap=s.gap.value, fold=s.fold.value)
    )
    r = spec.retry
    return JobSpecOut(
        team=spec.team,
        name=spec.name,
        schedule=schedule,
        executor=ExecutorOut(kind=spec.executor.kind, config=_config(spec.executor.config_json)),
        pool=spec.pool,
        overlap=spec.overlap.value,
        catchup=spec.catchup.value,
        catchup_window_ms=spec.catchup_window_ms,
        spread_ms=spec.spread_ms,
        jitter_ms=spec.jitter_ms,
        retry=RetryOut(
            max_attempts=r.max_attempts,
            backoff_initial_ms=r.backoff_initial_ms,
            backoff_max_ms=r.backoff_max_ms,
            backoff_multiplier=r.backoff_multiplier,
            jitter=r.jitter,
        ),
        timeout_ms=spec.timeout_ms,
        lease_ms=spec.lease_ms,
        auto_pause_after=spec.auto_pause_after,
        labels=dict(spec.labels),
    )


# ---------------------------------------------------------------------------
# Queries


class _Query(BaseModel):
    # Query strings are text: "5" must become 5 here, unlike in JSON bodies.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


Limit = Annotated[int, Field(ge=1, le=500, description="page size")]
# The shape of every cursor the read model hands out ("v1." + unpadded base64url): refusing
# others here keeps them short and ASCII, so a query string always fits the HTTP parser's
# request line (8190 bytes), where a non-ASCII one grows twelvefold once percent-encoded.
_CURSOR_PATTERN = r"^v1\.[A-Za-z0-9_-]*$"
Cursor = Annotated[
    str,
    Field(
        min_length=1,
        max_length=2_048,
        pattern=_CURSOR_PATTERN,
        description="next_cursor of the previous page",
    ),
]


class JobListQuery(_Query):
    team: Team | None = None
    state: JobStatus | None = None
    pool: Team | None = None
    name_prefix: Annotated[str, Field(min_length=1, max_length=200)] | None = None
    limit: Limit = 50
    cursor: Cursor | None = None


class RunListQuery(_Query):
    status: RunStatusName | None = None
    from_ms: int | None = Field(default=None, ge=0, le=LATEST_MS)
    to_ms: int | None = Field(default=None, ge=1, le=LATEST_MS)
    limit: Limit = 50
    cursor: Cursor | None = None


class LogQuery(_Query):
    attempt: int | None = Field(default=None, ge=1, le=1_000)
    limit: Annotated[int, Field(ge=1, le=1_000)] = 200
    cursor: Cursor | None = None


class PreviewQuery(_Query):
    count: int = Field(default=10, ge=1, le=100)
    after_ms: int | None = Field(default=None, ge=0, le=LATEST_MS)


class SchedulePreviewQuery(_Query):
    """An unsaved schedule to preview: ``expr`` (cron) or ``at_ms`` (one time)."""

    expr: str | None = Field(default=None, min_length=1, max_length=256)
    tz: str = Field(default="UTC", min_length=1, max_length=64)
    gap: GapPolicy = GapPolicy.SHIFT
    fold: FoldPolicy = FoldPolicy.FIRST
    at_ms: int | None = Field(default=None, ge=0, le=LATEST_MS)
    spread_ms: int = Field(default=0, ge=0, le=DAY_MS)
    jitter_ms: int = Field(default=0, ge=0, le=DAY_MS)
    job_id: JobId = "preview"
    count: int = Field(default=10, ge=1, le=100)
    after_ms: int | None = Field(default=None, ge=0, le=LATEST_MS)

    @model_validator(mode="after")
    def _one_kind(self) -> SchedulePreviewQuery:
        if (self.expr is None) == (self.at_ms is None):
            raise ValueError("give exactly one of expr (cron) and at_ms (one time)")
        return self

    def schedule(self) -> Schedule:
        if self.expr is not None:
            return CronSchedule(self.expr, self.tz, self.gap, self.fold)
        assert self.at_ms is not None
        return OneTime(self.at_ms)


class WaitQuery(_Query):
    """``?wait=committed`` answers once the processor accepted or rejected the command."""

    wait: Literal["committed"] | None = None
    timeout_ms: int | None = Field(default=None, ge=0, le=60_000)


class DeadLetterQuery(_Query):
    team: Team | None = None
    limit: Limit = 50
    cursor: Cursor | None = None


class StatsQuery(_Query):
    team: Team | None = None


# ---------------------------------------------------------------------------
# Responses


class FireOut(_Output):
    at_ms: int = Field(description="nominal occurrence, UTC epoch ms")
    fire_at_ms: int = Field(description="when it fires: nominal plus spread and jitter")
    local_iso: str = Field(description="nominal local wall time with offset")
    flags: list[str] = Field(description="DST flags: dst_gap_shifted, dst_gap_skipped, dst_fold_*")
    skipped: bool = Field(description="reported, not fired (gap=skip)")


class PreviewOut(_Output):
    job_id: str
    tz_version: str
    fires: list[FireOut]


class JobOut(_Output):
    job_id: str
    version: int
    status: str
    spec: JobSpecOut
    last_change: str
    last_reason: str
    created_at_ms: int | None
    updated_at_ms: int | None
    latest_run_id: str | None
    dead_letters: int
    next_fires: list[FireOut] = Field(description="upcoming fires (detail only; empty in lists)")


class JobPage(_Output):
    items: list[JobOut]
    next_cursor: str | None


class AttemptOut(_Output):
    attempt: int
    trigger: str
    not_before_ms: int | None
    started_at_ms: int | None
    finished_at_ms: int | None
    worker_id: str
    lease_until_ms: int | None
    outcome: str
    retryable: bool | None
    error: str
    result: str
    cancelled_reason: str
    duration_ms: int | None
    lag_ms: int | None


class RunOut(_Output):
    run_id: str
    job_id: str
    team: str
    status: str
    trigger: str
    pool: str
    scheduled_for_ms: int | None
    flags: list[str]
    tz_version: str
    attempts: list[AttemptOut]
    skipped_reason: str
    skipped_detail: str
    settled_at_ms: int | None
    settled_detail: str
    log_chunks: int
    log_dropped: int


class RunPage(_Output):
    items: list[RunOut]
    next_cursor: str | None


class LogLineOut(_Output):
    attempt: int
    seq: int
    at_ms: int
    data: str
    truncated: bool


class LogPage(_Output):
    run_id: str
    items: list[LogLineOut]
    next_cursor: str | None
    dropped: int = Field(description="chunks not kept because the run's log bound was reached")


class AnswerOut(_Output):
    outcome: Literal["accepted", "changed", "rejected"]
    at_ms: int
    version: int
    status: str
    change: str
    reason: str
    field: str


class CommandOut(_Output):
    command_id: str
    job_id: str
    state: Literal["pending", "accepted", "changed", "rejected"]
    answer: AnswerOut | None
    run_id: str | None = Field(default=None, description="the run a trigger starts")
    job: JobOut | None = None


class LagBucketOut(_Output):
    le_ms: int
    count: int


class TeamStatsOut(_Output):
    jobs: dict[str, int]
    runs: dict[str, int]
    attempts_dispatched: int
    attempts_started: int
    attempts_failed: int
    attempts_retried: int
    leases_expired: int
    dead_letters: int
    failure_rate: float = Field(description="failed attempts / started attempts")
    retry_rate: float = Field(description="retried attempts / dispatched attempts")
    lag_count: int
    lag_mean_ms: float
    lag_buckets: list[LagBucketOut]


class ProjectionOut(_Output):
    lag: int | None = Field(description="records not yet folded; null when Kafka is unreachable")
    lag_by_topic: dict[str, int]


class StatsOut(_Output):
    teams: dict[str, TeamStatsOut]
    projection: ProjectionOut


class DeadLetterOut(_Output):
    partition: int
    offset: int
    job_id: str
    source_topic: str
    source_partition: int
    source_offset: int
    reason: str
    at_ms: int
    history: list[dict[str, Any]]


class DeadLetterPage(_Output):
    items: list[DeadLetterOut]
    next_cursor: str | None


class WhoAmIOut(_Output):
    principal: str
    team: str
    role: str


class CheckOut(_Output):
    ok: bool
    detail: str


class HealthOut(_Output):
    status: Literal["ok", "unavailable"]
    checks: dict[str, CheckOut]


class FieldErrorOut(_Output):
    field: str
    message: str


class ProblemOut(_Output):
    """RFC 9457 problem details."""

    type: str
    title: str
    status: int
    detail: str
    instance: str
    request_id: str
    field: str | None = None
    errors: list[FieldErrorOut] | None = None
