"""Hypothesis strategies for the domain types of ``tickwheel.schemas.model``, and raw Avro data.

The domain strategies produce *plausible* values (non-negative times in this century, ids
without NUL, valid cron expressions and IANA zones), so the core's tests can use them as
inputs and not only the codec's. ``avro_data(schema)`` produces any value a schema admits,
for the wire-format tests.
"""

from __future__ import annotations

import string
from typing import Any

from hypothesis import strategies as st

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

# ---------------------------------------------------------------------------
# Scalars

ids = st.text(string.ascii_letters + string.digits + "-_.", min_size=1, max_size=24)
texts = st.text(max_size=40)  # any unicode except lone surrogates, NUL included
millis = st.integers(0, 4_102_444_800_000)  # epoch ms up to 2100-01-01
durations = st.integers(0, 7 * 86_400_000)
counts = st.integers(0, 1_000)
attempts = st.integers(1, 20)
versions = st.integers(1, 1_000_000)
CRON_EXPRS = ("* * * * *", "*/5 * * * *", "0 0 * * *", "30 2 * * *", "0 */2 * * 1-5", "15 10 1 * *")
ZONES = ("UTC", "Europe/Paris", "America/New_York", "Asia/Kolkata", "Australia/Lord_Howe")

# ---------------------------------------------------------------------------
# Job specification


def schedules() -> st.SearchStrategy[Schedule]:
    one_time = st.builds(OneTime, at_ms=millis)
    cron = st.builds(
        CronSchedule,
        expr=st.sampled_from(CRON_EXPRS),
        tz=st.sampled_from(ZONES),
        gap=st.sampled_from(GapPolicy),
        fold=st.sampled_from(FoldPolicy),
    )
    return st.one_of(one_time, cron)


def retry_policies() -> st.SearchStrategy[RetryPolicy]:
    return st.builds(
        RetryPolicy,
        max_attempts=st.integers(1, 10),
        backoff_initial_ms=st.integers(1, 60_000),
        backoff_max_ms=st.integers(60_000, 3_600_000),
        backoff_multiplier=st.floats(1.0, 10.0),
        jitter=st.floats(0.0, 1.0),
    )


def executor_specs() -> st.SearchStrategy[ExecutorSpec]:
    return st.builds(
        ExecutorSpec,
        kind=st.sampled_from(("http", "process", "workflow")),
        config_json=st.sampled_from(("{}", '{"url": "https://svc.internal/run"}')),
    )


def job_specs() -> st.SearchStrategy[JobSpec]:
    return st.builds(
        JobSpec,
        team=ids,
        name=ids,
        schedule=schedules(),
        executor=executor_specs(),
        pool=ids,
        overlap=st.sampled_from(OverlapPolicy),
        catchup=st.sampled_from(CatchupPolicy),
        catchup_window_ms=durations,
        spread_ms=durations,
        jitter_ms=durations,
        retry=retry_policies(),
        timeout_ms=durations,
        lease_ms=durations,
        auto_pause_after=counts,
        labels=st.dictionaries(ids, texts, max_size=3),
    )


# ---------------------------------------------------------------------------
# Commands


def command_metas(job_id: st.SearchStrategy[str] = ids) -> st.SearchStrategy[CommandMeta]:
    return st.builds(
        CommandMeta,
        command_id=ids,
        job_id=job_id,
        issued_at_ms=millis,
        principal=texts,
        request_id=ids,
    )


def commands() -> st.SearchStrategy[Command]:
    meta = command_metas()
    return st.one_of(
        st.builds(CreateJob, meta=meta, spec=job_specs()),
        st.builds(UpdateJob, meta=meta, spec=job_specs(), expected_version=versions),
        *(st.builds(kind, meta=meta) for kind in (PauseJob, ResumeJob, CancelJob, TriggerJob, DeleteJob)),
    )


# ---------------------------------------------------------------------------
# Runs and outcomes


