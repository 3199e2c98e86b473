"""Bad input at the edges: cron schedules and Avro records from anywhere fail with typed errors, fast.

Extends ``test_codec.py`` (which fuzzes the codec layer) and ``test_schedule_props.py``
(which checks valid schedules): here the *mappers* (every family decoder, as the processor
and replay call them) and the schedule entry points (``validate``, ``next_occurrence``)
get arbitrary and mutated input, and must answer with ``CodecError`` / ``ScheduleError``
or a result, never another exception, within a time bound.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.core_harness import T0
from tickwheel.schemas import mappers
from tickwheel.schemas.codec import CodecError
from tickwheel.schemas.model import (
    CommandMeta,
    CreateJob,
    CronSchedule,
    ExecutorSpec,
    JobSpec,
    OneTime,
    RunDue,
    RunStarted,
    RunTrigger,
)
from tickwheel.streams.schedule import ScheduleError, next_occurrence, validate

BOUND_S = 1.0  # one decode or one schedule question, however hostile, answers within this
FUZZ = settings(max_examples=150, deadline=None)

DECODERS: list[Callable[[bytes], Any]] = [
    mappers.from_bytes,
    mappers.command_from_bytes,
    mappers.run_event_from_bytes,
    mappers.outcome_from_bytes,
    mappers.job_event_from_bytes,
    mappers.dead_letter_from_bytes,
    mappers.state_from_bytes,
    mappers.log_chunk_from_bytes,
]
SAMPLES: list[bytes] = [
    mappers.to_bytes(CreateJob(CommandMeta("c-1", "job-1", T0, "p"), JobSpec(
        "team", "name", CronSchedule("*/5 * * * *", "Europe/Paris"), ExecutorSpec("http", '{"url": "x"}')))),
    mappers.to_bytes(RunDue("r-1", "job-1", "team", "default", 2, T0, T0, T0, RunTrigger.RETRY,
                            ExecutorSpec("noop"), 1_000, 5_000, "2025b", ("start_by=1",))),
    mappers.to_bytes(RunStarted("r-1", "job-1", 1, "w-1", T0 + 1, T0)),
]


def _bounded(call: Callable[[], object]) -> float:
    started = time.monotonic()
    call()
    return time.monotonic() - started


def _decode_typed(decode: Callable[[bytes], Any], data: bytes) -> None:
    def run() -> None:
        with contextlib.suppress(CodecError):
            decode(data)

    assert _bounded(run) < BOUND_S


@pytest.mark.parametrize("decode", DECODERS, ids=lambda d: d.__name__)
@FUZZ
@given(data=st.binary(max_size=512))
def test_every_family_decoder_raises_only_codec_error_on_arbitrary_bytes(
    decode: Callable[[bytes], Any], data: bytes
) -> None:
    """Arbitrary bytes into any mapper decoder: a CodecError or a value, nothing else, quickly."""
    _decode_typed(decode, data)


@pytest.mark.parametrize("decode", DECODERS, ids=lambda d: d.__name__)
@FUZZ
@given(sample=st.sampled_from(SAMPLES), data=st.data())
def test_mutated_records_decode_or_raise_codec_error_in_every_family(
    decode: Callable[[bytes], Any], sample: bytes, data: st.DataObject
) -> None:
    """A valid record with bytes flipped, cut or appended, read as any family: typed errors only."""
    raw = bytearray(sample)
    for _ in range(data.draw(st.integers(1, 4))):
        where = data.draw(st.integers(0, len(raw) - 1))
        raw[where] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(raw)))
    tail = data.draw(st.binary(max_size=16))
    _decode_typed(decode, bytes(raw[:cut]) + tail)


@pytest.mark.parametrize("decode", DECODERS, ids=lambda d: d.__name__)
def test_a_record_of_another_family_is_a_codec_error_not_a_wrong_type(decode: Callable[[bytes], Any]) -> None:
    """Each family decoder refuses the other families' records (the processor relies on it)."""
    for sample in SAMPLES:
        try:
            decoded = decode(sample)
        except CodecError:
            continue
        assert type(decoded).__name__ in {"CreateJob", "RunDue", "RunStarted"}


# -- cron -------------------------------------------------------------------------------------

CRON_TOKENS = st.sampled_from(
    ["*", "*/0", "*/1", "*/7", "0", "59", "60", "-1", "1-5", "5-1", "L", "W", "15W", "#", "1#5", "?",
     "JAN", "MON-FRI", "sun", "0-59/61", ",", "1,2,", "LW", "H", "@daily", "31", "2-30/0", "99999999999"]
)
CRON_EXPRS = st.one_of(
    st.text(max_size=80),
    st.lists(CRON_TOKENS, min_size=0, max_size=8).map(" ".join),
)
ZONES = st.one_of(
    st.sampled_from(["UTC", "Europe/Paris", "America/New_York", "Asia/Kolkata", "Pacific/Chatham"]),
    st.text(max_size=40),
)


@FUZZ
@given(expr=CRON_EXPRS, tz=ZONES, min_interval=st.integers(0, 86_400_000))
def test_validate_answers_schedule_error_or_nothing_for_any_cron_text(
    expr: str, tz: str, min_interval: int
) -> None:
    """Any expression and zone text: validate raises ScheduleError (naming a field) or accepts, fast."""

    def run() -> None:
        try:
            validate(CronSchedule(expr, tz), min_interval_ms=min_interval)
        except ScheduleError as exc:
            assert exc.field  # noqa: PT017 - any field; pytest.raises cannot express "or accepted"

    assert _bounded(run) < BOUND_S


@FUZZ
@given(expr=CRON_EXPRS, tz=ZONES, after=st.integers(-(2**63), 2**63 - 1))
def test_next_occurrence_answers_typed_for_any_schedule_and_instant(expr: str, tz: str, after: int) -> None:
    """next_occurrence on unvalidated input at any instant: an occurrence, None or ScheduleError."""

    def run() -> None:
        try:
            found = next_occurrence(CronSchedule(expr, tz), after)
        except ScheduleError:
            return
        assert found is None or found.at_ms > after

    assert _bounded(run) < BOUND_S


@FUZZ
@given(at=st.one_of(st.integers(-(2**70), 2**70), st.floats(allow_nan=True), st.text(max_size=5)))
def test_one_time_instants_out_of_range_or_mistyped_are_schedule_errors(at: object) -> None:
    """A one-time instant that is not schedulable epoch milliseconds is refused with ScheduleError."""
    try:
        validate(OneTime(at))  # type: ignore[arg-type]
    except ScheduleError as exc:
        assert exc.field  # noqa: PT017 - huge in-range integers are accepted, so no pytest.raises
