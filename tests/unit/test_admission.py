"""Fair admission: tenants interleaved, catch-up budgeted, nothing dropped or doubled."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tickwheel.streams.admission import admit
from tickwheel.streams.timers import Timer, TimerKind

F = TimerKind.FIRE
NOW = 1_000_000
TOLERANCE = 60_000


def fires(team: str, n: int, due_ms: int = NOW) -> list[tuple[Timer, str]]:
    """``n`` FIRE candidates of ``team`` all due at ``due_ms``."""
    return [(Timer(due_ms, f"{team}-{i:06d}", F), team) for i in range(n)]


def run(
    candidates: list[tuple[Timer, str]], limit: int = 100, budget: int = 20
) -> tuple[list[Timer], list[Timer]]:
    """admit() with this module's clock and tolerance."""
    return admit(candidates, now_ms=NOW, limit=limit, catchup_budget=budget, misfire_tolerance_ms=TOLERANCE)


def teams_of(timers: list[Timer]) -> Counter[str]:
    """How many timers of each team (job ids are ``team-n``)."""
    return Counter(t.job_id.split("-")[0] for t in timers)


def test_small_team_is_not_stuck_behind_a_big_one() -> None:
    """10,000 due for one team and 10 for another: all 10 go in the first step of 100."""
    admitted, deferred = run(fires("big", 10_000) + fires("small", 10))
    assert teams_of(admitted) == {"big": 90, "small": 10}
    assert len(deferred) == 9_910


def test_small_team_wins_even_when_the_burst_is_a_moment_earlier() -> None:
    """Already-due work is one tier, so a burst one millisecond earlier does not jump ahead."""
    admitted, _ = run(fires("big", 10_000, due_ms=NOW - 1) + fires("small", 10, due_ms=NOW))
    assert teams_of(admitted)["small"] == 10


def test_round_robin_equal_shares() -> None:
    """Teams that all want more than their share get equal shares."""
    admitted, _ = run(fires("a", 500) + fires("b", 500) + fires("c", 500), limit=90)
    assert teams_of(admitted) == {"a": 30, "b": 30, "c": 30}


def test_last_partial_round_goes_to_the_smaller_team() -> None:
    """With one seat left, the team with fewer contested timers gets it, step after step."""
    admitted, _ = run(fires("big", 5) + fires("small", 2), limit=1)
    assert teams_of(admitted) == {"small": 1}


def test_within_a_team_earliest_first() -> None:
    """A team's admitted timers are its first ones in due order."""
    admitted, _ = run(fires("a", 50) + fires("b", 50), limit=10)
    assert [t.job_id for t in admitted if t.job_id.startswith("a")] == [f"a-{i:06d}" for i in range(5)]


def test_earliest_future_instant_first() -> None:
    """Among work not yet due (look-ahead), earlier instants fill before later ones."""
    later = fires("a", 50, due_ms=NOW + 2_000)
    sooner = fires("b", 50, due_ms=NOW + 1_000)
    due_now = fires("c", 30, due_ms=NOW - 5)
    admitted, _ = run(due_now + sooner + later, limit=100)
    assert teams_of(admitted) == {"c": 30, "b": 50, "a": 20}


def test_catchup_budget_caps_overdue_work() -> None:
    """Catch-up takes at most its budget even when seats are free."""
    admitted, deferred = run(fires("old", 500, due_ms=NOW - TOLERANCE - 1) + fires("now", 5), budget=20)
    assert teams_of(admitted) == {"old": 20, "now": 5}
    assert len(deferred) == 480


def test_catchup_cannot_starve_on_time_work() -> None:
    """With both saturated, on-time work keeps limit - budget seats and catch-up its budget."""
    admitted, _ = run(fires("old", 500, due_ms=0) + fires("now", 500), limit=100, budget=20)
    assert teams_of(admitted) == {"old": 20, "now": 80}


def test_catchup_is_shared_fairly_too() -> None:
    """The catch-up budget is split across teams by the same round-robin."""
    old = NOW - 10 * TOLERANCE
    admitted, _ = run(fires("x", 1_000, due_ms=old) + fires("y", 3, due_ms=old + 1), budget=10)
    assert teams_of(admitted) == {"x": 7, "y": 3}


