"""The spliced JobState encoder writes exactly the bytes of the generic encoder."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.strategies import job_states
from tickwheel.schemas import mappers
from tickwheel.schemas.codec import CodecError
from tickwheel.schemas.model import JobState


@settings(max_examples=150, deadline=None)
@given(job_states())
def test_spliced_state_bytes_equal_generic_bytes(state: JobState) -> None:
    """state_to_bytes(s) == to_bytes(s), and decodes back to s."""
    assert mappers.state_to_bytes(state) == mappers.to_bytes(state)
    assert mappers.state_from_bytes(mappers.state_to_bytes(state)) == state


@settings(max_examples=50, deadline=None)
@given(job_states())
def test_reused_spec_bytes_follow_the_rest_of_the_state(state: JobState) -> None:
    """A second state sharing the spec object reuses its bytes but encodes its own fields."""
    mappers.state_to_bytes(state)
    changed = dataclasses.replace(state, version=state.version + 1, consecutive_failures=7)
    assert mappers.state_to_bytes(changed) == mappers.to_bytes(changed)


@settings(max_examples=150, deadline=None)
@given(job_states())
def test_spliced_decode_equals_the_generic_decode(state: JobState) -> None:
    """The fast decode of a current-schema state gives what the codec's generic path gives."""
    data = mappers.to_bytes(state)
    fast = mappers._STATE_ENCODER.decode(data)
    assert fast == mappers._decode(data, mappers._STATES, "a job state") == state


@settings(max_examples=50, deadline=None)
@given(job_states())
def test_a_decoded_state_re_encodes_from_the_spec_bytes_it_was_read_from(state: JobState) -> None:
    """A loaded state, fired and re-encoded, reuses its input's spec slice and stays byte-exact."""
    loaded = mappers.state_from_bytes(mappers.to_bytes(state))
    assert mappers._STATE_ENCODER._specs[id(loaded.spec)][0] is loaded.spec
    fired = dataclasses.replace(loaded, version=loaded.version + 1)
    assert mappers.state_to_bytes(fired) == mappers.to_bytes(fired)


@settings(max_examples=200, deadline=None)
@given(job_states(), st.binary(max_size=6), st.integers(min_value=0, max_value=400))
def test_damaged_state_bytes_raise_codec_error_only(state: JobState, junk: bytes, cut: int) -> None:
    """Truncated or padded state bytes raise CodecError (never another type, never a hang)."""
    data = mappers.to_bytes(state)
    for damaged in (data[: min(cut, len(data) - 1)], data + junk if junk else data + b"\x00"):
        with pytest.raises(CodecError):
            mappers.state_from_bytes(damaged)