def run_dues() -> st.SearchStrategy[RunDue]:
    return st.builds(
        RunDue,
        run_id=ids,
        job_id=ids,
        team=ids,
        pool=ids,
        attempt=attempts,
        scheduled_for_ms=millis,
        not_before_ms=millis,
        emitted_at_ms=millis,
        trigger=st.sampled_from(RunTrigger),
        executor=executor_specs(),
        timeout_ms=durations,
        lease_ms=durations,
        tz_version=st.sampled_from(("", "2025b", "2026a")),
        flags=st.lists(ids, max_size=3).map(tuple),
    )


def run_events() -> st.SearchStrategy[RunEvent]:
    cancelled = st.builds(RunCancelled, run_id=ids, job_id=ids, attempt=attempts, reason=texts, at_ms=millis)
    skipped = st.builds(
        RunSkipped,
        run_id=ids,
        job_id=ids,
        team=ids,
        scheduled_for_ms=millis,
        reason=st.sampled_from(SkipReason),
        detail=texts,
        at_ms=millis,
    )
    return st.one_of(run_dues(), cancelled, skipped)


def outcomes() -> st.SearchStrategy[Outcome]:
    common = {"run_id": ids, "job_id": ids, "attempt": attempts, "worker_id": ids, "at_ms": millis}
    return st.one_of(
        st.builds(RunStarted, lease_until_ms=millis, **common),
        st.builds(RunHeartbeat, lease_until_ms=millis, **common),
        st.builds(RunSucceeded, result=texts, **common),
        st.builds(RunFailed, retryable=st.booleans(), error_class=ids, error_message=texts, **common),
        st.builds(RunTimedOut, **common),
    )


def log_chunks() -> st.SearchStrategy[LogChunk]:
    return st.builds(
        LogChunk,
        run_id=ids,
        job_id=ids,
        attempt=attempts,
        seq=counts,
        at_ms=millis,
        data=texts,
        truncated=st.booleans(),
    )


# ---------------------------------------------------------------------------
# Job events, dead letters, audit


def job_events() -> st.SearchStrategy[JobEvent]:
    return st.one_of(
        st.builds(JobAccepted, job_id=ids, command_id=ids, version=versions, spec=job_specs(), at_ms=millis),
        st.builds(
            JobChanged,
            job_id=ids,
            command_id=ids,
            version=versions,
            status=st.sampled_from(JobStatus),
            change=ids,
            reason=texts,
            at_ms=millis,
        ),
        st.builds(JobRejected, job_id=ids, command_id=ids, reason=texts, field=ids, at_ms=millis),
        st.builds(
            RunSettled,
            run_id=ids,
            job_id=ids,
            team=ids,
            status=st.sampled_from(RunStatus),
            attempts=attempts,
            scheduled_for_ms=millis,
            at_ms=millis,
            detail=texts,
        ),
    )


def dead_letters() -> st.SearchStrategy[DeadLetter]:
    raw = st.none() | st.binary(max_size=64)
    return st.builds(
        DeadLetter,
        source_topic=ids,
        partition=st.integers(0, 1_023),
        offset=st.integers(0, 2**62),
        key=raw,
        value=raw,
        reason=texts,
        at_ms=millis,
        history_json=st.sampled_from(("[]", '[{"attempt": 1, "outcome": "failed"}]')),
    )


def audit_records() -> st.SearchStrategy[AuditRecord]:
    return st.builds(
        AuditRecord,
        principal=texts,
        team=ids,
        request_id=ids,
        command_id=ids,
        action=ids,
        job_id=ids,
        at_ms=millis,
        detail=texts,
    )


# ---------------------------------------------------------------------------
# Processor state


def attempt_records() -> st.SearchStrategy[AttemptRecord]:
    return st.builds(
        AttemptRecord,
        attempt=attempts,
        worker_id=ids,
        outcome=st.sampled_from(("failed", "timed_out", "lease_expired")),
        at_ms=millis,
        error=texts,
    )


