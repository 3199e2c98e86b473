"""The changelog's ``tw-timers`` header: restore fills the timer index from it without decoding."""

from __future__ import annotations

import asyncio

from aiokafka.producer.message_accumulator import BatchBuilder
from aiokafka.record.default_records import DefaultRecordBatch
from aiokafka.structs import ConsumerRecord, RecordMetadata
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.core_harness import HOUR, MINUTE, SECOND, T0, Harness, cron, once
from tests.unit.test_wheel import any_timer
from tickwheel.schemas import mappers
from tickwheel.schemas.model import JobState
from tickwheel.streams import core
from tickwheel.streams.processor import _apply_changelog, _BatchWriter, _record_timers, _timer_headers
from tickwheel.streams.store import MemoryStore
from tickwheel.streams.timers import TIMER_RULES, TIMERS_HEADER, Timer, TimerKind, pack_timers, unpack_timers


def with_team(timers: list[Timer], team: str) -> list[Timer]:
    return [Timer(t.due_ms, t.job_id, t.kind, t.run_id, team) for t in timers]


@settings(max_examples=150, deadline=None)
@given(st.lists(any_timer, max_size=6), st.text(max_size=5))
def test_packed_timers_unpack_to_the_same_timers_and_teams(timers: list[Timer], team: str) -> None:
    """pack/unpack is lossless, including the team carried as the index value."""
    timers = with_team(timers, team)
    unpacked = unpack_timers(pack_timers(timers))
    assert unpacked == frozenset(timers)
    assert unpacked is not None
    assert {t.key(): t.team for t in unpacked} == {t.key(): t.team for t in timers}


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=80))
def test_unpacking_arbitrary_bytes_gives_timers_or_none_never_raises(raw: bytes) -> None:
    """A damaged header is not trusted: unpack answers None (restore then decodes the state)."""
    result = unpack_timers(raw)
    assert result is None or isinstance(result, frozenset)


def test_a_header_written_under_other_timer_rules_is_not_trusted() -> None:
    """A different rules version (or a truncated header) makes unpack answer None."""
    packed = pack_timers([Timer(T0, "job-1", TimerKind.FIRE, "", "team-a")])
    assert unpack_timers(bytes((TIMER_RULES + 1,)) + packed[1:]) is None
    assert unpack_timers(packed[:-3]) is None
    assert unpack_timers(b"") is None


def states_in_every_timer_situation() -> list[JobState]:
    """Job states whose timers cover FIRE, LEASE, TIMEOUT and RETRY, cron and one-time."""
    out: list[JobState] = []
    h = Harness(job_id="cron-job")
    h.create(cron("*/5 * * * *", spread_ms=30 * SECOND, jitter_ms=10 * SECOND))
    out.append(h.job)  # FIRE with spread and jitter
    h.advance_by(6 * MINUTE)
    out.append(h.job)  # a DUE run: LEASE, and the next FIRE
    h.start()
    out.append(h.job)  # RUNNING: LEASE and TIMEOUT
    h.fail()
    out.append(h.job)  # RETRY_WAIT
    one = Harness(job_id="one-time")
    one.create(once(T0 + HOUR))
    out.append(one.job)
    return out


def record(offset: int, state: JobState | None, job_id: str, *, header: bytes | None) -> ConsumerRecord:
    value = None if state is None else mappers.state_to_bytes(state)
    headers = [] if header is None else [(TIMERS_HEADER, header)]
    return ConsumerRecord("sched-changelog", 0, offset, 0, 0, job_id.encode(), value, None, 0, 0, headers)


def test_header_timers_equal_the_timers_derived_from_the_decoded_state() -> None:
    """For every timer situation, the header says exactly what timers_of(decoded state) says."""
    states = states_in_every_timer_situation()
    kinds = {t.kind for s in states for t in core.timers_of(s)}
    assert kinds == set(TimerKind)
    for i, state in enumerate(states):
        with_header = record(i, state, state.job_id, header=pack_timers(core.timers_of(state)))
        without = record(i, state, state.job_id, header=None)
        assert _record_timers(with_header) == _record_timers(without) == core.timers_of(state)


def restored(records: list[ConsumerRecord]) -> tuple[dict[str, bytes], dict[bytes, str]]:
    store = MemoryStore()
    for i in range(0, len(records), 2):  # two records per batch: a job is replaced across batches
        _apply_changelog(store, records[i : i + 2])
    timers = {t.key(): t.team for t in store.timers_between(0, 2**63, 10_000)}
    return dict(store.iter_jobs()), timers


def test_restore_from_headers_builds_the_same_store_as_restore_by_decoding() -> None:
    """Jobs, timer index and teams agree whether restore trusts headers or decodes every state."""
    states = states_in_every_timer_situation()
    history: list[tuple[JobState | None, str]] = [(s, s.job_id) for s in states]
    history.append((None, "one-time"))  # a tombstone removes the job and its timers
    with_headers = [
        record(i, s, job_id, header=None if s is None else pack_timers(core.timers_of(s)))
        for i, (s, job_id) in enumerate(history)
    ]
    by_decoding = [record(i, s, job_id, header=None) for i, (s, job_id) in enumerate(history)]
    jobs, timers = restored(with_headers)
    assert (jobs, timers) == restored(by_decoding)
    assert set(jobs) == {"cron-job"}
    assert timers == {t.key(): t.team for t in core.timers_of(states[3])}


def test_a_wrong_header_rules_version_falls_back_to_decoding() -> None:
    """A header from other timer rules is ignored: the index follows the decoded state."""
    state = states_in_every_timer_situation()[0]
    stale = bytes((TIMER_RULES + 1,)) + pack_timers([])[1:]
    _, timers = restored([record(0, state, state.job_id, header=stale)])
    assert timers == {t.key(): t.team for t in core.timers_of(state)}


class BatchProducer:
    """The two producer calls _BatchWriter makes, over aiokafka's real batch builder."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, int, list[tuple[bytes, list[tuple[str, bytes]]]]]] = []

    def create_batch(self) -> BatchBuilder:
        return BatchBuilder(64 * 1024, 0, is_transactional=True)

    async def send_batch(self, batch: BatchBuilder, topic: str, *, partition: int) -> asyncio.Future[object]:
        records = [(r.key, list(r.headers)) for r in DefaultRecordBatch(bytes(batch._build()))]
        self.sent.append((topic, partition, records))
        done: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        done.set_result(RecordMetadata(topic, partition, None, len(self.sent) * 10, 0, 0, None))
        return done


async def test_batch_writer_hands_the_timer_header_to_the_real_batch_builder() -> None:
    """Records with and without headers go into aiokafka's builder (it accepts only lists)."""
    state = states_in_every_timer_situation()[0]
    producer = BatchProducer()
    writer = _BatchWriter(producer, 3)
    header = _timer_headers(state, core.timers_of(state))
    await writer.append("sched-changelog", b"cron-job", mappers.state_to_bytes(state), header)
    await writer.append("runs", b"cron-job", b"event")
    assert await writer.flush() == {"sched-changelog": 10, "runs": 20}
    assert sorted(producer.sent) == [
        ("runs", 3, [(b"cron-job", [])]),
        ("sched-changelog", 3, [(b"cron-job", [(TIMERS_HEADER, pack_timers(core.timers_of(state)))])]),
    ]
    assert _timer_headers(None, frozenset()) == []
