"""Schema evolution: old writers read by the current reader, current writers read by old readers."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.strategies import avro_data
from tickwheel.schemas.codec import Registry, SchemaEntry, default_registry
from tickwheel.schemas.mappers import command_from_bytes, run_event_from_bytes, state_from_bytes, to_bytes
from tickwheel.schemas.model import (
    CommandMeta,
    CreateJob,
    CronSchedule,
    ExecutorSpec,
    FoldPolicy,
    GapPolicy,
    JobSpec,
    JobState,
    JobStatus,
    OneTime,
    RetryPolicy,
    RunDue,
    RunTrigger,
)

REGISTRY = default_registry()
NS = "tickwheel.v1."
HISTORY = [e for e in REGISTRY.entries() if not e.is_current]
ALL = list(REGISTRY.entries())


def _id(entry: SchemaEntry) -> str:
    return f"{entry.source}:{entry.name.removeprefix(NS)}"


def _old(source: str, short: str) -> SchemaEntry:
    return REGISTRY.entry(f"history/{source}", NS + short)


# ---------------------------------------------------------------------------
# Explicit cases: the fields each revision added


def test_run_due_v0_gets_defaults_and_the_upcaster() -> None:
    """A v0 RunDue reads with tz_version "" and no flags; the upcaster sets not_before = scheduled."""
    v0 = {
        "run_id": "r-1",
        "job_id": "job-1",
        "team": "t",
        "pool": "default",
        "attempt": 1,
        "scheduled_for_ms": 1_000,
        "emitted_at_ms": 900,
        "trigger": "scheduled",
        "executor": {"kind": "http", "config_json": "{}"},
        "timeout_ms": 60_000,
        "lease_ms": 30_000,
    }
    due = run_event_from_bytes(Registry.encode_with(_old("runs_v0.avsc", "RunDue"), v0))
    assert due == RunDue(
        run_id="r-1",
        job_id="job-1",
        team="t",
        pool="default",
        attempt=1,
        scheduled_for_ms=1_000,
        not_before_ms=1_000,
        emitted_at_ms=900,
        trigger=RunTrigger.SCHEDULED,
        executor=ExecutorSpec("http"),
        timeout_ms=60_000,
        lease_ms=30_000,
    )


def _spec_v0(schedule: Any) -> dict[str, Any]:
    return {
        "team": "t",
        "name": "n",
        "schedule": schedule,
        "executor": {"kind": "http", "config_json": "{}"},
        "pool": "default",
        "overlap": "allow",
        "catchup": "all",
        "catchup_window_ms": 5,
        "retry": {
            "max_attempts": 4,
            "backoff_initial_ms": 10,
            "backoff_max_ms": 20,
            "backoff_multiplier": 3.0,
            "jitter": 0.0,
        },
        "timeout_ms": 6,
        "lease_ms": 7,
        "auto_pause_after": 2,
    }


def test_create_job_v0_reads_with_no_spread_jitter_or_labels() -> None:
    """A v0 CreateJob (before spread_ms, jitter_ms, labels) reads with 0, 0 and {}."""
    cron = (NS + "CronSchedule", {"expr": "0 0 * * *", "tz": "UTC", "gap": "skip", "fold": "both"})
    meta = {"command_id": "c-1", "job_id": "job-1", "issued_at_ms": 1, "principal": "p", "request_id": ""}
    data = Registry.encode_with(_old("commands_v0.avsc", "CreateJob"), {"meta": meta, "spec": _spec_v0(cron)})
    command = command_from_bytes(data)
    assert isinstance(command, CreateJob)
    assert command.meta == CommandMeta("c-1", "job-1", 1, "p", "")
    assert (command.spec.spread_ms, command.spec.jitter_ms, command.spec.labels) == (0, 0, {})
    assert command.spec.schedule == CronSchedule("0 0 * * *", "UTC", GapPolicy.SKIP, FoldPolicy.BOTH)
    assert command.spec.retry == RetryPolicy(4, 10, 20, 3.0, 0.0)


def test_job_state_v0_reads_with_no_recent_commands_or_tz_version() -> None:
    """A v0 changelog value reads back with recent_command_ids () and tz_version ""."""
    record = {
        "job_id": "job-1",
        "spec": _spec_v0((NS + "OneTime", {"at_ms": 42})),
        "version": 2,
        "status": "active",
        "next_fire_ms": 42,
        "last_scheduled_ms": None,
        "runs": [],
        "buffered": [],
        "consecutive_failures": 1,
    }
    state = state_from_bytes(Registry.encode_with(_old("state_v0.avsc", "JobState"), record))
    assert (state.recent_command_ids, state.tz_version) == ((), "")
    assert (state.next_fire_ms, state.last_scheduled_ms, state.spec.schedule) == (42, None, OneTime(42))


def test_current_run_due_read_by_the_v0_reader_drops_new_fields() -> None:
    """A v0 consumer reading today's RunDue sees every v0 field and none of the new ones."""
    due = RunDue(
        "r-1", "job-1", "t", "p", 3, 10, 8, 5, RunTrigger.MANUAL, ExecutorSpec("http"), 1, 2, "2025b", ("x",)
    )
    old = REGISTRY.decode_as(to_bytes(due), _old("runs_v0.avsc", "RunDue"))
    assert set(old) == {f["name"] for f in _old("runs_v0.avsc", "RunDue").schema["fields"]}
    assert not {"not_before_ms", "tz_version", "flags"} & set(old)
    assert (old["attempt"], old["trigger"]) == (3, "manual")
    assert old["executor"] == {"kind": "http", "config_json": "{}"}


