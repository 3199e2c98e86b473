"""Mappers between the frozen domain types of ``model.py`` and Avro bytes.

``to_bytes(event)`` and ``from_bytes(data)`` are the whole public face; the typed helpers
(``command_from_bytes`` ...) additionally insist on one family, so a consumer of a topic
turns a record of the wrong family into a ``CodecError`` (and a dead letter), not a crash.

One mapper per family: each record has a ``_x_to`` function (dataclass -> Avro dict) and a
decoder (resolved Avro dict -> dataclass). Encoders are written out field by field rather
than derived with ``dataclasses.fields``: the processor encodes ~100k RunDue per second at
a hot instant, and a literal dict is the cheapest way to build a record. Decoders of records
whose fields are all plain values pass the record as keyword arguments; the reader schema
guarantees exactly the dataclass's fields.

Upcasting: decoding resolves every older writer into the current reader schema, which
fills defaults. Where a constant default is not the right answer, an explicit upcaster,
keyed by the old writer's fingerprint, rewrites the resolved record before it is mapped
(see ``_run_due_from_v0``).
"""

from __future__ import annotations

import io
from collections import OrderedDict
from collections.abc import Callable, Mapping
from enum import StrEnum
from typing import Any, TypeVar

from tickwheel.schemas.codec import MAGIC, CodecError, Record, Registry, SchemaEntry, default_registry
from tickwheel.schemas.model import (
    AttemptRecord,
    AuditRecord,
    CancelJob,
    CatchupPolicy,
    Command,
    CommandMeta,
    CreateJob,
    CronSchedule,
    DeadLetter,
    DeleteJob,
    ExecutorSpec,
    FoldPolicy,
    GapPolicy,
    JobAccepted,
    JobChanged,
    JobEvent,
    JobRejected,
    JobSpec,
    JobState,
    JobStatus,
    LogChunk,
    OneTime,
    Outcome,
    OverlapPolicy,
    PauseJob,
    ResumeJob,
    RetryPolicy,
    RunCancelled,
    RunDue,
    RunEvent,
    RunFailed,
    RunHeartbeat,
    RunSettled,
    RunSkipped,
    RunStarted,
    RunState,
    RunStatus,
    RunSucceeded,
    RunTimedOut,
    RunTrigger,
    Schedule,
    SkipReason,
    TriggerJob,
    UpdateJob,
)

Event = Command | RunEvent | Outcome | LogChunk | JobEvent | DeadLetter | AuditRecord | JobState

_NS = "tickwheel.v1."
ONE_TIME = _NS + "OneTime"
CRON_SCHEDULE = _NS + "CronSchedule"

E = TypeVar("E", bound=StrEnum)
T = TypeVar("T")


def _symbols(kind: type[E]) -> Callable[[str], E]:
    """A value -> member lookup; a plain dict is ~5x faster than ``kind(value)``."""
    members = {member.value: member for member in kind}

    def lookup(value: str) -> E:
        try:
            return members[value]
        except KeyError:
            raise CodecError(f"unknown {kind.__name__} {value!r}") from None

    return lookup


_gap = _symbols(GapPolicy)
_fold = _symbols(FoldPolicy)
_overlap = _symbols(OverlapPolicy)
_catchup = _symbols(CatchupPolicy)
_trigger = _symbols(RunTrigger)
_skip_reason = _symbols(SkipReason)
_job_status = _symbols(JobStatus)
_run_status = _symbols(RunStatus)


# ---------------------------------------------------------------------------
# Shared parts: job spec and command meta


def _executor_to(e: ExecutorSpec) -> Record:
    return {"kind": e.kind, "config_json": e.config_json}


def _executor_from(d: Record) -> ExecutorSpec:
    return ExecutorSpec(kind=d["kind"], config_json=d["config_json"])


def _schedule_to(s: Schedule) -> tuple[str, Record]:
    # Tuple notation names the union branch, so fastavro need not guess it from the fields.
    if isinstance(s, OneTime):
        return ONE_TIME, {"at_ms": s.at_ms}
    return CRON_SCHEDULE, {"expr": s.expr, "tz": s.tz, "gap": s.gap.value, "fold": s.fold.value}


