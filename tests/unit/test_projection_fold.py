"""The pure projection fold: records, answers and statistics from events, in any topic order."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.test_projection_events import (
    T0,
    TOPIC_OF,
    Feeder,
    accepted,
    audit,
    changed,
    chunk,
    dead_letter,
    due,
    failed,
    heartbeat,
    life,
    rejected,
    settled,
    started,
    succeeded,
)
from tickwheel.projections import fold as fold_module
from tickwheel.projections.fold import Changes, Position, fold, run_contribution
from tickwheel.projections.kv import MemoryKV
from tickwheel.projections.readmodel import Batch, ReadModel
from tickwheel.projections.views import (
    Counts,
    JobView,
    KeyClaim,
    RunView,
    audit_detail,
    audit_fingerprint,
)
from tickwheel.schemas.model import (
    JobStatus,
    OneTime,
    RunCancelled,
    RunSkipped,
    RunStatus,
    RunTimedOut,
    RunTrigger,
    SkipReason,
)

HERE = Position("job-events", 0, 0)


class DictView:
    """The smallest ViewReader: records kept in dicts, changes applied by hand."""

    def __init__(self) -> None:
        self.jobs: dict[str, JobView] = {}
        self.runs: dict[str, RunView] = {}
        self.logs: set[tuple[str, int, int]] = set()
        self.stats: dict[str, Counts] = {}
        self.claims: dict[str, KeyClaim] = {}

    def job(self, job_id: str) -> JobView | None:
        return self.jobs.get(job_id)

    def run(self, run_id: str) -> RunView | None:
        return self.runs.get(run_id)

    def has_log(self, run_id: str, attempt: int, seq: int) -> bool:
        return (run_id, attempt, seq) in self.logs

    def claim(self, command_id: str) -> KeyClaim | None:
        return self.claims.get(command_id)

    def apply(self, changes: Changes) -> Changes:
        self.jobs.update({j.job_id: j for j in changes.jobs})
        self.runs.update({r.run_id: r for r in changes.runs})
        self.logs.update((line.run_id, line.attempt, line.seq) for line in changes.logs)
        self.claims.update({c.command_id: c for c in changes.claims})
        for team, delta in changes.stats:
            self.stats[team] = self.stats.get(team, Counts()).plus(delta)
        return changes

    def fold(self, *events: object) -> Changes:
        last = Changes()
        for event in events:
            last = self.apply(fold(self, event, HERE))
        return last


def test_accepted_creates_an_active_job_and_answers_its_command() -> None:
    """JobAccepted (version 1) gives an active job with its spec and an ``accepted`` answer."""
    view = DictView()
    changes = view.fold(accepted(command_id="c-7"))
    job = view.jobs["job-1"]
    assert (job.status, job.version, job.team, job.created_at_ms) == ("active", 1, "payments", T0)
    assert [(a.command_id, a.outcome, a.version) for a in changes.answers] == [("c-7", "accepted", 1)]
    assert view.stats["payments"].values == {"jobs.active": 1}


def test_change_moves_the_team_count_and_answers_with_status() -> None:
    """JobChanged(paused) moves the job from active to paused in its team's counts."""
    view = DictView()
    changes = view.fold(accepted(), changed(status=JobStatus.PAUSED, command_id="c-2"))
    assert view.jobs["job-1"].status == "paused"
    assert view.stats["payments"].values == {"jobs.paused": 1}
    assert [(a.outcome, a.status, a.change) for a in changes.answers] == [("changed", "paused", "paused")]


def test_processor_initiated_change_answers_no_command() -> None:
    """An auto-pause (empty command id) changes the job but records no command answer."""
    view = DictView()
    changes = view.fold(accepted(), changed(change="auto_paused", command_id=""))
    assert changes.answers == ()
    assert view.jobs["job-1"].last_change == "auto_paused"


def test_rejection_is_only_an_answer_with_the_field_at_fault() -> None:
    """JobRejected records the reason and field for the command and touches no job."""
    view = DictView()
    changes = view.fold(rejected(command_id="c-9"))
    assert changes.jobs == ()
    (answer,) = changes.answers
    assert (answer.outcome, answer.reason, answer.field) == (
        "rejected",
        "version_conflict",
        "expected_version",
    )


def test_update_keeps_paused_and_reactivates_completed_with_a_future() -> None:
    """An update keeps a paused job paused; a completed job with a future occurrence is active again."""
    view = DictView()
    view.fold(accepted(), changed(status=JobStatus.PAUSED), accepted(version=2, command_id="c-3"))
    assert (view.jobs["job-1"].status, view.jobs["job-1"].version) == ("paused", 2)
    view.fold(changed(status=JobStatus.COMPLETED, change="completed", command_id=""))
    view.fold(accepted(version=3, command_id="c-4"))
    assert view.jobs["job-1"].status == "active"


