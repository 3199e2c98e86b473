"""Mappers between the frozen domain types and Avro bytes: coverage, round trips, family checks."""

from __future__ import annotations

import contextlib
import dataclasses
import typing
from collections.abc import Callable
from enum import StrEnum
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests import strategies as tws
from tickwheel.schemas import mappers, model
from tickwheel.schemas.codec import MAGIC, CodecError, default_registry, encode_record
from tickwheel.schemas.mappers import (
    Event,
    audit_record_from_bytes,
    command_from_bytes,
    dead_letter_from_bytes,
    from_bytes,
    job_event_from_bytes,
    log_chunk_from_bytes,
    outcome_from_bytes,
    run_event_from_bytes,
    state_from_bytes,
    to_bytes,
)
from tickwheel.schemas.model import (
    AttemptRecord,
    CronSchedule,
    ExecutorSpec,
    JobSpec,
    JobState,
    JobStatus,
    OneTime,
    RunDue,
    RunState,
    RunStatus,
    RunTrigger,
)

REGISTRY = default_registry()
EVENT_TYPES: tuple[type, ...] = typing.get_args(Event)
NESTED_TYPES = (
    model.OneTime,
    model.CronSchedule,
    model.RetryPolicy,
    model.ExecutorSpec,
    model.JobSpec,
    model.CommandMeta,
    model.RunState,
    model.AttemptRecord,
)

# Which typed helper accepts which family; every other helper must refuse it.
HELPERS: list[tuple[Callable[[bytes], Any], tuple[type, ...]]] = [
    (command_from_bytes, typing.get_args(model.Command)),
    (run_event_from_bytes, typing.get_args(model.RunEvent)),
    (outcome_from_bytes, typing.get_args(model.Outcome)),
    (log_chunk_from_bytes, (model.LogChunk,)),
    (job_event_from_bytes, typing.get_args(model.JobEvent)),
    (dead_letter_from_bytes, (model.DeadLetter,)),
    (audit_record_from_bytes, (model.AuditRecord,)),
    (state_from_bytes, (model.JobState,)),
]

DUE = RunDue(
    run_id="r-1",
    job_id="job-1",
    team="payments",
    pool="default",
    attempt=2,
    scheduled_for_ms=1_767_225_600_000,
    not_before_ms=1_767_225_599_000,
    emitted_at_ms=1_767_225_590_000,
    trigger=RunTrigger.RETRY,
    executor=ExecutorSpec("http", '{"url": "https://svc/run"}'),
    timeout_ms=60_000,
    lease_ms=30_000,
    tz_version="2025b",
    flags=("lookahead",),
)


def _short(kind: type) -> str:
    return f"tickwheel.v1.{kind.__name__}"


# ---------------------------------------------------------------------------
# The schemas cover the model


@pytest.mark.parametrize("kind", EVENT_TYPES + NESTED_TYPES, ids=lambda k: k.__name__)
def test_schema_fields_match_the_dataclass_fields(kind: type) -> None:
    """Each model type has a current schema with exactly its fields, in declaration order."""
    schema = REGISTRY.current(_short(kind)).schema
    assert [f["name"] for f in schema["fields"]] == [f.name for f in dataclasses.fields(kind)]