def run_states() -> st.SearchStrategy[RunState]:
    return st.builds(
        RunState,
        run_id=ids,
        scheduled_for_ms=millis,
        attempt=attempts,
        status=st.sampled_from(RunStatus),
        trigger=st.sampled_from(RunTrigger),
        worker_id=ids,
        lease_until_ms=millis,
        deadline_ms=millis,
        retry_at_ms=millis,
        history=st.lists(attempt_records(), max_size=3).map(tuple),
    )


def job_states() -> st.SearchStrategy[JobState]:
    return st.builds(
        JobState,
        job_id=ids,
        spec=job_specs(),
        version=versions,
        status=st.sampled_from(JobStatus),
        next_fire_ms=st.none() | millis,
        last_scheduled_ms=st.none() | millis,
        runs=st.lists(run_states(), max_size=3).map(tuple),
        buffered=st.lists(millis, max_size=3).map(tuple),
        consecutive_failures=counts,
        recent_command_ids=st.lists(ids, max_size=4).map(tuple),
        tz_version=st.sampled_from(("", "2025b")),
    )


def events() -> st.SearchStrategy[Any]:
    """Any value ``tickwheel.schemas.mappers.to_bytes`` accepts."""
    return st.one_of(
        commands(),
        run_events(),
        outcomes(),
        log_chunks(),
        job_events(),
        dead_letters(),
        audit_records(),
        job_states(),
    )


# ---------------------------------------------------------------------------
# Raw Avro data for any schema

_LONG = st.integers(-(2**63), 2**63 - 1)
_PRIMITIVE_DATA: dict[str, st.SearchStrategy[Any]] = {
    "null": st.none(),
    "boolean": st.booleans(),
    "int": st.integers(-(2**31), 2**31 - 1),
    "long": _LONG,
    "float": st.floats(width=32, allow_nan=False),
    "double": st.floats(allow_nan=False),
    "bytes": st.binary(max_size=16),
    "string": st.text(max_size=16),
}


def avro_data(schema: Any) -> st.SearchStrategy[Any]:
    """Any datum of a self-contained schema, in the shape fastavro writes and reads back.

    A union of several records yields ``(record name, datum)`` (fastavro's tuple notation,
    and what ``return_record_name`` reads back); other unions yield the bare datum.
    """
    return _AvroData().of(schema)


class _AvroData:
    def __init__(self) -> None:
        self.named: dict[str, st.SearchStrategy[Any]] = {}

    def of(self, schema: Any) -> st.SearchStrategy[Any]:
        if isinstance(schema, str):
            return _PRIMITIVE_DATA[schema] if schema in _PRIMITIVE_DATA else self.named[schema]
        if isinstance(schema, list):
            return self._union(schema)
        kind = schema["type"]
        if kind == "record":
            fields = {f["name"]: self.of(f["type"]) for f in schema["fields"]}
            self.named[schema["name"]] = record = st.fixed_dictionaries(fields)
            return record
        if kind == "array":
            return st.lists(self.of(schema["items"]), max_size=3)
        if kind == "map":
            return st.dictionaries(st.text(max_size=8), self.of(schema["values"]), max_size=3)
        return self.of(kind)

    def _union(self, branches: list[Any]) -> st.SearchStrategy[Any]:
        records = [b for b in branches if _is_record(b, self.named)]
        options = []
        for branch in branches:
            data = self.of(branch)
            if len(records) > 1 and _is_record(branch, self.named):
                name = branch if isinstance(branch, str) else branch["name"]
                data = st.tuples(st.just(name), data)
            options.append(data)
        return st.one_of(options)


def _is_record(schema: Any, named: dict[str, Any]) -> bool:
    if isinstance(schema, dict):
        return bool(schema["type"] == "record")
    return isinstance(schema, str) and schema in named