def test_update_of_completed_one_time_job_in_the_past_stays_completed() -> None:
    """Reactivation needs a future occurrence: a one-time job whose instant passed stays completed."""
    view = DictView()
    view.fold(accepted(), changed(status=JobStatus.COMPLETED, change="completed", command_id=""))
    past = accepted(version=2, command_id="c-5")
    past = replace(past, spec=replace(past.spec, schedule=OneTime(T0 - 1)))
    view.fold(past)
    assert view.jobs["job-1"].status == "completed"


def test_run_life_derives_status_lag_duration_and_latest_run() -> None:
    """Due, started, succeeded, settled: status follows; lag and duration come from the facts."""
    view = DictView()
    view.fold(accepted(), due(not_before_ms=T0 + 10_000))
    assert view.runs["r-1"].status == "due"
    assert view.jobs["job-1"].latest_run_id == "r-1"
    view.fold(started(at_ms=T0 + 10_250))
    run = view.runs["r-1"]
    assert (run.status, run.attempts[0].lag_ms, run.attempts[0].worker_id) == ("running", 250, "w-1")
    view.fold(heartbeat(at_ms=T0 + 20_000), succeeded(at_ms=T0 + 12_250))
    attempt = view.runs["r-1"].attempts[0]
    assert (attempt.duration_ms, attempt.lease_until_ms) == (2_000, T0 + 50_000)
    view.fold(settled())
    assert view.runs["r-1"].status == "succeeded"
    counts = view.stats["payments"]
    assert (counts.get("runs.succeeded"), counts.get("lag.count"), counts.get("lag.sum_ms")) == (1, 1, 250)
    assert (counts.get("lag.le_250"), counts.get("lag.le_100")) == (1, 0)


def test_stale_worker_reports_are_ignored() -> None:
    """A second worker's start or result for a leased attempt changes nothing."""
    view = DictView()
    view.fold(accepted(), due(), started(worker="w-1"))
    before = view.runs["r-1"]
    assert view.fold(started(worker="w-2")) == Changes()
    assert view.fold(failed(worker="w-2")) == Changes()
    assert view.runs["r-1"] == before


def test_first_result_of_an_attempt_stands() -> None:
    """A repeated result for the same attempt does not overwrite the first."""
    view = DictView()
    view.fold(accepted(), due(), started(), succeeded())
    view.fold(failed())
    assert view.runs["r-1"].attempts[0].outcome == "succeeded"


def test_retry_counts_failures_retries_and_lease_expiry() -> None:
    """A failed attempt, a lease-expired one and the retries that follow feed the failure stats."""
    view = DictView()
    view.fold(accepted(), due(), started(), failed())
    assert view.runs["r-1"].status == "retry_wait"
    view.fold(due(attempt=2, trigger=RunTrigger.RETRY), started(attempt=2))
    view.fold(RunCancelled("r-1", "job-1", 2, "lease_expired", T0 + 50_000))
    assert view.runs["r-1"].status == "retry_wait"
    view.fold(due(attempt=3, trigger=RunTrigger.LEASE_EXPIRED), started(attempt=3))
    view.fold(RunTimedOut("r-1", "job-1", 3, "w-1", T0 + 90_000))
    view.fold(settled(status=RunStatus.TIMED_OUT, attempts=3))
    counts = view.stats["payments"]
    assert counts.get("attempts.dispatched") == 3
    assert counts.get("attempts.retried") == 2
    assert counts.get("attempts.failed") == 2
    assert counts.get("leases.expired") == 1
    assert counts.get("runs.timed_out") == 1
    assert view.runs["r-1"].trigger == "scheduled"


def test_cancelled_attempt_without_settlement_shows_cancelled() -> None:
    """A job cancel's RunCancelled shows the run cancelled even before RunSettled arrives."""
    view = DictView()
    view.fold(accepted(), due(), RunCancelled("r-1", "job-1", 1, "cancelled", T0 + 1))
    assert view.runs["r-1"].status == "cancelled"


def test_skipped_occurrence_is_a_run_with_its_reason() -> None:
    """RunSkipped records a skipped run in the history with the reason, counted per team."""
    view = DictView()
    view.fold(
        accepted(), RunSkipped("r-2", "job-1", "payments", T0 + 5, SkipReason.PAUSED, "job paused", T0 + 6)
    )
    run = view.runs["r-2"]
    assert (run.status, run.skipped_reason, run.scheduled_for_ms) == ("skipped", "paused", T0 + 5)
    assert view.stats["payments"].get("runs.skipped") == 1


