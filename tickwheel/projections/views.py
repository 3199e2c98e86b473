"""The read-model records: what the gateway shows, folded from the log by ``fold.py``.

Records hold *facts*, each written by exactly one topic's events (a job's spec and status
come from ``job-events``; a run's dispatch facts from ``runs``; its attempt results from
``outcomes``; its log counters from ``logs``). Everything else (a run's status, a team's
counts) is *derived* from those facts by pure functions. That is what makes the fold
independent of how the consumer interleaves topics: Kafka orders records within a
partition, never across topics, so a live projection and a rebuild read the same
per-partition sequences in different global orders, and must still agree byte for byte.

Records are frozen dataclasses stored as JSON (pydantic ``TypeAdapter``), so the on-disk
form is readable with ``ldb`` and changes of a record are ordinary schema evolution with
defaults.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pydantic import TypeAdapter

from tickwheel.schemas.model import JobSpec

T = TypeVar("T")

# Attempt outcomes as the projection records them (``outcome`` of AttemptView).
SUCCEEDED = "succeeded"
FAILED = "failed"
TIMED_OUT = "timed_out"

# Derived run statuses beyond model.RunStatus: a skipped occurrence, and a run known only
# from worker reports or logs whose dispatch record has not been folded yet.
SKIPPED = "skipped"
UNKNOWN = "unknown"

# RunCancelled reasons after which the processor re-dispatches (a new attempt follows).
REDISPATCH_REASONS = frozenset({"lease_expired", "start_timeout", "timeout"})
LEASE_EXPIRY_REASONS = frozenset({"lease_expired", "start_timeout"})


@dataclass(frozen=True, slots=True)
class AttemptView:
    """One attempt of a run: its dispatch (runs), its lease and result (outcomes)."""

    attempt: int
    not_before_ms: int | None = None
    emitted_at_ms: int | None = None
    trigger: str = ""
    worker_id: str = ""
    started_at_ms: int | None = None
    lease_until_ms: int | None = None
    finished_at_ms: int | None = None
    outcome: str = ""  # succeeded | failed | timed_out, as reported by the lease holder
    retryable: bool | None = None
    error: str = ""
    result: str = ""
    cancelled_reason: str = ""
    cancelled_at_ms: int | None = None

    @property
    def duration_ms(self) -> int | None:
        """Execution time as the worker saw it: start to result."""
        if self.started_at_ms is None or self.finished_at_ms is None:
            return None
        return max(0, self.finished_at_ms - self.started_at_ms)

    @property
    def lag_ms(self) -> int | None:
        """Scheduling lag: how long after ``not_before`` a worker started it (never negative)."""
        if self.not_before_ms is None or self.started_at_ms is None:
            return None
        return max(0, self.started_at_ms - self.not_before_ms)


@dataclass(frozen=True, slots=True)
class RunView:
    """One run (occurrence or manual trigger) with all its attempts."""

    run_id: str
    job_id: str
    team: str = ""
    pool: str = ""
    trigger: str = ""
    scheduled_for_ms: int | None = None
    flags: tuple[str, ...] = ()
    tz_version: str = ""
    attempts: tuple[AttemptView, ...] = ()  # sorted by attempt number
    skipped_reason: str = ""
    skipped_detail: str = ""
    skipped_at_ms: int | None = None
    settled_status: str = ""
    settled_attempts: int = 0
    settled_at_ms: int | None = None
    settled_detail: str = ""
    log_chunks: int = 0
    log_bytes: int = 0
    log_dropped: int = 0

    @property
    def status(self) -> str:
        """The run's status derived from its facts (RunStatus values, ``skipped``, ``unknown``)."""
        if self.settled_status:
            return self.settled_status
        if self.skipped_reason:
            return SKIPPED
        if not self.attempts:
            return UNKNOWN
        return _attempt_status(self.attempts[-1])

    def attempt(self, number: int) -> AttemptView | None:
        return next((a for a in self.attempts if a.attempt == number), None)


def _attempt_status(last: AttemptView) -> str:
    if last.outcome == SUCCEEDED:
        return "succeeded"  # the processor's RunSettled will confirm it
    if last.outcome in (FAILED, TIMED_OUT):
        return "retry_wait"  # until RunSettled says the attempts are exhausted
    if last.cancelled_reason:
        return "retry_wait" if last.cancelled_reason in REDISPATCH_REASONS else "cancelled"
    if last.started_at_ms is not None:
        return "running"
    if last.not_before_ms is not None:
        return "due"
    return UNKNOWN


