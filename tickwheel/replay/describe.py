"""One line of plain English per event, for decision chains, and JSON-ready values."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from enum import Enum
from typing import Any

from tickwheel.replay.times import iso
from tickwheel.schemas.model import (
    CancelJob,
    CreateJob,
    CronSchedule,
    DeadLetter,
    DeleteJob,
    JobAccepted,
    JobChanged,
    JobRejected,
    JobSpec,
    JobState,
    PauseJob,
    ResumeJob,
    RunCancelled,
    RunDue,
    RunFailed,
    RunHeartbeat,
    RunSettled,
    RunSkipped,
    RunStarted,
    RunSucceeded,
    RunTimedOut,
    Schedule,
    TriggerJob,
    UpdateJob,
)
from tickwheel.streams.schedule import (
    FLAG_FOLD_FIRST,
    FLAG_FOLD_SECOND,
    FLAG_GAP_SHIFTED,
    FLAG_GAP_SKIPPED,
    Occurrence,
)

_COMMANDS = (PauseJob, ResumeJob, CancelJob, TriggerJob, DeleteJob)


def describe(event: object, *, accepted: bool = True) -> str:
    """What ``event`` says, in one line; a rejected outcome says that the processor ignored it."""
    text = _command(event) or _job_event(event) or _run_event(event) or _outcome(event)
    if text is None:
        text = type(event).__name__
    if not accepted:
        text += " [stale or duplicate: ignored by the processor]"
    return text


def describe_schedule(schedule: Schedule) -> str:
    if isinstance(schedule, CronSchedule):
        return (f'cron "{schedule.expr}" in {schedule.tz} '
                f"(gap={schedule.gap.value}, fold={schedule.fold.value})")
    return f"one-time at {iso(schedule.at_ms)}"


def describe_spec(spec: JobSpec) -> str:
    return (f"{describe_schedule(spec.schedule)}, overlap={spec.overlap.value}, "
            f"catchup={spec.catchup.value} within {spec.catchup_window_ms} ms, "
            f"max_attempts={spec.retry.max_attempts}")


def describe_dst(occurrence: Occurrence, tz: str) -> str | None:
    """Which DST rule shaped this occurrence, if any."""
    day = occurrence.local_iso[:10]
    flags = set(occurrence.flags)
    if FLAG_GAP_SHIFTED in flags:
        return (f"the scheduled local time does not exist on {day} in {tz} (spring-forward gap); "
                f"gap=shift fires at the first instant after the gap, {occurrence.local_iso}")
    if FLAG_GAP_SKIPPED in flags:
        return (f"the scheduled local time does not exist on {day} in {tz} (spring-forward gap); "
                "gap=skip: no run that day")
    if FLAG_FOLD_FIRST in flags:
        return (f"the local time occurs twice on {day} in {tz} (fall back); "
                f"this is the first pass, {occurrence.local_iso}")
    if FLAG_FOLD_SECOND in flags:
        return (f"the local time occurs twice on {day} in {tz} (fall back); "
                f"this is the second pass, {occurrence.local_iso}")
    return None


def jsonable(value: Any) -> Any:
    """Dataclasses, enums, tuples, bytes and mappings as plain JSON values."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return value


def state_json(state: JobState | None) -> dict[str, Any] | None:
    return None if state is None else jsonable(state)


def _command(event: object) -> str | None:
    if isinstance(event, CreateJob):
        return f"CreateJob by {event.meta.principal or '?'} (command {event.meta.command_id})"
    if isinstance(event, UpdateJob):
        return (f"UpdateJob by {event.meta.principal or '?'} at expected version "
                f"{event.expected_version} (command {event.meta.command_id})")
    if isinstance(event, _COMMANDS):
        return f"{type(event).__name__} by {event.meta.principal or '?'} (command {event.meta.command_id})"
    return None


def _job_event(event: object) -> str | None:
    if isinstance(event, JobAccepted):
        return f"JobAccepted v{event.version}: {describe_spec(event.spec)}"
    if isinstance(event, JobChanged):
        why = f" ({event.reason})" if event.reason else ""
        return f"JobChanged {event.change}: job is {event.status.value}{why}"
    if isinstance(event, JobRejected):
        return f"JobRejected {event.reason} (field {event.field})"
    if isinstance(event, RunSettled):
        detail = f": {event.detail}" if event.detail else ""
        return f"RunSettled {event.status.value} after {event.attempts} attempt(s){detail}"
    if isinstance(event, DeadLetter):
        return f"DeadLetter: {event.reason}"
    return None


def _run_event(event: object) -> str | None:
    if isinstance(event, RunDue):
        flags = [f for f in event.flags if not f.startswith("start_by=")]
        shown = f", flags {','.join(flags)}" if flags else ""
        return (f"RunDue attempt {event.attempt} ({event.trigger.value}) of run {event.run_id}, "
                f"not before {iso(event.not_before_ms)}{shown}")
    if isinstance(event, RunSkipped):
        return f"RunSkipped {event.reason.value}: {event.detail}"
    if isinstance(event, RunCancelled):
        return f"RunCancelled attempt {event.attempt}: {event.reason}"
    return None


def _outcome(event: object) -> str | None:
    if isinstance(event, RunStarted):
        return (f"RunStarted attempt {event.attempt} by worker {event.worker_id}, "
                f"lease until {iso(event.lease_until_ms)}")
    if isinstance(event, RunHeartbeat):
        return f"RunHeartbeat attempt {event.attempt} by worker {event.worker_id}"
    if isinstance(event, RunSucceeded):
        return f"RunSucceeded attempt {event.attempt} by worker {event.worker_id}"
    if isinstance(event, RunFailed):
        kind = "retryable" if event.retryable else "not retryable"
        return (f"RunFailed attempt {event.attempt} by worker {event.worker_id} ({kind}): "
                f"{event.error_class}: {event.error_message}")
    if isinstance(event, RunTimedOut):
        return f"RunTimedOut attempt {event.attempt} by worker {event.worker_id}"
    return None