def test_outcome_before_dispatch_is_kept_and_counted_once_team_is_known() -> None:
    """A worker report folded before its RunDue is kept; the run counts once its team is known."""
    view = DictView()
    view.fold(started())
    assert view.runs["r-1"].status == "running"
    assert view.runs["r-1"].team == ""
    assert view.stats == {}
    view.fold(due())
    assert view.runs["r-1"].status == "running"
    assert view.stats["payments"].get("runs.running") == 1
    assert view.stats["payments"].get("lag.count") == 1


def test_latest_run_is_the_latest_scheduled_whatever_the_order() -> None:
    """The job's latest run is the one scheduled last, even if an older one is folded after it."""
    view = DictView()
    view.fold(due("r-2", scheduled_for_ms=T0 + 20), due("r-1", scheduled_for_ms=T0 + 10), accepted())
    assert view.jobs["job-1"].latest_run_id == "r-2"


def test_log_chunks_are_deduplicated_and_bounded() -> None:
    """A redelivered chunk is ignored; beyond the per-run bound chunks are dropped and counted."""
    view = DictView()
    view.fold(due(), chunk(seq=0))
    assert view.fold(chunk(seq=0)) == Changes()
    for seq in range(1, fold_module.MAX_LOG_CHUNKS_PER_RUN + 5):
        view.fold(chunk(seq=seq))
    run = view.runs["r-1"]
    assert (run.log_chunks, run.log_dropped) == (fold_module.MAX_LOG_CHUNKS_PER_RUN, 5)


def test_log_bytes_bound_drops_a_chunk_that_would_overflow() -> None:
    """A chunk that would take a run past its byte bound is dropped, not truncated silently."""
    view = DictView()
    big = "x" * (fold_module.MAX_LOG_BYTES_PER_RUN - 10)
    view.fold(chunk(seq=0, data=big))
    changes = view.fold(chunk(seq=1, data="y" * 11))
    assert changes.logs == ()
    assert view.runs["r-1"].log_dropped == 1


def test_dead_letter_counts_for_the_job_team() -> None:
    """A dead letter keyed by a job id counts toward that job's team; its key is its dlq position."""
    view = DictView()
    view.fold(accepted())
    changes = fold(view, dead_letter(), Position("dlq", 3, 42))
    view.apply(changes)
    (letter,) = changes.dead_letters
    assert (letter.partition, letter.offset, letter.job_id) == (3, 42, "job-1")
    assert view.stats["payments"].get("dead_letters") == 1


def test_dead_letter_without_a_key_belongs_to_no_team() -> None:
    """A malformed-input dead letter with no key is recorded but counted for no team."""
    view = DictView()
    letter = replace(dead_letter(), key=None)
    changes = view.fold(letter)
    assert len(changes.dead_letters) == 1
    assert changes.stats == ()


def test_contribution_of_a_run_without_team_is_empty() -> None:
    """Runs whose team is not yet known contribute nothing to any team."""
    assert run_contribution(RunView("r", "j")) == {}
    assert run_contribution(None) == {}


def test_unprojected_events_change_nothing() -> None:
    """Commands and other foreign events fold to no changes."""
    assert fold(DictView(), object(), HERE) == Changes()


# ---------------------------------------------------------------------------
# Topic interleaving: live and rebuilt projections read the same partitions in other orders


def _by_topic(events: list[object]) -> dict[str, list[object]]:
    topics: dict[str, list[object]] = {}
    for event in events:
        topics.setdefault(TOPIC_OF[type(event)], []).append(event)
    return topics


def _two_jobs() -> list[object]:
    events: list[object] = [*life("job-1", "payments", "r-1"), *life("job-2", "search", "r-2")]
    events += [
        changed("job-1", JobStatus.PAUSED),
        failed("r-2", "job-2", attempt=2),
        due("r-3", "job-1"),
        started("r-3", "job-1"),
        dead_letter("job-2"),
        chunk("r-3", "job-1", seq=0),
        due("r-2", "job-2", attempt=2, team="search", trigger=RunTrigger.RETRY),
        rejected("job-1", "c-77"),
        settled("r-3", "job-1", status=RunStatus.FAILED),
        audit("c-job-1", "job-1", at_ms=T0 + 5),
        audit("c-job-1", "job-1", at_ms=T0 + 9),  # a retry
        audit("c-job-2", "job-2", fingerprint="", at_ms=T0 + 1),
        audit("c-job-2", "job-x", fingerprint="b" * 64, at_ms=T0 + 7),  # a reuse, another job
    ]
    return events