def _schedule_from(v: tuple[str, Record]) -> Schedule:
    name, d = v
    if name == ONE_TIME:
        return OneTime(at_ms=d["at_ms"])
    if name == CRON_SCHEDULE:
        gap, fold = _gap(d["gap"]), _fold(d["fold"])
        return CronSchedule(expr=d["expr"], tz=d["tz"], gap=gap, fold=fold)
    raise CodecError(f"unknown schedule {name!r}")


def _retry_to(r: RetryPolicy) -> Record:
    return {
        "max_attempts": r.max_attempts,
        "backoff_initial_ms": r.backoff_initial_ms,
        "backoff_max_ms": r.backoff_max_ms,
        "backoff_multiplier": r.backoff_multiplier,
        "jitter": r.jitter,
    }


def _retry_from(d: Record) -> RetryPolicy:
    return RetryPolicy(
        max_attempts=d["max_attempts"],
        backoff_initial_ms=d["backoff_initial_ms"],
        backoff_max_ms=d["backoff_max_ms"],
        backoff_multiplier=d["backoff_multiplier"],
        jitter=d["jitter"],
    )


def _spec_to(s: JobSpec) -> Record:
    return {
        "team": s.team,
        "name": s.name,
        "schedule": _schedule_to(s.schedule),
        "executor": _executor_to(s.executor),
        "pool": s.pool,
        "overlap": s.overlap.value,
        "catchup": s.catchup.value,
        "catchup_window_ms": s.catchup_window_ms,
        "spread_ms": s.spread_ms,
        "jitter_ms": s.jitter_ms,
        "retry": _retry_to(s.retry),
        "timeout_ms": s.timeout_ms,
        "lease_ms": s.lease_ms,
        "auto_pause_after": s.auto_pause_after,
        "labels": dict(s.labels),
    }


def _spec_from(d: Record) -> JobSpec:
    return JobSpec(
        team=d["team"],
        name=d["name"],
        schedule=_schedule_from(d["schedule"]),
        executor=_executor_from(d["executor"]),
        pool=d["pool"],
        overlap=_overlap(d["overlap"]),
        catchup=_catchup(d["catchup"]),
        catchup_window_ms=d["catchup_window_ms"],
        spread_ms=d["spread_ms"],
        jitter_ms=d["jitter_ms"],
        retry=_retry_from(d["retry"]),
        timeout_ms=d["timeout_ms"],
        lease_ms=d["lease_ms"],
        auto_pause_after=d["auto_pause_after"],
        labels=d["labels"],
    )


def _meta_to(m: CommandMeta) -> Record:
    return {
        "command_id": m.command_id,
        "job_id": m.job_id,
        "issued_at_ms": m.issued_at_ms,
        "principal": m.principal,
        "request_id": m.request_id,
    }


def _meta_from(d: Record) -> CommandMeta:
    return CommandMeta(
        command_id=d["command_id"],
        job_id=d["job_id"],
        issued_at_ms=d["issued_at_ms"],
        principal=d["principal"],
        request_id=d["request_id"],
    )


# ---------------------------------------------------------------------------
# commands.avsc


def _create_job_to(c: CreateJob) -> Record:
    return {"meta": _meta_to(c.meta), "spec": _spec_to(c.spec)}


def _update_job_to(c: UpdateJob) -> Record:
    return {
        "meta": _meta_to(c.meta),
        "spec": _spec_to(c.spec),
        "expected_version": c.expected_version,
    }


def _meta_only_to(c: PauseJob | ResumeJob | CancelJob | TriggerJob | DeleteJob) -> Record:
    return {"meta": _meta_to(c.meta)}


_COMMANDS: dict[str, Callable[[Record], Command]] = {
    _NS + "CreateJob": lambda d: CreateJob(meta=_meta_from(d["meta"]), spec=_spec_from(d["spec"])),
    _NS + "UpdateJob": lambda d: UpdateJob(
        meta=_meta_from(d["meta"]),
        spec=_spec_from(d["spec"]),
        expected_version=d["expected_version"],
    ),
    _NS + "PauseJob": lambda d: PauseJob(meta=_meta_from(d["meta"])),
    _NS + "ResumeJob": lambda d: ResumeJob(meta=_meta_from(d["meta"])),
    _NS + "CancelJob": lambda d: CancelJob(meta=_meta_from(d["meta"])),
    _NS + "TriggerJob": lambda d: TriggerJob(meta=_meta_from(d["meta"])),
    _NS + "DeleteJob": lambda d: DeleteJob(meta=_meta_from(d["meta"])),
}


