"""Read-model queries: paging with cursors, filters, bounded scans, positions."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.test_projection_events import (
    T0,
    Feeder,
    accepted,
    audit,
    changed,
    chunk,
    dead_letter,
    due,
    life,
    settled,
)
from tickwheel.projections.fold import Position
from tickwheel.projections.kv import MemoryKV
from tickwheel.projections.readmodel import (
    CursorError,
    JobFilter,
    Projector,
    RawRecord,
    ReadModel,
    encode_cursor,
)
from tickwheel.schemas.model import JobStatus, RunStatus


def model_with(*events: object, max_scan: int = 5_000) -> ReadModel:
    kv = MemoryKV()
    Feeder(kv).feed(*events)
    return ReadModel(kv, max_scan=max_scan)


def many_jobs(count: int) -> list[object]:
    teams = ("payments", "search", "ads")
    return [
        accepted(
            f"job-{i:03d}",
            team=teams[i % 3],
            name=f"{'nightly' if i % 2 else 'hourly'}-{i}",
            pool="gpu" if i % 5 == 0 else "default",
            command_id=f"c-{i}",
        )
        for i in range(count)
    ]


def all_pages(model: ReadModel, where: JobFilter, limit: int) -> list[str]:
    seen: list[str] = []
    cursor: str | None = None
    for _ in range(1_000):
        page = model.jobs(where, cursor, limit)
        seen.extend(j.job_id for j in page.items)
        if page.next_cursor is None:
            return seen
        cursor = page.next_cursor
    raise AssertionError("paging did not end")


@settings(max_examples=50, deadline=None)
@given(st.integers(1, 40), st.sampled_from([None, "payments", "search"]))
def test_paging_visits_every_job_once(limit: int, team: str | None) -> None:
    """Following next_cursor lists every matching job exactly once, in id order."""
    model = model_with(*many_jobs(60))
    seen = all_pages(model, JobFilter(team=team), limit)
    expected = sorted(
        f"job-{i:03d}" for i in range(60) if team is None or ("payments", "search", "ads")[i % 3] == team
    )
    assert seen == expected


def test_filters_combine() -> None:
    """team, status, pool and name prefix filters all apply together."""
    model = model_with(*many_jobs(30), changed("job-005", JobStatus.PAUSED))
    found = model.jobs(JobFilter(team="search", pool="gpu"), None, 100).items
    assert [j.job_id for j in found] == ["job-010", "job-025"]
    paused = model.jobs(JobFilter(status="paused"), None, 100).items
    assert [j.job_id for j in paused] == ["job-005"]
    named = model.jobs(JobFilter(team="payments", name_prefix="hourly"), None, 100).items
    assert all(j.spec is not None and j.spec.name.startswith("hourly") for j in named)
    assert named


def test_bounded_scan_returns_short_page_with_cursor() -> None:
    """A rare filter examines at most max_scan rows per page and hands back a cursor to continue."""
    model = model_with(*many_jobs(50), max_scan=10)
    page = model.jobs(JobFilter(name_prefix="nightly-49"), None, 5)
    assert page.items == ()
    assert page.next_cursor is not None
    assert all_pages(model, JobFilter(name_prefix="nightly-49"), 5) == ["job-049"]


@pytest.mark.parametrize("cursor", ["", "v1.", "v2.abc", "v1.!!!!", "v1." + "A" * 3000, "v1.SGVsbG8"])
def test_bad_cursor_is_rejected(cursor: str) -> None:
    """A cursor that is malformed or outside the query's range raises CursorError."""
    model = model_with(*many_jobs(3))
    with pytest.raises(CursorError):
        model.jobs(JobFilter(), cursor, 10)


def test_cursor_of_another_query_is_rejected() -> None:
    """A cursor from one team's listing cannot be replayed against another's."""
    model = model_with(*many_jobs(10))
    cursor = model.jobs(JobFilter(team="payments"), None, 1).next_cursor
    assert cursor is not None
    with pytest.raises(CursorError):
        model.jobs(JobFilter(team="search"), cursor, 1)
    with pytest.raises(CursorError):
        model.runs("job-001", encode_cursor(b"J" + b"job-001"), 1)


