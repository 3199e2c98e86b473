"""Recorded and constructed logs (``tests/fixtures/replay``) replayed: verdicts, invariants, state.

``clean_live`` was recorded from the real processor, ``bad_live`` is it with three edits
listed in its header, ``dst_constructed`` was written by driving the pure core through the
2026 New York DST changes (see ``tests/fixtures/replay/scenarios.py``).
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import pytest

from tickwheel.replay import Invariant, Replayer, ReplayResult, Source, Verdict, read_archive
from tickwheel.replay.archive import ExportHeader
from tickwheel.replay.history import matches, state_at
from tickwheel.replay.times import parse_time
from tickwheel.schemas.model import JobChanged, JobState, RunDue

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "replay"


@cache
def _load(name: str) -> tuple[ExportHeader, ReplayResult]:
    header, records = read_archive(FIXTURES / f"{name}.jsonl")
    source = Source(grace_ms=2_000, end_ms=header.complete_until_ms)
    return header, Replayer(source).replay(records)


def _verify(name: str) -> tuple[ExportHeader, tuple[Invariant, ...], list[tuple[str, ...]]]:
    header, result = _load(name)
    assert header.from_ms is not None
    assert header.to_ms is not None
    report = result.verify(header.from_ms - 3_600_000, header.to_ms)
    return (header, tuple(v.invariant for v in report.violations),
            [tuple(str(cite) for cite in v.events) for v in report.violations])


@pytest.mark.parametrize("name", ["clean_live", "dst_constructed"])
def test_clean_fixtures_verify_clean(name: str) -> None:
    """A log the processor (or its core) wrote keeps every invariant."""
    _, invariants, _ = _verify(name)
    assert invariants == ()


def test_the_bad_fixture_is_flagged_with_the_exact_edited_events() -> None:
    """Duplicate RunDue, lost occurrence, start after cancel: each found, citing the edited record."""
    header, invariants, events = _verify("bad_live")
    assert sorted(invariants) == sorted([Invariant.DUPLICATE_RUN_DUE, Invariant.LOST_OCCURRENCE,
                                         Invariant.STARTED_AFTER_CANCEL])
    edits = header.extra["edits"]
    duplicate = re.search(r"duplicate: (\S+) repeats the RunDue at offset (\d+)", edits[0])
    late = re.search(r"late start: (\S+) RunStarted .* at offset (\d+)", edits[2])
    assert duplicate is not None
    assert late is not None
    by_kind = dict(zip(invariants, events, strict=True))
    copy = duplicate.group(1)
    assert by_kind[Invariant.DUPLICATE_RUN_DUE] == (copy.replace(copy.split("@")[1],
                                                                duplicate.group(2)), copy)
    assert by_kind[Invariant.STARTED_AFTER_CANCEL][0] == late.group(1)
    assert by_kind[Invariant.STARTED_AFTER_CANCEL][1].endswith(f"job-events[0]@{late.group(2)}")
    lost = re.search(r"lost: occurrence (\d+) of pausy", edits[1])
    assert lost is not None
    report = _load("bad_live")[1].verify(header.from_ms or 0, header.to_ms or 0)
    (violation,) = [v for v in report.violations if v.invariant is Invariant.LOST_OCCURRENCE]
    assert (violation.job_id, str(violation.events[0])) == ("pausy", _accept_cite("bad_live", "pausy"))
    assert f"(run {_run_id('pausy', int(lost.group(1)))})" in violation.message


def test_why_on_the_recorded_log_tells_each_story() -> None:
    """Paused skip, overlap skip, retried run, cancelled run, manual run: as recorded."""
    _, result = _load("clean_live")
    resumed = _changed(result, "pausy", "resumed")
    assert _verdict(result, "pausy", resumed) == (Verdict.SKIPPED, "paused")
    first = _dues(result, "overlappy")[0].scheduled_for_ms
    assert _verdict(result, "overlappy", first + 2_000) == (Verdict.SKIPPED, "overlap")
    retry = result.why("retry", _dues(result, "retry")[0].scheduled_for_ms)
    assert (retry.verdict, [(a.attempt, a.outcome) for a in retry.attempts]) == (
        Verdict.FIRED, [(1, "failed"), (2, "succeeded")])
    assert _verdict(result, "doomed", _dues(result, "doomed")[0].scheduled_for_ms) == (
        Verdict.CANCELLED, "cancelled")
    (manual,) = _dues(result, "manual")
    assert result.why("manual", manual.emitted_at_ms).run_id == manual.run_id


def test_why_explains_the_dst_shifted_fire() -> None:
    """02:30 New York does not exist on 2026-03-08: gap=shift fired at 03:00 EDT, and says so."""
    _, result = _load("dst_constructed")
    answer = result.why("nightly-ny", parse_time("2026-03-08T07:10:00Z"))
    assert (answer.verdict, answer.reason) == (Verdict.FIRED, "succeeded")
    assert answer.scheduled_for_ms == parse_time("2026-03-08T07:00:00Z")
    assert answer.local_time == "2026-03-08T03:00:00-04:00"
    dst = [link.text for link in answer.chain if link.text.startswith("DST rule")]
    assert dst == ["DST rule: the scheduled local time does not exist on 2026-03-08 in "
                   "America/New_York (spring-forward gap); gap=shift fires at the first instant "
                   "after the gap, 2026-03-08T03:00:00-04:00"]
    assert any("flags dst_gap_shifted" in link.text for link in answer.chain)


def test_why_explains_the_dst_gap_skip_and_the_fold() -> None:
    """gap=skip reports the missing night as skipped (dst_gap); fold=first fires the first 01:30."""
    _, result = _load("dst_constructed")
    skipped = result.why("skipper-ny", parse_time("2026-03-08T07:00:00Z"))
    assert (skipped.verdict, skipped.reason) == (Verdict.SKIPPED, "dst_gap")
    second_pass = parse_time("2026-11-01T06:30:00Z")  # 01:30 EST, the repeated hour
    fold = result.why("fold-ny", second_pass)
    assert (fold.verdict, fold.scheduled_for_ms) == (Verdict.FIRED, parse_time("2026-11-01T05:30:00Z"))
    assert fold.local_time == "2026-11-01T01:30:00-04:00"
    assert any("first pass" in link.text for link in fold.chain)


def test_the_constructed_log_equals_its_changelog_at_every_record() -> None:
    """Core-written: at every sched-changelog record, the fold up to its timestamp equals it."""
    _, result = _load("dst_constructed")
    compared = 0
    for history in result.histories.values():
        for record in history.changelog:
            stored = record.event if isinstance(record.event, JobState) else None
            assert state_at(history, record.cite.timestamp) == stored, record.cite
            compared += 1
    assert compared > 20


def test_the_recorded_log_matches_its_changelog_at_every_record() -> None:
    """Recorded live: every changelog record equals the fold at some cut since the job's
    previous record (a worker report can reach the processor one step after it was written)."""
    _, result = _load("clean_live")
    compared = 0
    for history in result.histories.values():
        for record in history.changelog:
            assert matches(history, record)[0], record.cite
            compared += 1
    assert compared > 40


def test_state_report_cross_checks_the_changelog() -> None:
    """state --at T: every job's fold, the changelog record it was checked against, agreement."""
    header, result = _load("clean_live")
    report = result.state_at(header.to_ms or 0)
    assert {j.job_id for j in report.jobs} == {"pausy", "overlappy", "retry", "doomed", "manual"}
    assert all(j.agrees for j in report.jobs)
    before = result.state_at((header.from_ms or 0) - 1, "pausy")
    assert before.jobs[0].state is None
    assert before.jobs[0].agrees is None


def _verdict(result: ReplayResult, job: str, at_ms: int) -> tuple[Verdict, str]:
    answer = result.why(job, at_ms)
    return answer.verdict, answer.reason


def _changed(result: ReplayResult, job: str, change: str) -> int:
    return next(e.event.at_ms for e in result.history(job).answers
                if isinstance(e.event, JobChanged) and e.event.change == change)


def _dues(result: ReplayResult, job: str) -> list[RunDue]:
    return [e.event for e in result.history(job).runs if isinstance(e.event, RunDue)]


def _accept_cite(name: str, job: str) -> str:
    return str(_load(name)[1].history(job).answers[0].cite)


def _run_id(job: str, scheduled_for: int) -> str:
    from tickwheel.schemas.model import run_id_for

    return run_id_for(job, scheduled_for)