# ---------------------------------------------------------------------------
# runs.avsc


def _run_due_to(e: RunDue) -> Record:
    return {
        "run_id": e.run_id,
        "job_id": e.job_id,
        "team": e.team,
        "pool": e.pool,
        "attempt": e.attempt,
        "scheduled_for_ms": e.scheduled_for_ms,
        "not_before_ms": e.not_before_ms,
        "emitted_at_ms": e.emitted_at_ms,
        "trigger": e.trigger.value,
        "executor": _executor_to(e.executor),
        "timeout_ms": e.timeout_ms,
        "lease_ms": e.lease_ms,
        "tz_version": e.tz_version,
        "flags": e.flags,
    }


def _run_due_from(d: Record) -> RunDue:
    return RunDue(
        run_id=d["run_id"],
        job_id=d["job_id"],
        team=d["team"],
        pool=d["pool"],
        attempt=d["attempt"],
        scheduled_for_ms=d["scheduled_for_ms"],
        not_before_ms=d["not_before_ms"],
        emitted_at_ms=d["emitted_at_ms"],
        trigger=_trigger(d["trigger"]),
        executor=_executor_from(d["executor"]),
        timeout_ms=d["timeout_ms"],
        lease_ms=d["lease_ms"],
        tz_version=d["tz_version"],
        flags=tuple(d["flags"]),
    )


def _run_due_from_v0(d: Record) -> Record:
    """v0 had no look-ahead dispatch: a run was due exactly when it was scheduled."""
    return {**d, "not_before_ms": d["scheduled_for_ms"]}


def _run_cancelled_to(e: RunCancelled) -> Record:
    return {
        "run_id": e.run_id,
        "job_id": e.job_id,
        "attempt": e.attempt,
        "reason": e.reason,
        "at_ms": e.at_ms,
    }


def _run_skipped_to(e: RunSkipped) -> Record:
    return {
        "run_id": e.run_id,
        "job_id": e.job_id,
        "team": e.team,
        "scheduled_for_ms": e.scheduled_for_ms,
        "reason": e.reason.value,
        "detail": e.detail,
        "at_ms": e.at_ms,
    }


def _run_skipped_from(d: Record) -> RunSkipped:
    return RunSkipped(
        run_id=d["run_id"],
        job_id=d["job_id"],
        team=d["team"],
        scheduled_for_ms=d["scheduled_for_ms"],
        reason=_skip_reason(d["reason"]),
        detail=d["detail"],
        at_ms=d["at_ms"],
    )


_RUN_EVENTS: dict[str, Callable[[Record], RunEvent]] = {
    _NS + "RunDue": _run_due_from,
    _NS + "RunCancelled": lambda d: RunCancelled(**d),
    _NS + "RunSkipped": _run_skipped_from,
}


# ---------------------------------------------------------------------------
# outcomes.avsc: every field is a plain value, so the record *is* the constructor's kwargs.


def _lease_to(e: RunStarted | RunHeartbeat) -> Record:
    return {
        "run_id": e.run_id,
        "job_id": e.job_id,
        "attempt": e.attempt,
        "worker_id": e.worker_id,
        "lease_until_ms": e.lease_until_ms,
        "at_ms": e.at_ms,
    }


def _run_succeeded_to(e: RunSucceeded) -> Record:
    return {
        "run_id": e.run_id,
        "job_id": e.job_id,
        "attempt": e.attempt,
        "worker_id": e.worker_id,
        "at_ms": e.at_ms,
        "result": e.result,
    }


def _run_failed_to(e: RunFailed) -> Record:
    return {
        "run_id": e.run_id,
        "job_id": e.job_id,
        "attempt": e.attempt,
        "worker_id": e.worker_id,
        "at_ms": e.at_ms,
        "retryable": e.retryable,
        "error_class": e.error_class,
        "error_message": e.error_message,
    }


def _run_timed_out_to(e: RunTimedOut) -> Record:
    return {
        "run_id": e.run_id,
        "job_id": e.job_id,
        "attempt": e.attempt,
        "worker_id": e.worker_id,
        "at_ms": e.at_ms,
    }


