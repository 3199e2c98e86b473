"""The processor's input merge keeps each topic-partition in offset order."""

from __future__ import annotations

from dataclasses import dataclass

from tickwheel.streams.runtime import merge_inputs


@dataclass(frozen=True)
class _Record:
    topic: str
    offset: int
    timestamp: int


def test_merge_never_reorders_records_of_one_topic_partition() -> None:
    """A later offset with an earlier producer timestamp still comes after its predecessor."""
    commands = [_Record("commands", 0, 100), _Record("commands", 1, 50)]  # clocks disagree
    outcomes = [_Record("outcomes", 0, 75)]
    merged = merge_inputs([commands, outcomes])
    assert [r for r in merged if r.topic == "commands"] == commands
    assert len(merged) == 3


def test_merge_interleaves_topics_by_timestamp() -> None:
    """Between topics, the earlier timestamp goes first."""
    commands = [_Record("commands", 0, 10), _Record("commands", 1, 30)]
    outcomes = [_Record("outcomes", 0, 20)]
    assert [r.timestamp for r in merge_inputs([commands, outcomes])] == [10, 20, 30]
