"""Fair admission: which due timers one processor step dispatches, and which wait.

Pure: time is an argument, the answer depends only on the inputs, and nothing is dropped:
every candidate is either admitted now or deferred to a later step.
"""

from __future__ import annotations

from collections.abc import Sequence

from tickwheel.streams.timers import Timer, TimerKind


def admit(
    candidates: Sequence[tuple[Timer, str]],
    *,
    now_ms: int,
    limit: int,
    catchup_budget: int,
    misfire_tolerance_ms: int,
) -> tuple[list[Timer], list[Timer]]:
    """Split ``(timer, team)`` candidates, in due order, into ``(admitted, deferred)``.

    The rule, in order:

    1. A FIRE timer is *catch-up* when ``now_ms - due_ms > misfire_tolerance_ms``. Every other
       candidate is *on-time* work of its team: FIRE timers within tolerance or not yet due
       (look-ahead), and RETRY, LEASE and TIMEOUT timers however late.
    2. Catch-up takes at most ``min(catchup_budget, limit)`` seats, chosen from all catch-up
       candidates by the fair share below. The budget is both a cap and a reservation: on-time
       work always gets ``limit - catchup_budget`` seats, and catch-up never starves either.
    3. On-time work takes the remaining seats, tier by tier: first the tier *now* (everything
       with ``due_ms <= now_ms``), then one tier per future due instant, earliest first. Whole
       tiers are admitted while they fit; the first tier that does not fit is the contested
       set and gets the seats left by the fair share; later tiers wait. Already-due work is
       one tier because it is equally late: ranking it by millisecond would let one team's
       burst a moment earlier delay another team's ten.
    4. Fair share of a contested set: round-robin across teams, each team's timers in
       candidate order. Round ``r`` admits the ``r``-th timer of every team that has one;
       in the last, partial round the teams with the fewest contested timers go first (ties:
       the team whose first timer comes first). This is max-min fair: a team asking for less
       than an equal share gets all of it, the rest split the remainder evenly.

    Both lists keep candidate order. Duplicated candidates are kept as separate entries.
    """
    _check(limit=limit, catchup_budget=catchup_budget, misfire_tolerance_ms=misfire_tolerance_ms)
    catchup: list[int] = []
    on_time: list[int] = []
    for i, (timer, _) in enumerate(candidates):
        late = timer.kind is TimerKind.FIRE and now_ms - timer.due_ms > misfire_tolerance_ms
        (catchup if late else on_time).append(i)
    chosen = set(_fair_share(catchup, candidates, min(catchup_budget, limit)))
    chosen.update(_admit_on_time(on_time, candidates, now_ms, limit - len(chosen)))
    admitted = [c[0] for i, c in enumerate(candidates) if i in chosen]
    deferred = [c[0] for i, c in enumerate(candidates) if i not in chosen]
    return admitted, deferred


def _check(**values: int) -> None:
    for name, value in values.items():
        if value < 0:
            raise ValueError(f"{name} must be >= 0, got {value}")


def _admit_on_time(
    indices: list[int], candidates: Sequence[tuple[Timer, str]], now_ms: int, seats: int
) -> list[int]:
    """Whole tiers while they fit, then the fair share of the first tier that does not."""
    chosen: list[int] = []
    for tier in _tiers(indices, candidates, now_ms):
        left = seats - len(chosen)
        if len(tier) > left:
            chosen.extend(_fair_share(tier, candidates, left))
            break
        chosen.extend(tier)
    return chosen


def _tiers(indices: list[int], candidates: Sequence[tuple[Timer, str]], now_ms: int) -> list[list[int]]:
    """The tier 'now' (all already due), then one tier per future due instant, in time order."""
    by_instant: dict[int, list[int]] = {}
    for i in indices:
        instant = max(candidates[i][0].due_ms, now_ms)  # everything already due is 'now'
        by_instant.setdefault(instant, []).append(i)
    return [by_instant[instant] for instant in sorted(by_instant)]


def _fair_share(indices: list[int], candidates: Sequence[tuple[Timer, str]], seats: int) -> list[int]:
    """Round-robin ``seats`` of ``indices`` across teams (rule 4 of :func:`admit`)."""
    if len(indices) <= seats:
        return indices
    queues: dict[str, list[int]] = {}
    for i in indices:
        queues.setdefault(candidates[i][1], []).append(i)
    # Fewest first: in each round the teams that run out first are a prefix of this order.
    teams = sorted(queues.values(), key=lambda queue: (len(queue), queue[0]))
    chosen: list[int] = []
    first = 0  # teams[first:] still have a timer in the current round
    round_ = 0
    while len(chosen) < seats:
        while len(teams[first]) <= round_:
            first += 1
        chosen.extend(queue[round_] for queue in teams[first : first + seats - len(chosen)])
        round_ += 1
    return chosen