def test_job_known_only_from_runs_is_not_shown() -> None:
    """A job whose JobAccepted has not been folded yet is not visible as a job."""
    model = model_with(due("r-9", "job-9"))
    assert model.job("job-9") is None
    assert model.run("r-9") is not None


def test_runs_newest_first_with_status_and_time_range() -> None:
    """Run history lists newest scheduled first; status and [from, to) filters narrow it."""
    events: list[object] = [accepted()]
    for i in range(5):
        events += [due(f"r-{i}", scheduled_for_ms=T0 + i * 1000)]
    events += [settled("r-1", status=RunStatus.FAILED, scheduled_for_ms=T0 + 1000)]
    model = model_with(*events)
    assert [r.run_id for r in model.runs("job-1", None, 10).items] == ["r-4", "r-3", "r-2", "r-1", "r-0"]
    assert [r.run_id for r in model.runs("job-1", None, 10, status="failed").items] == ["r-1"]
    ranged = model.runs("job-1", None, 10, from_ms=T0 + 1000, to_ms=T0 + 3000)
    assert [r.run_id for r in ranged.items] == ["r-2", "r-1"]
    first = model.runs("job-1", None, 2)
    rest = model.runs("job-1", first.next_cursor, 10)
    assert [r.run_id for r in first.items + rest.items] == ["r-4", "r-3", "r-2", "r-1", "r-0"]


def test_logs_page_by_attempt_and_sequence() -> None:
    """Logs come in (attempt, seq) order, filterable by attempt, paged by cursor."""
    events: list[object] = [due()] + [chunk(seq=s, data=f"{s}\n") for s in range(5)]
    events += [chunk(attempt=2, seq=0, data="second\n")]
    model = model_with(*events)
    first = model.logs("r-1", None, 3)
    rest = model.logs("r-1", first.next_cursor, 10)
    assert [line.data for line in first.items + rest.items] == ["0\n", "1\n", "2\n", "3\n", "4\n", "second\n"]
    assert [line.data for line in model.logs("r-1", None, 10, attempt=2).items] == ["second\n"]


def test_dead_letters_are_filtered_by_team() -> None:
    """A team sees only dead letters of its own jobs; an admin (no team) sees them all."""
    model = model_with(
        *life("job-1", "payments"),
        *life("job-2", "search", "r-2"),
        dead_letter("job-1"),
        dead_letter("job-2"),
        dead_letter("unknown"),
    )
    assert [d.job_id for d in model.dead_letters("payments", None, 10).items] == ["job-1"]
    assert len(model.dead_letters(None, None, 10).items) == 3


def test_answers_and_stats() -> None:
    """Command answers are found by id (one multi-get), counts by team."""
    model = model_with(*life("job-1", "payments"), *life("job-2", "search", "r-2"))
    assert set(model.answers(["c-job-1", "c-job-2", "c-nope"])) == {"c-job-1", "c-job-2"}
    assert model.live_jobs("payments") == 1
    assert set(model.all_stats()) == {"payments", "search"}


def test_positions_move_with_the_folded_records_and_skip_undecodable() -> None:
    """Each applied batch stores the next offset per partition; undecodable records are skipped."""
    kv = MemoryKV()
    projector = Projector(kv)
    projector.apply(
        [RawRecord(Position("runs", 2, 7), b"garbage"), RawRecord(Position("logs", 0, 3), None)],
        {("runs", 2): 9},
    )
    assert ReadModel(kv).positions() == {("runs", 2): 9, ("logs", 0): 4}
    assert projector.undecodable == 2


def test_key_claim_is_folded_from_the_audit_topic() -> None:
    """The projector decodes audit records from their topic into claims found by command id."""
    kv = MemoryKV()
    feeder = Feeder(kv)
    feeder.feed(audit("c-7", "job-7", fingerprint="e" * 64), audit("c-7", "job-8", at_ms=T0 + 1))
    model = ReadModel(kv)
    claim = model.claim("c-7")
    assert claim is not None
    assert (claim.job_id, claim.fingerprint) == ("job-7", "e" * 64)
    assert model.claim("c-nope") is None
    assert model.positions() == {("audit", 0): 2}