@dataclass(frozen=True, slots=True)
class JobView:
    """A job as its owner sees it. ``spec`` is None while only run facts have been folded."""

    job_id: str
    spec: JobSpec | None = None
    version: int = 0
    status: str = ""
    last_change: str = ""
    last_reason: str = ""
    created_at_ms: int | None = None
    updated_at_ms: int | None = None
    latest_run_id: str = ""
    latest_run_scheduled_ms: int | None = None
    dead_letters: int = 0

    @property
    def team(self) -> str:
        return "" if self.spec is None else self.spec.team


@dataclass(frozen=True, slots=True)
class LogLine:
    """One bounded chunk of a run attempt's output."""

    run_id: str
    attempt: int
    seq: int
    at_ms: int
    data: str
    truncated: bool = False


@dataclass(frozen=True, slots=True)
class CommandAnswer:
    """The processor's answer to one command: ``accepted``, ``changed`` or ``rejected``."""

    command_id: str
    job_id: str
    outcome: str
    at_ms: int
    version: int = 0
    status: str = ""
    change: str = ""
    reason: str = ""
    field: str = ""


@dataclass(frozen=True, slots=True)
class KeyClaim:
    """Which request first used an idempotency key, folded from the gateways' audit records.

    Keyed by the command id, which is a hash of (principal, key), so the key itself is never
    stored. ``fingerprint`` is the gateway's hash of the request (method, path, body); it is
    empty for audit records written before gateways recorded it, and then only ``action``
    and ``job_id`` tell two requests apart.
    """

    command_id: str
    principal: str
    action: str
    job_id: str
    at_ms: int
    fingerprint: str = ""

    def rank(self) -> tuple[bool, int, str, str, str, str]:
        """The first claim wins: known fingerprints before unknown, then earliest, then by value.

        A total order, so folding claims in any order (topics and partitions interleave
        differently live and on rebuild) keeps the same one.
        """
        return (not self.fingerprint, self.at_ms, self.fingerprint, self.job_id, self.action, self.principal)


# An audit record's ``detail`` carries the request fingerprint as its last word, after any
# human-readable text (AuditRecord has no field for it, and schemas do not change for this).
_FINGERPRINT_WORD = "request-sha256="
_FINGERPRINT_AT_END = re.compile(r"(?:^|\s)request-sha256=([0-9a-f]{64})$")


def audit_detail(text: str, fingerprint: str) -> str:
    """The audit ``detail`` for a request: ``text`` then the fingerprint word."""
    word = _FINGERPRINT_WORD + fingerprint
    return f"{text} {word}" if text else word


def audit_fingerprint(detail: str) -> str:
    """The fingerprint an audit ``detail`` carries, or ``""`` when it carries none."""
    found = _FINGERPRINT_AT_END.search(detail)
    return found.group(1) if found else ""


@dataclass(frozen=True, slots=True)
class DeadLetterView:
    """A dead letter, located by its own position on the dlq topic."""

    partition: int
    offset: int
    job_id: str
    source_topic: str
    source_partition: int
    source_offset: int
    reason: str
    at_ms: int
    history_json: str = "[]"
    value_size: int = 0


@dataclass(frozen=True, slots=True)
class Counts:
    """Additive counters: per-team statistics are sums of per-record contributions."""

    values: Mapping[str, int] = field(default_factory=dict)

    def plus(self, other: Mapping[str, int], sign: int = 1) -> Counts:
        """These counts plus (or minus) ``other``; zeros dropped, keys sorted (canonical form)."""
        merged = dict(self.values)
        for key, value in other.items():
            merged[key] = merged.get(key, 0) + sign * value
        return Counts({k: merged[k] for k in sorted(merged) if merged[k] != 0})

    def get(self, key: str) -> int:
        return self.values.get(key, 0)


# ---------------------------------------------------------------------------
# Encoding


_ADAPTERS: dict[type[Any], TypeAdapter[Any]] = {
    kind: TypeAdapter(kind)
    for kind in (AttemptView, RunView, JobView, LogLine, CommandAnswer, KeyClaim, DeadLetterView, Counts)
}


def encode(record: Any) -> bytes:
    """JSON bytes of a read-model record."""
    return _ADAPTERS[type(record)].dump_json(record)


def decode(kind: type[T], data: bytes) -> T:
    """The record of type ``kind`` stored as ``data``."""
    value: T = _ADAPTERS[kind].validate_json(data)
    return value