def _log_chunk_to(e: LogChunk) -> Record:
    return {
        "run_id": e.run_id,
        "job_id": e.job_id,
        "attempt": e.attempt,
        "seq": e.seq,
        "at_ms": e.at_ms,
        "data": e.data,
        "truncated": e.truncated,
    }


_OUTCOMES: dict[str, Callable[[Record], Outcome]] = {
    _NS + "RunStarted": lambda d: RunStarted(**d),
    _NS + "RunHeartbeat": lambda d: RunHeartbeat(**d),
    _NS + "RunSucceeded": lambda d: RunSucceeded(**d),
    _NS + "RunFailed": lambda d: RunFailed(**d),
    _NS + "RunTimedOut": lambda d: RunTimedOut(**d),
}
_LOG_CHUNKS: dict[str, Callable[[Record], LogChunk]] = {
    _NS + "LogChunk": lambda d: LogChunk(**d),
}


# ---------------------------------------------------------------------------
# job_events.avsc


def _job_accepted_to(e: JobAccepted) -> Record:
    return {
        "job_id": e.job_id,
        "command_id": e.command_id,
        "version": e.version,
        "spec": _spec_to(e.spec),
        "at_ms": e.at_ms,
    }


def _job_accepted_from(d: Record) -> JobAccepted:
    return JobAccepted(
        job_id=d["job_id"],
        command_id=d["command_id"],
        version=d["version"],
        spec=_spec_from(d["spec"]),
        at_ms=d["at_ms"],
    )


def _job_changed_to(e: JobChanged) -> Record:
    return {
        "job_id": e.job_id,
        "command_id": e.command_id,
        "version": e.version,
        "status": e.status.value,
        "change": e.change,
        "reason": e.reason,
        "at_ms": e.at_ms,
    }


def _job_changed_from(d: Record) -> JobChanged:
    return JobChanged(**{**d, "status": _job_status(d["status"])})


def _job_rejected_to(e: JobRejected) -> Record:
    return {
        "job_id": e.job_id,
        "command_id": e.command_id,
        "reason": e.reason,
        "field": e.field,
        "at_ms": e.at_ms,
    }


def _run_settled_to(e: RunSettled) -> Record:
    return {
        "run_id": e.run_id,
        "job_id": e.job_id,
        "team": e.team,
        "status": e.status.value,
        "attempts": e.attempts,
        "scheduled_for_ms": e.scheduled_for_ms,
        "at_ms": e.at_ms,
        "detail": e.detail,
    }


def _run_settled_from(d: Record) -> RunSettled:
    return RunSettled(**{**d, "status": _run_status(d["status"])})


_JOB_EVENTS: dict[str, Callable[[Record], JobEvent]] = {
    _NS + "JobAccepted": _job_accepted_from,
    _NS + "JobChanged": _job_changed_from,
    _NS + "JobRejected": lambda d: JobRejected(**d),
    _NS + "RunSettled": _run_settled_from,
}


# ---------------------------------------------------------------------------
# dlq.avsc and audit.avsc


def _dead_letter_to(e: DeadLetter) -> Record:
    return {
        "source_topic": e.source_topic,
        "partition": e.partition,
        "offset": e.offset,
        "key": e.key,
        "value": e.value,
        "reason": e.reason,
        "at_ms": e.at_ms,
        "history_json": e.history_json,
    }


def _audit_to(e: AuditRecord) -> Record:
    return {
        "principal": e.principal,
        "team": e.team,
        "request_id": e.request_id,
        "command_id": e.command_id,
        "action": e.action,
        "job_id": e.job_id,
        "at_ms": e.at_ms,
        "detail": e.detail,
    }


_DEAD_LETTERS: dict[str, Callable[[Record], DeadLetter]] = {
    _NS + "DeadLetter": lambda d: DeadLetter(**d),
}
_AUDIT: dict[str, Callable[[Record], AuditRecord]] = {
    _NS + "AuditRecord": lambda d: AuditRecord(**d),
}


# ---------------------------------------------------------------------------
# state.avsc


def _attempt_to(a: AttemptRecord) -> Record:
    return {
        "attempt": a.attempt,
        "worker_id": a.worker_id,
        "outcome": a.outcome,
        "at_ms": a.at_ms,
        "error": a.error,
    }


