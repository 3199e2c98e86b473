"""The synthetic-state generator and the pure helpers of the recovery-family benchmarks."""

from __future__ import annotations

import json

from aiokafka.partitioner import DefaultPartitioner
from hypothesis import given, settings
from hypothesis import strategies as st

from bench import synth
from bench.recovery import Transition, far_due, parse_transitions, restore_span_ms
from bench.scale_out import owners
from tickwheel.schemas import mappers
from tickwheel.schemas.model import JobStatus
from tickwheel.streams import core
from tickwheel.streams.timers import TimerKind

NOW = 1_800_000_000_000


@settings(max_examples=100, deadline=None)
@given(key=st.binary(min_size=1, max_size=40), partitions=st.integers(1, 64))
def test_partition_of_matches_the_default_partitioner(key: bytes, partitions: int) -> None:
    """A synthetic record lands where aiokafka's default partitioner sends the job's commands."""
    all_partitions = list(range(partitions))
    assert synth.partition_of(key, partitions) == DefaultPartitioner()(key, all_partitions, all_partitions)


def test_synth_states_are_what_the_core_makes_for_each_job() -> None:
    """Each state is a live one-time job with its own id, due when asked, with one FIRE timer."""
    states = list(synth.synth_states(5, lambda i: NOW + 1_000 * i, NOW))
    assert [s.job_id for s in states] == [synth.synth_job_id(i) for i in range(5)]
    for i, state in enumerate(states):
        assert state.status is JobStatus.ACTIVE
        assert state.next_fire_ms == NOW + 1_000 * i
        (timer,) = core.timers_of(state)
        assert (timer.kind, timer.job_id, timer.due_ms) == (TimerKind.FIRE, state.job_id, NOW + 1_000 * i)


def test_synth_states_round_trip_through_the_changelog_encoding() -> None:
    """What the generator writes decodes back to the very state, as the processor's restore reads it."""
    for state in synth.synth_states(3, lambda _i: NOW + 60_000, NOW):
        assert mappers.state_from_bytes(mappers.state_to_bytes(state)) == state


def test_synth_steps_the_core_once_per_distinct_instant(monkeypatch: object) -> None:
    """Jobs sharing an instant share one template: the core is stepped per instant, not per job."""
    calls: list[int] = []
    real = synth.template_state

    def counting(at_ms: int, now_ms: int, cfg: core.CoreConfig) -> object:
        calls.append(at_ms)
        return real(at_ms, now_ms, cfg)

    monkeypatch.setattr(synth, "template_state", counting)  # type: ignore[attr-defined]
    list(synth.synth_states(100, lambda i: NOW + (i % 3), NOW))
    assert sorted(calls) == [NOW, NOW + 1, NOW + 2]


def test_far_due_is_on_the_hour_between_one_and_thirty_one_days_out() -> None:
    """The bulk of synthetic jobs never falls due during a run and needs few distinct specs."""
    due = far_due(NOW)
    values = {due(i) for i in range(2_000)}
    assert all(NOW + 86_400_000 <= v < NOW + 31 * 86_400_000 for v in values)
    assert all((v - NOW) % 3_600_000 == 0 for v in values)


def _log_line(ts: str, msg: str) -> str:
    return json.dumps({"ts": ts, "level": "info", "logger": "tickwheel.processor", "msg": msg})


def test_parse_transitions_reads_task_state_changes_from_the_json_log() -> None:
    """Only ``task p: a -> b`` lines count; other lines and non-JSON noise are skipped."""
    text = "\n".join(
        [
            _log_line("2026-11-29T08:00:00.100Z", "task 2: created -> restoring"),
            _log_line("2026-11-29T08:00:01.350Z", "task 2: restored 10 changelog records from offset 0"),
            "not json",
            _log_line("2026-11-29T08:00:01.400Z", "task 2: restoring -> running"),
        ]
    )
    found = parse_transitions(text)
    assert [(t.partition, t.target) for t in found] == [(2, "restoring"), (2, "running")]
    assert found[1].at_ms - found[0].at_ms == 1_300


def test_restore_span_is_first_restoring_to_last_running() -> None:
    """The restore of a process lasts until its slowest partition runs."""
    transitions = [
        Transition(0, "restoring", 100),
        Transition(1, "restoring", 120),
        Transition(0, "running", 900),
        Transition(1, "running", 1_500),
    ]
    assert restore_span_ms(transitions) == (100, 1_500)
    assert restore_span_ms([]) == (0, 0)


def test_owners_is_the_process_that_last_took_each_partition(tmp_path: object) -> None:
    """After a rebalance a partition belongs to whoever moved it to RUNNING last."""
    from pathlib import Path

    base = Path(str(tmp_path))
    first, second = base / "a.log", base / "b.log"
    first.write_text(
        "\n".join(
            [
                _log_line("2026-11-29T08:00:01.000Z", "task 0: restoring -> running"),
                _log_line("2026-11-29T08:00:01.000Z", "task 1: restoring -> running"),
            ]
        )
    )
    second.write_text(_log_line("2026-11-29T08:00:05.000Z", "task 1: restoring -> running"))
    assert owners([first, second]) == {0: 0, 1: 1}


def test_percentile_picks_the_rank() -> None:
    """p50 and p99 of 1..100 are the 51st and 100th values; empty input is 0."""
    values = [float(v) for v in range(1, 101)]
    assert synth.percentile(values, 0.5) == 51.0
    assert synth.percentile(values, 0.99) == 100.0
    assert synth.percentile([], 0.99) == 0.0