def _interleave(topics: dict[str, list[object]], choices: list[int]) -> list[object]:
    queues = {t: list(es) for t, es in topics.items()}
    merged: list[object] = []
    for choice in choices:
        live = sorted(t for t, q in queues.items() if q)
        if not live:
            break
        merged.append(queues[live[choice % len(live)]].pop(0))
    for topic in sorted(queues):
        merged.extend(queues[topic])
    return merged


def _folded(events: list[object], batch_every: int) -> list[tuple[bytes, bytes]]:
    kv = MemoryKV()
    feeder = Feeder(kv)
    for start in range(0, len(events), batch_every):
        feeder.feed(*events[start : start + batch_every])
    # Offsets differ by arrival order only in numbering per topic, which the feeder fixes.
    return [(k, v) for k, v in kv.items() if not k.startswith(b"O")]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 10), min_size=0, max_size=60), st.integers(1, 7))
def test_any_topic_interleaving_folds_to_the_same_read_model(choices: list[int], batch_every: int) -> None:
    """Per-topic order kept, any interleaving of topics and any batching give identical bytes."""
    topics = _by_topic(_two_jobs())
    reference = _folded(_interleave(topics, []), len(_two_jobs()))
    assert _folded(_interleave(topics, choices), batch_every) == reference


def test_fold_through_batch_matches_dict_view() -> None:
    """The store-backed batch and the plain dict view fold the same life to the same records."""
    events = life()
    view = DictView()
    view.fold(*events)
    kv = MemoryKV()
    batch = Batch(kv)
    for event in events:
        batch.fold_event(event, HERE)
    batch.commit()
    model = ReadModel(kv)
    assert model.job("job-1") == view.jobs["job-1"]
    assert model.run("r-1") == view.runs["r-1"]
    assert model.stats("payments") == view.stats["payments"]


# ---------------------------------------------------------------------------
# Idempotency-key claims from audit records


def test_audit_record_claims_its_key_with_the_request_fingerprint() -> None:
    """An audit record folds to a key claim: command id, principal, action, job and fingerprint."""
    view = DictView()
    changes = view.fold(audit("c-5", "job-a", action="pause", fingerprint="f" * 64, at_ms=T0 + 3))
    assert changes.claims == (KeyClaim("c-5", "alice", "pause", "job-a", T0 + 3, "f" * 64),)
    assert changes.jobs == ()
    assert changes.stats == ()


def test_retry_keeps_the_first_claim_and_changes_nothing() -> None:
    """A later audit record of the same request (a retry) leaves the first claim as it was."""
    view = DictView()
    view.fold(audit("c-5", at_ms=T0))
    assert view.fold(audit("c-5", at_ms=T0 + 50)) == Changes()
    assert view.claims["c-5"].at_ms == T0


def test_the_earliest_claim_wins_in_any_order() -> None:
    """Claims of one command id, folded in every order, leave the same one: known fingerprints
    first, then the earliest."""
    claims = [
        audit("c-5", "job-a", fingerprint="a" * 64, at_ms=T0 + 20),
        audit("c-5", "job-b", fingerprint="b" * 64, at_ms=T0 + 10),
        audit("c-5", "job-c", fingerprint="", at_ms=T0),
        audit("c-5", "job-b", fingerprint="b" * 64, at_ms=T0 + 30),
    ]
    found = set()
    for order in itertools.permutations(claims):
        view = DictView()
        view.fold(*order)
        found.add(view.claims["c-5"])
    assert found == {KeyClaim("c-5", "alice", "create", "job-b", T0 + 10, "b" * 64)}


def test_audit_record_without_command_id_claims_nothing() -> None:
    """An audit record naming no command (none is written so, but input is input) is skipped."""
    assert DictView().fold(audit("")) == Changes()


@pytest.mark.parametrize(
    ("text", "fingerprint"),
    [("nightly", "0" * 64), ("", "1" * 64), ("a name with request-sha256= inside", "2" * 64)],
)
def test_audit_detail_carries_the_fingerprint_after_the_text(text: str, fingerprint: str) -> None:
    """The fingerprint is the detail's last word and reads back whatever the text was."""
    detail = audit_detail(text, fingerprint)
    assert detail.startswith(text)
    assert audit_fingerprint(detail) == fingerprint


@pytest.mark.parametrize("detail", ["", "nightly", "expected_version=3", "request-sha256=short"])
def test_detail_without_a_fingerprint_reads_as_unknown(detail: str) -> None:
    """Details written before fingerprints were recorded (or malformed ones) carry none."""
    assert audit_fingerprint(detail) == ""