def _run_state_to(r: RunState) -> Record:
    return {
        "run_id": r.run_id,
        "scheduled_for_ms": r.scheduled_for_ms,
        "attempt": r.attempt,
        "status": r.status.value,
        "trigger": r.trigger.value,
        "worker_id": r.worker_id,
        "lease_until_ms": r.lease_until_ms,
        "deadline_ms": r.deadline_ms,
        "retry_at_ms": r.retry_at_ms,
        "history": [_attempt_to(a) for a in r.history],
    }


def _run_state_from(d: Record) -> RunState:
    return RunState(
        run_id=d["run_id"],
        scheduled_for_ms=d["scheduled_for_ms"],
        attempt=d["attempt"],
        status=_run_status(d["status"]),
        trigger=_trigger(d["trigger"]),
        worker_id=d["worker_id"],
        lease_until_ms=d["lease_until_ms"],
        deadline_ms=d["deadline_ms"],
        retry_at_ms=d["retry_at_ms"],
        history=tuple(AttemptRecord(**a) for a in d["history"]),
    )


def _job_state_to(s: JobState) -> Record:
    return {
        "job_id": s.job_id,
        "spec": _spec_to(s.spec),
        "version": s.version,
        "status": s.status.value,
        "next_fire_ms": s.next_fire_ms,
        "last_scheduled_ms": s.last_scheduled_ms,
        "runs": [_run_state_to(r) for r in s.runs],
        "buffered": s.buffered,
        "consecutive_failures": s.consecutive_failures,
        "recent_command_ids": s.recent_command_ids,
        "tz_version": s.tz_version,
    }


def _job_state_from(d: Record) -> JobState:
    return JobState(
        job_id=d["job_id"],
        spec=_spec_from(d["spec"]),
        version=d["version"],
        status=_job_status(d["status"]),
        next_fire_ms=d["next_fire_ms"],
        last_scheduled_ms=d["last_scheduled_ms"],
        runs=tuple(_run_state_from(r) for r in d["runs"]),
        buffered=tuple(d["buffered"]),
        consecutive_failures=d["consecutive_failures"],
        recent_command_ids=tuple(d["recent_command_ids"]),
        tz_version=d["tz_version"],
    )


_STATES: dict[str, Callable[[Record], JobState]] = {_NS + "JobState": _job_state_from}


# ---------------------------------------------------------------------------
# Dispatch tables, resolved against the registry once at import

_TO: Mapping[type, tuple[str, Callable[[Any], Record]]] = {
    CreateJob: ("CreateJob", _create_job_to),
    UpdateJob: ("UpdateJob", _update_job_to),
    PauseJob: ("PauseJob", _meta_only_to),
    ResumeJob: ("ResumeJob", _meta_only_to),
    CancelJob: ("CancelJob", _meta_only_to),
    TriggerJob: ("TriggerJob", _meta_only_to),
    DeleteJob: ("DeleteJob", _meta_only_to),
    RunDue: ("RunDue", _run_due_to),
    RunCancelled: ("RunCancelled", _run_cancelled_to),
    RunSkipped: ("RunSkipped", _run_skipped_to),
    RunStarted: ("RunStarted", _lease_to),
    RunHeartbeat: ("RunHeartbeat", _lease_to),
    RunSucceeded: ("RunSucceeded", _run_succeeded_to),
    RunFailed: ("RunFailed", _run_failed_to),
    RunTimedOut: ("RunTimedOut", _run_timed_out_to),
    LogChunk: ("LogChunk", _log_chunk_to),
    JobAccepted: ("JobAccepted", _job_accepted_to),
    JobChanged: ("JobChanged", _job_changed_to),
    JobRejected: ("JobRejected", _job_rejected_to),
    RunSettled: ("RunSettled", _run_settled_to),
    DeadLetter: ("DeadLetter", _dead_letter_to),
    AuditRecord: ("AuditRecord", _audit_to),
    JobState: ("JobState", _job_state_to),
}

