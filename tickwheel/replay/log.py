"""The unit of replay: one committed Kafka record, where it sits, and what it decodes to.

A :class:`LogRecord` is the export envelope (topic, partition, offset, timestamp, key and
value bytes), identical whether it came from a live topic or an archive file. Replay never
trusts a topic's name beyond its *role*: ``<prefix>runs`` plays :attr:`Role.RUNS` whatever
the prefix, which is how an export taken from one deployment replays anywhere.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from functools import cache
from typing import Any

from tickwheel.schemas import mappers
from tickwheel.schemas.codec import CodecError
from tickwheel.schemas.model import (
    AuditRecord,
    Command,
    DeadLetter,
    JobEvent,
    JobState,
    LogChunk,
    Outcome,
    RunEvent,
)


class Role(StrEnum):
    """What a topic is for, by its logical name in the topic contract (``topics.py``)."""

    COMMANDS = "commands"
    RUNS = "runs"
    OUTCOMES = "outcomes"
    JOB_EVENTS = "job-events"
    CHANGELOG = "sched-changelog"
    DLQ = "dlq"
    LOGS = "logs"
    AUDIT = "audit"


# The topics an export holds unless told otherwise: everything the processor reads or writes.
DEFAULT_ROLES: tuple[Role, ...] = (
    Role.COMMANDS, Role.RUNS, Role.OUTCOMES, Role.JOB_EVENTS, Role.CHANGELOG, Role.DLQ,
)

Decoded = Command | RunEvent | Outcome | JobEvent | DeadLetter | JobState | LogChunk | AuditRecord

_DECODERS: Mapping[Role, Callable[[bytes], Any]] = {
    Role.COMMANDS: mappers.command_from_bytes,
    Role.RUNS: mappers.run_event_from_bytes,
    Role.OUTCOMES: mappers.outcome_from_bytes,
    Role.JOB_EVENTS: mappers.job_event_from_bytes,
    Role.CHANGELOG: mappers.state_from_bytes,
    Role.DLQ: mappers.dead_letter_from_bytes,
    Role.LOGS: mappers.log_chunk_from_bytes,
    Role.AUDIT: mappers.audit_record_from_bytes,
}


@dataclass(frozen=True, slots=True)
class LogRecord:
    """One committed record: the export envelope."""

    topic: str
    partition: int
    offset: int
    timestamp: int  # the record's Kafka timestamp (CreateTime: the producer's clock), epoch ms
    key: bytes | None
    value: bytes | None


@dataclass(frozen=True, slots=True, order=True)
class Cite:
    """Where an event sits in the log, for a reader to go and look."""

    topic: str
    partition: int
    offset: int
    timestamp: int

    def __str__(self) -> str:
        return f"{self.topic}[{self.partition}]@{self.offset}"

    def to_json(self) -> dict[str, Any]:
        return {"topic": self.topic, "partition": self.partition, "offset": self.offset,
                "timestamp": self.timestamp}


@dataclass(frozen=True, slots=True)
class Entry:
    """A decoded record of a job. ``event`` is None for a tombstone (a deleted job's state)."""

    role: Role
    cite: Cite
    job_id: str
    event: Decoded | None


@dataclass(frozen=True, slots=True)
class Undecodable:
    """A record replay could not read, and why; it is reported, never silently dropped."""

    cite: Cite
    reason: str


def cite_of(record: LogRecord) -> Cite:
    return Cite(record.topic, record.partition, record.offset, record.timestamp)


@cache
def role_of(topic: str, prefix: str | None = None) -> Role | None:
    """The role of ``topic``: exactly ``prefix + name`` if a prefix is given, else by suffix."""
    if prefix is not None:
        name = topic[len(prefix):] if topic.startswith(prefix) else None
        return next((role for role in Role if role.value == name), None)
    return next((role for role in Role if topic == role or topic.endswith(f".{role}")), None)


def decode(record: LogRecord, role: Role) -> Entry | Undecodable:
    """Decode ``record`` with its role's schema family, as the processor would read it."""
    cite = cite_of(record)
    if record.value is None:
        if role is Role.CHANGELOG and record.key is not None:
            return Entry(role, cite, _text(record.key), None)
        return Undecodable(cite, "empty value (tombstone) outside the changelog")
    try:
        event = _DECODERS[role](record.value)
    except CodecError as exc:
        return Undecodable(cite, f"undecodable {role.value} record: {exc}")
    job_id = _job_id(event)
    if record.key is not None and job_id is not None and record.key != job_id.encode():
        return Undecodable(cite, f"record key {record.key!r} does not match job id {job_id!r}")
    if job_id is None:  # an unkeyed dead letter belongs to no job: job id ""
        job_id = _text(record.key) if record.key is not None else ""
    return Entry(role, cite, job_id, event)


def _job_id(event: Decoded) -> str | None:
    if isinstance(event, DeadLetter):
        return None  # a dead letter's key is the offending input's key, if any
    meta = getattr(event, "meta", None)
    return str(meta.job_id) if meta is not None else str(getattr(event, "job_id"))  # noqa: B009


def _text(key: bytes) -> str:
    return key.decode("utf-8", errors="replace")