def test_tolerance_boundary() -> None:
    """Exactly ``tolerance`` late is on time; one millisecond more is catch-up."""
    edge = [(Timer(NOW - TOLERANCE, "on-0", F), "on"), (Timer(NOW - TOLERANCE - 1, "late-0", F), "late")]
    admitted, _ = run(edge, budget=0)
    assert admitted == [Timer(NOW - TOLERANCE, "on-0", F)]


def test_non_fire_timers_are_on_time_however_late() -> None:
    """Retry, lease and timeout timers are never catch-up, so the budget does not hold them."""
    old = [
        (Timer(0, f"r-{k.value}", k, "run"), "r")
        for k in (TimerKind.RETRY, TimerKind.LEASE, TimerKind.TIMEOUT)
    ]
    admitted, deferred = run(old, budget=0)
    assert len(admitted) == 3
    assert deferred == []


def test_outputs_keep_candidate_order_and_duplicates() -> None:
    """Both lists are in candidate order; a duplicated candidate is kept twice."""
    cands = fires("a", 3) + fires("b", 3)
    cands = [*cands, cands[0]]
    admitted, deferred = run(cands, limit=4)
    assert Counter(admitted) + Counter(deferred) == Counter(t for t, _ in cands)
    position = {t: i for i, (t, _) in reversed(list(enumerate(cands)))}
    assert [position[t] for t in admitted] == sorted(position[t] for t in admitted)


def test_zero_limit_admits_nothing() -> None:
    """A step with no seats defers everything."""
    assert run(fires("a", 3), limit=0) == ([], [t for t, _ in fires("a", 3)])


@pytest.mark.parametrize("field", ["limit", "catchup_budget", "misfire_tolerance_ms"])
def test_negative_arguments_rejected(field: str) -> None:
    """Negative limits, budgets or tolerances are errors, not silent zeros."""
    args = {"limit": 1, "catchup_budget": 1, "misfire_tolerance_ms": 1, field: -1}
    with pytest.raises(ValueError, match=field):
        admit([], now_ms=NOW, **args)


# ---------------------------------------------------------------------------
# Properties

candidate_lists = st.lists(
    st.tuples(
        st.integers(NOW - 400, NOW + 100),
        st.sampled_from(["t1", "t2", "t3", "t4"]),
        st.sampled_from(list(TimerKind)),
        st.integers(0, 30),
    ),
    max_size=60,
).map(
    lambda rows: [
        (Timer(due, f"{team}-{n}", kind, "" if kind is F else "run"), team)
        for due, team, kind, n in sorted(rows)
    ]
)


@settings(max_examples=200, deadline=None)
@given(
    cands=candidate_lists,
    limit=st.integers(0, 40),
    budget=st.integers(0, 40),
    tolerance=st.integers(0, 300),
)
def test_admission_properties(
    cands: list[tuple[Timer, str]], limit: int, budget: int, tolerance: int
) -> None:
    """Partition, bounds, work conservation, per-pool fairness and determinism."""
    admitted, deferred = admit(
        cands, now_ms=NOW, limit=limit, catchup_budget=budget, misfire_tolerance_ms=tolerance
    )
    assert Counter(admitted) + Counter(deferred) == Counter(t for t, _ in cands)
    assert (admitted, deferred) == admit(
        list(cands), now_ms=NOW, limit=limit, catchup_budget=budget, misfire_tolerance_ms=tolerance
    )

    def is_late(t: Timer) -> bool:
        return t.kind is F and NOW - t.due_ms > tolerance

    late = [c for c in cands if is_late(c[0])]
    now_tier = [c for c in cands if not is_late(c[0]) and c[0].due_ms <= NOW]
    n_late = sum(1 for t in admitted if is_late(t))
    assert len(admitted) <= limit
    assert n_late == min(len(late), budget, limit)
    assert len(admitted) - n_late == min(len(cands) - len(late), limit - n_late)
    _assert_fair(late, admitted)
    _assert_fair(now_tier, admitted)


def _assert_fair(pool: list[tuple[Timer, str]], admitted: list[Timer]) -> None:
    """Within a pool: each team's admitted timers are a prefix of its own, and a team still
    waiting got at least as many as any other team minus one."""
    left = Counter(admitted)
    got: Counter[str] = Counter()
    waiting: set[str] = set()
    for timer, team in pool:
        if left[timer] > 0:
            assert team not in waiting, f"{timer} admitted after an earlier one of {team} waits"
            left[timer] -= 1
            got[team] += 1
        else:
            waiting.add(team)
    for team in waiting:
        assert got[team] >= max(got.values(), default=0) - 1