_REGISTRY = default_registry()
_ENCODERS: dict[type, tuple[SchemaEntry, Callable[[Any], Record]]] = {
    kind: (_REGISTRY.current(_NS + short), to) for kind, (short, to) in _TO.items()
}
_ALL: dict[str, Callable[[Record], Event]] = {
    **_COMMANDS,
    **_RUN_EVENTS,
    **_OUTCOMES,
    **_LOG_CHUNKS,
    **_JOB_EVENTS,
    **_DEAD_LETTERS,
    **_AUDIT,
    **_STATES,
}
_UPCASTERS: dict[bytes, Callable[[Record], Record]] = {
    _REGISTRY.entry("history/runs_v0.avsc", _NS + "RunDue").fingerprint: _run_due_from_v0,
}


# ---------------------------------------------------------------------------
# Public API


def to_bytes(event: Event) -> bytes:
    """Single-object-encode a domain event or job state with its current schema."""
    try:
        entry, to = _ENCODERS[type(event)]
    except KeyError:
        raise TypeError(f"{type(event).__name__} is not an event type") from None
    return Registry.encode_with(entry, to(event))


def _decode(data: bytes, decoders: Mapping[str, Callable[[Record], T]], family: str) -> T:
    entry, record = _REGISTRY.decode_entry(data)
    decoder = decoders.get(entry.name)
    if decoder is None:
        raise CodecError(f"expected {family}, got {entry.name}")
    upcast = _UPCASTERS.get(entry.fingerprint)
    try:
        return decoder(record if upcast is None else upcast(record))
    except CodecError:
        raise
    except (KeyError, TypeError, ValueError) as exc:
        raise CodecError(f"cannot map {entry.name}: {exc!r}") from exc


def from_bytes(data: bytes) -> Event:
    """Decode any event or job state; raises ``CodecError`` for anything else."""
    return _decode(data, _ALL, "an event")


def command_from_bytes(data: bytes) -> Command:
    return _decode(data, _COMMANDS, "a command")


def run_event_from_bytes(data: bytes) -> RunEvent:
    return _decode(data, _RUN_EVENTS, "a run event")


def outcome_from_bytes(data: bytes) -> Outcome:
    """A worker outcome; a LogChunk is not one (it belongs on the logs topic)."""
    return _decode(data, _OUTCOMES, "an outcome")


def log_chunk_from_bytes(data: bytes) -> LogChunk:
    return _decode(data, _LOG_CHUNKS, "a log chunk")


def job_event_from_bytes(data: bytes) -> JobEvent:
    return _decode(data, _JOB_EVENTS, "a job event")


def dead_letter_from_bytes(data: bytes) -> DeadLetter:
    return _decode(data, _DEAD_LETTERS, "a dead letter")


def audit_record_from_bytes(data: bytes) -> AuditRecord:
    return _decode(data, _AUDIT, "an audit record")


def state_from_bytes(data: bytes) -> JobState:
    """A scheduler changelog value (current-schema states take the spliced fast path)."""
    state = _STATE_ENCODER.decode(data)
    return state if state is not None else _decode(data, _STATES, "a job state")


