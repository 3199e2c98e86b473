"""The spliced JobState encoder writes exactly the bytes of the generic encoder."""

from __future__ import annotations

import dataclasses

from hypothesis import given, settings

from tests.strategies import job_states
from tickwheel.schemas import mappers
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