def _dataclass_default(f: dataclasses.Field[Any]) -> Any:
    if f.default is not dataclasses.MISSING:
        value = f.default
    else:
        assert f.default_factory is not dataclasses.MISSING
        value = f.default_factory()
    if isinstance(value, StrEnum):
        return value.value
    if isinstance(value, tuple):
        return list(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return value


@pytest.mark.parametrize("kind", EVENT_TYPES + NESTED_TYPES, ids=lambda k: k.__name__)
def test_every_dataclass_default_is_an_avro_default(kind: type) -> None:
    """Fields with a dataclass default carry the same Avro default, so they may be added later."""
    avro = {f["name"]: f for f in REGISTRY.current(_short(kind)).schema["fields"]}
    for f in dataclasses.fields(kind):
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            continue
        assert "default" in avro[f.name], f"{kind.__name__}.{f.name} has no Avro default"
        assert avro[f.name]["default"] == _dataclass_default(f), f"{kind.__name__}.{f.name}"


def test_every_event_type_has_a_mapper() -> None:
    """Every member of the Event union can be encoded and has a decoder."""
    assert set(mappers._ENCODERS) == set(EVENT_TYPES)
    assert set(mappers._ALL) == {_short(kind) for kind in EVENT_TYPES}


# ---------------------------------------------------------------------------
# Round trips


@settings(max_examples=200, deadline=None)
@given(tws.events())
def test_every_event_round_trips(event: Event) -> None:
    """from_bytes(to_bytes(e)) == e for every event family and the job state."""
    assert from_bytes(to_bytes(event)) == event


@settings(max_examples=100, deadline=None)
@given(tws.job_states())
def test_job_state_round_trips_through_the_typed_helper(state: JobState) -> None:
    """The changelog value decodes back to an equal JobState via state_from_bytes."""
    assert state_from_bytes(to_bytes(state)) == state


def test_extreme_long_values_round_trip() -> None:
    """Avro longs carry the full signed 64-bit range, both ends included."""
    for value in (-(2**63), 2**63 - 1, 0, -1):
        due = dataclasses.replace(DUE, scheduled_for_ms=value, attempt=value)
        assert from_bytes(to_bytes(due)) == due


def test_optional_times_and_nested_runs_round_trip() -> None:
    """None, nested runs with history, labels and a cron schedule all survive the trip."""
    spec = JobSpec(
        team="t",
        name="n",
        schedule=CronSchedule("*/5 * * * *", "Europe/Paris"),
        executor=ExecutorSpec("process"),
        labels={"tier": "1", "ünï": "cødé"},
    )
    run = RunState(
        run_id="r-1",
        scheduled_for_ms=5,
        attempt=2,
        status=RunStatus.RETRY_WAIT,
        trigger=RunTrigger.SCHEDULED,
        history=(AttemptRecord(1, "w-1", "failed", 4, "boom"),),
    )
    state = JobState("job-1", spec, 3, JobStatus.PAUSED, None, 5, runs=(run,), buffered=(7, 8))
    assert state_from_bytes(to_bytes(state)) == state


def test_to_bytes_of_a_non_event_is_a_type_error() -> None:
    """Only event types are encodable; a nested part such as JobSpec is not an event."""
    spec = JobSpec(team="t", name="n", schedule=OneTime(at_ms=1), executor=ExecutorSpec("http"))
    with pytest.raises(TypeError, match="not an event"):
        to_bytes(spec)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------
# Family checks and decoding errors


@pytest.mark.parametrize(("helper", "accepted"), HELPERS, ids=lambda h: getattr(h, "__name__", ""))
@settings(max_examples=50, deadline=None)
@given(event=tws.events())
def test_typed_helpers_accept_their_family_and_refuse_others(
    helper: Callable[[bytes], Any], accepted: tuple[type, ...], event: Event
) -> None:
    """A typed helper returns its own family's events and raises CodecError for any other record."""
    data = to_bytes(event)
    if isinstance(event, accepted):
        assert helper(data) == event
    else:
        with pytest.raises(CodecError, match="expected"):
            helper(data)


def test_a_non_event_record_is_refused_by_from_bytes() -> None:
    """Bytes of a registered but non-event record (a bare JobSpec) raise CodecError."""
    data = encode_record("tickwheel.v1.ExecutorSpec", {"kind": "http", "config_json": "{}"})
    with pytest.raises(CodecError, match="expected an event"):
        from_bytes(data)


def test_an_unknown_enum_value_is_a_codec_error() -> None:
    """An enum value this code does not know (a newer writer's) raises CodecError naming it."""
    record = {
        "run_id": "r",
        "job_id": "j",
        "team": "t",
        "scheduled_for_ms": 1,
        "reason": "solar_flare",
        "detail": "",
        "at_ms": 2,
    }
    with pytest.raises(CodecError, match="unknown SkipReason 'solar_flare'"):
        run_event_from_bytes(encode_record("tickwheel.v1.RunSkipped", record))


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(sorted(e.fingerprint for e in REGISTRY.entries())), st.binary(max_size=256))
def test_from_bytes_of_a_valid_header_and_random_body_raises_only_codec_error(fp: bytes, body: bytes) -> None:
    """Garbage behind any known fingerprint maps to an event or raises CodecError, nothing else."""
    with contextlib.suppress(CodecError):
        from_bytes(MAGIC + fp + body)


@settings(max_examples=100, deadline=None)
@given(tws.events(), st.data())
def test_from_bytes_of_a_mutated_event_raises_only_codec_error(event: Event, data: st.DataObject) -> None:
    """A valid event with a few bytes overwritten maps to an event or raises CodecError."""
    raw = bytearray(to_bytes(event))
    for _ in range(data.draw(st.integers(1, 3))):
        raw[data.draw(st.integers(10, len(raw) - 1))] = data.draw(st.integers(0, 255))
    with contextlib.suppress(CodecError):
        from_bytes(bytes(raw))


def test_every_truncation_of_an_event_is_a_codec_error() -> None:
    """A job state cut at any length raises CodecError from state_from_bytes."""
    spec = JobSpec(team="t", name="n", schedule=OneTime(at_ms=1), executor=ExecutorSpec("http"))
    data = to_bytes(JobState("job-1", spec, 1, JobStatus.ACTIVE, 1, None, tz_version="2025b"))
    for cut in range(len(data)):
        with pytest.raises(CodecError):
            state_from_bytes(data[:cut])