class _SplicedStateEncoder:
    """Encodes a JobState byte-for-byte as :func:`to_bytes` does, reusing the spec's bytes.

    Avro's binary encoding of a record is the concatenation of its fields' encodings, so
    ``JobState = job_id | spec | rest``. The spec is most of a state's bytes and no fire,
    lease or outcome changes it (evolve keeps the same ``JobSpec`` object), so its encoding
    is kept per spec object and only the small remainder is encoded per change. Decoding
    a state written with the current schema reads the same three parts and remembers the
    spec's slice of the input, so a job fired once (a one-time job at a hot instant) never
    encodes its spec at all: the processor's hot path is load, decide, encode.
    """

    _CACHE_LIMIT = 200_000

    def __init__(self) -> None:
        from fastavro import parse_schema

        entry = _REGISTRY.current(_NS + "JobState")
        self._header = MAGIC + entry.fingerprint
        fields = entry.schema["fields"]
        if [f["name"] for f in fields[:2]] != ["job_id", "spec"]:
            raise RuntimeError("JobState's first fields moved: the spliced encoder needs updating")
        named = dict(entry.schema.get("__named_schemas", {}))
        # Parsed once: fastavro re-parses an unparsed schema on every call (~2x the cost).
        self._spec_schema = parse_schema(named[_NS + "JobSpec"], named_schemas=dict(named))
        self._rest_schema = parse_schema(
            {"type": "record", "name": "tickwheel.local.JobStateRest", "fields": fields[2:]},
            named_schemas={k: v for k, v in named.items() if k == _NS + "JobSpec"},
        )
        self._specs: OrderedDict[int, tuple[JobSpec, bytes]] = OrderedDict()

    def encode(self, state: JobState) -> bytes:
        from fastavro import schemaless_writer

        out = io.BytesIO()
        out.write(self._header)
        job_id = state.job_id.encode()
        out.write(_zigzag_varint(len(job_id)))
        out.write(job_id)
        out.write(self._spec_bytes(state.spec))
        record = _job_state_to_rest(state)
        try:
            schemaless_writer(out, self._rest_schema, record)
        except Exception as exc:  # fastavro raises many types; callers get one typed error
            raise CodecError(f"cannot encode JobState: {exc!r}") from exc
        return out.getvalue()

    def decode(self, data: bytes) -> JobState | None:
        """The state, if ``data`` was written with the current schema; else None (use the codec)."""
        if not isinstance(data, bytes) or not data.startswith(self._header):
            return None
        from fastavro import schemaless_reader

        buf = io.BytesIO(data)
        buf.seek(len(self._header))
        try:
            job_id = _read_string(buf)
            spec_at = buf.tell()
            # the codec's record-name options, so unions decode to the same shapes
            spec = schemaless_reader(
                buf, self._spec_schema, None, return_record_name=True, return_record_name_override=True
            )
            spec_end = buf.tell()
            rest = schemaless_reader(
                buf, self._rest_schema, None, return_record_name=True, return_record_name_override=True
            )
        except Exception as exc:  # garbage can raise anything; callers get one typed error
            raise CodecError(f"malformed JobState body: {exc!r}") from exc
        if buf.tell() != len(data):
            raise CodecError(f"{len(data) - buf.tell()} trailing bytes after JobState")
        if not isinstance(rest, dict):
            raise CodecError("JobState did not decode to a record")
        try:
            state = _job_state_from({"job_id": job_id, "spec": spec, **rest})
        except (KeyError, TypeError, ValueError) as exc:
            raise CodecError(f"cannot map JobState: {exc!r}") from exc
        self._remember(state.spec, data[spec_at:spec_end])
        return state

    def _spec_bytes(self, spec: JobSpec) -> bytes:
        cached = self._specs.get(id(spec))
        if cached is not None and cached[0] is spec:
            return cached[1]
        from fastavro import schemaless_writer

        out = io.BytesIO()
        schemaless_writer(out, self._spec_schema, _spec_to(spec))
        return self._remember(spec, out.getvalue())

    def _remember(self, spec: JobSpec, encoded: bytes) -> bytes:
        # Holding the spec keeps its id unique while the entry lives; oldest entries go first.
        self._specs[id(spec)] = (spec, encoded)
        if len(self._specs) > self._CACHE_LIMIT:
            self._specs.popitem(last=False)
        return encoded


def _read_string(buf: io.BytesIO) -> str:
    """An Avro string: a zigzag varint length, then UTF-8."""
    shift = value = 0
    while True:
        byte = buf.read(1)
        if not byte:
            raise EOFError("truncated length")
        value |= (byte[0] & 0x7F) << shift
        if byte[0] < 0x80:
            break
        shift += 7
        if shift > 63:
            raise ValueError("length varint too long")
    length = (value >> 1) ^ -(value & 1)
    raw = buf.read(length) if length >= 0 else b""
    if length < 0 or len(raw) != length:
        raise EOFError(f"string of {length} bytes truncated")
    return raw.decode()


def _job_state_to_rest(s: JobState) -> Record:
    return {
        "version": s.version,
        "status": s.status.value,
        "next_fire_ms": s.next_fire_ms,
        "last_scheduled_ms": s.last_scheduled_ms,
        "runs": [_run_state_to(r) for r in s.runs],
        "buffered": s.buffered,
        "consecutive_failures": s.consecutive_failures,
        "recent_command_ids": s.recent_command_ids,
        "tz_version": s.tz_version,
    }


def _zigzag_varint(n: int) -> bytes:
    value = (n << 1) ^ (n >> 63)
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_STATE_ENCODER = _SplicedStateEncoder()


def state_to_bytes(state: JobState) -> bytes:
    """The changelog value of a job state: identical bytes to ``to_bytes(state)``, faster."""
    return _STATE_ENCODER.encode(state)