def test_current_job_state_read_by_the_v0_reader_drops_new_fields() -> None:
    """A v0 reader of today's JobState loses tz_version/recent_command_ids and the spec's new fields."""
    spec = JobSpec("t", "n", OneTime(1), ExecutorSpec("http"), spread_ms=9, labels={"a": "b"})
    state = JobState("job-1", spec, 1, JobStatus.ACTIVE, 1, None, recent_command_ids=("c",), tz_version="z")
    old = REGISTRY.decode_as(to_bytes(state), _old("state_v0.avsc", "JobState"))
    assert "tz_version" not in old
    assert "recent_command_ids" not in old
    assert "labels" not in old["spec"]
    assert "spread_ms" not in old["spec"]
    assert old["spec"]["schedule"] == (NS + "OneTime", {"at_ms": 1})


# ---------------------------------------------------------------------------
# Generic: every writer schema in the registry, both directions


def _named(schema: Any, out: dict[str, Any]) -> dict[str, Any]:
    """Every named record inside a self-contained schema, by full name."""
    if isinstance(schema, list):
        for branch in schema:
            _named(branch, out)
    elif isinstance(schema, dict):
        if schema["type"] == "record":
            out[schema["name"]] = schema
            for f in schema["fields"]:
                _named(f["type"], out)
        elif schema["type"] == "array":
            _named(schema["items"], out)
        elif schema["type"] == "map":
            _named(schema["values"], out)
    return out


class _Expect:
    """What Avro resolution should produce: the test's oracle, independent of fastavro's."""

    def __init__(self, writer: Any, reader: Any) -> None:
        self.writers = _named(writer, {})
        self.readers = _named(reader, {})

    def value(self, datum: Any, writer: Any, reader: Any) -> Any:
        writer, reader = self._deref(writer, self.writers), self._deref(reader, self.readers)
        if isinstance(writer, list):
            if isinstance(datum, tuple):
                name, inner = datum
                return name, self.value(inner, name, name)
            return datum  # our unions pair null with one primitive: nothing to resolve
        if not isinstance(writer, dict):
            return datum
        if writer["type"] == "record":
            return self.record(datum, writer, reader)
        if writer["type"] == "array":
            return [self.value(item, writer["items"], reader["items"]) for item in datum]
        if writer["type"] == "map":
            return {k: self.value(v, writer["values"], reader["values"]) for k, v in datum.items()}
        return datum

    def record(self, datum: dict[str, Any], writer: dict[str, Any], reader: dict[str, Any]) -> dict[str, Any]:
        written = {f["name"]: f for f in writer["fields"]}
        out = {}
        for f in reader["fields"]:
            if f["name"] in written:
                out[f["name"]] = self.value(datum[f["name"]], written[f["name"]]["type"], f["type"])
            else:
                out[f["name"]] = f["default"]
        return out

    @staticmethod
    def _deref(schema: Any, named: dict[str, Any]) -> Any:
        return named.get(schema, schema) if isinstance(schema, str) else schema


@pytest.mark.parametrize("entry", ALL, ids=_id)
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_every_writer_schema_resolves_into_the_current_reader(
    entry: SchemaEntry, data: st.DataObject
) -> None:
    """Any datum of any registered writer, old or current, resolves into the current schema."""
    datum = data.draw(avro_data(entry.schema))
    name, decoded = REGISTRY.decode(Registry.encode_with(entry, datum))
    current = REGISTRY.current(entry.name).schema
    assert name == entry.name
    assert decoded == _Expect(entry.schema, current).record(datum, entry.schema, current)


@pytest.mark.parametrize("old", HISTORY, ids=_id)
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_every_old_reader_reads_the_current_writer(old: SchemaEntry, data: st.DataObject) -> None:
    """Any datum written with today's schema decodes with each historical schema as reader."""
    current = REGISTRY.current(old.name)
    datum = data.draw(avro_data(current.schema))
    decoded = REGISTRY.decode_as(Registry.encode_with(current, datum), old)
    assert decoded == _Expect(current.schema, old.schema).record(datum, current.schema, old.schema)


def test_history_holds_an_older_version_of_each_changed_family() -> None:
    """The registry carries old RunDue, CreateJob/JobSpec and JobState writers."""
    assert {_id(e) for e in HISTORY} >= {
        "history/runs_v0.avsc:RunDue",
        "history/commands_v0.avsc:CreateJob",
        "history/commands_v0.avsc:JobSpec",
        "history/state_v0.avsc:JobState",
    }
