"""Schedule properties, checked with hypothesis against brute force and against cronsim.

The oracle walks real instants every 30 s through a window around a DST transition, asks
zoneinfo for each instant's wall time and fold, asks a fresh cronsim iterator whether that
wall time matches, and applies the architecture's rules. It shares no code with the
segment walk in ``schedule.py`` beyond the zone data.
"""

from __future__ import annotations

import itertools
import zoneinfo
from datetime import UTC, datetime, timedelta
from functools import cache

from cronsim import CronSim
from hypothesis import assume, event, given, settings
from hypothesis import strategies as st

from tickwheel.schemas.model import CronSchedule, FoldPolicy, GapPolicy
from tickwheel.streams import schedule
from tickwheel.streams.schedule import (
    Occurrence,
    ScheduleError,
    next_occurrence,
    occurrences,
    tzinfo_for,
)

STEP_MS = 30_000  # every generated expression fires on whole half-minutes
HOUR_MS = 3_600_000
NAIVE_EPOCH = datetime(1970, 1, 1, tzinfo=UTC).replace(tzinfo=None)
ZONES = (
    "America/New_York",
    "Europe/London",
    "Europe/Dublin",  # negative DST in the rules, same offsets as London
    "Australia/Lord_Howe",  # 30-minute shift
    "America/Santiago",  # midnight transitions
    "America/Havana",
    "Antarctica/Troll",  # 2-hour shift
    "Pacific/Chatham",  # +12:45 / +13:45
    "America/St_Johns",  # -03:30
    "Africa/Casablanca",  # Ramadan suspensions: several transitions a year
    "Asia/Kolkata",
    "UTC",
)
ALL_ZONES = tuple(sorted(zoneinfo.available_timezones() & schedule._zone_keys()))

seconds_fields = st.sampled_from(["", "0 ", "30 ", "0,30 "])
minute_fields = st.sampled_from(["0", "30", "*/15", "*/20", "5,35", "0-10/5", "*", "59"])
hour_fields = st.sampled_from(
    ["*", "*/2", "1-5/2", "0", "1", "2", "3", "23", "1,2", "0-3", "2-4", "22,23", "0,12"]
)
day_fields = st.sampled_from(["*", "*", "*", "1-15", "L", "*/2", "13"])
month_fields = st.sampled_from(["*", "*", "*", "3,4,9,10,11", "JAN-JUN"])
dow_fields = st.sampled_from(["*", "*", "*", "SUN", "MON-FRI", "SAT,SUN", "FRI#2"])


@st.composite
def expressions(draw: st.DrawFn) -> str:
    """5- or 6-field expressions mixing fixed, ranged, listed and stepped fields."""
    fields = [draw(f) for f in (minute_fields, hour_fields, day_fields, month_fields, dow_fields)]
    return draw(seconds_fields) + " ".join(fields)


schedules = st.builds(
    CronSchedule,
    expr=expressions(),
    tz=st.sampled_from(ZONES),
    gap=st.sampled_from(list(GapPolicy)),
    fold=st.sampled_from(list(FoldPolicy)),
)


def utc_ms(year: int, month: int = 1, day: int = 1) -> int:
    """Epoch ms of a UTC date."""
    return int(datetime(year, month, day, tzinfo=UTC).timestamp() * 1000)


def wall_of(at_ms: int, tz: str) -> datetime:
    """The aware local time of an instant, from the same zone data the scheduler uses."""
    return datetime.fromtimestamp(at_ms / 1000, tzinfo_for(tz))


def matches(expr: str, wall: datetime) -> bool:
    """Whether a naive wall time matches, asked of a freshly constructed cronsim iterator."""
    return next(CronSim(expr, wall - timedelta(seconds=1)), None) == wall


def matching_walls(expr: str, low: datetime, high: datetime) -> set[datetime]:
    """Every naive wall time in (low, high] that matches, by cronsim's own iteration."""
    found: set[datetime] = set()
    for wall in CronSim(expr, low):
        if wall > high:
            return found
        found.add(wall)
    return found


def is_fixed(expr: str) -> bool:
    """The documented definition: the hour field has neither '*' nor '/'."""
    hour = expr.split()[-4]
    return "*" not in hour and "/" not in hour


@cache
def transitions(tz: str, year: int) -> list[int]:
    """Instants (ms) where the zone's offset changes in a year, by hourly probing."""
    found, at, end = [], utc_ms(year), utc_ms(year + 1)
    while at < end:
        if wall_of(at, tz).utcoffset() != wall_of(at + HOUR_MS, tz).utcoffset():
            low, high = at, at + HOUR_MS
            while high - low > 1000:
                mid = (low + high) // 2 // 1000 * 1000
                same = wall_of(mid, tz).utcoffset() == wall_of(low, tz).utcoffset()
                low, high = (mid, high) if same else (low, mid)
            found.append(high)
        at += HOUR_MS
    return found


def oracle(sched: CronSchedule, start_ms: int, end_ms: int) -> list[tuple[int, str, tuple[str, ...], bool]]:
    """Occurrences in (start, end) by brute force over real instants every 30 s."""
    fixed = is_fixed(sched.expr)
    events: dict[int, tuple[str, tuple[str, ...], bool]] = {}
    at = (start_ms // STEP_MS + 1) * STEP_MS
    previous = wall_of(at - STEP_MS, sched.tz)
    naive_start = previous.replace(tzinfo=None)
    walls = matching_walls(sched.expr, naive_start - timedelta(days=1), naive_start + timedelta(days=2))
    while at < end_ms:
        aware = wall_of(at, sched.tz)
        naive = aware.replace(tzinfo=None)
        jump = naive - previous.replace(tzinfo=None)
        if fixed and jump > timedelta(milliseconds=STEP_MS):
            gap_walls = [
                previous.replace(tzinfo=None) + timedelta(milliseconds=STEP_MS * k)
                for k in range(1, jump // timedelta(milliseconds=STEP_MS))
            ]
            if walls.intersection(gap_walls):
                if sched.gap == GapPolicy.SHIFT:
                    events[at] = (aware.isoformat(), ("dst_gap_shifted",), False)
                else:
                    skipped = naive not in walls
                    events[at] = (aware.isoformat(), ("dst_gap_skipped",), skipped)
        if at not in events and naive in walls:
            event = fold_event(sched, aware, fixed)
            if event is not None:
                events[at] = event
        previous = aware
        at += STEP_MS
    return [(at, *event) for at, event in sorted(events.items())]


def fold_event(sched: CronSchedule, aware: datetime, fixed: bool) -> tuple[str, tuple[str, ...], bool] | None:
    """A real matching instant: kept, flagged or dropped by the fold rule."""
    naive = aware.replace(tzinfo=None)
    zone = tzinfo_for(sched.tz)
    first, second = naive.replace(tzinfo=zone, fold=0), naive.replace(tzinfo=zone, fold=1)
    ambiguous = first.utcoffset() != second.utcoffset()
    if not ambiguous:
        return (aware.isoformat(), (), False)
    in_second_pass = aware.fold == 1
    if fixed and sched.fold == (FoldPolicy.FIRST if in_second_pass else FoldPolicy.LAST):
        return None
    flag = "dst_fold_second" if in_second_pass else "dst_fold_first"
    return (aware.isoformat(), (flag,), False)


@st.composite
def windows_around_transitions(draw: st.DrawFn) -> tuple[CronSchedule, int, int]:
    """A schedule aimed at the hours of a transition, and an 8-hour window holding it."""
    tz = draw(st.sampled_from(ZONES))
    center = draw(st.sampled_from(transitions(tz, draw(st.integers(2000, 2035))) or [0]))
    if center == 0:  # a zone without DST: any window will do
        center = draw(st.integers(utc_ms(2000), utc_ms(2035)))
    hours = sorted({wall_of(center - 1000, tz).hour, wall_of(center, tz).hour})
    hours = sorted({*hours, (hours[0] + 1) % 24})
    aimed = st.sampled_from([*map(str, hours), ",".join(map(str, hours))])
    every = st.just("*")
    fields = [
        draw(minute_fields),
        draw(st.one_of(aimed, aimed, hour_fields)),
        draw(st.one_of(every, every, every, day_fields)),
        draw(st.one_of(every, every, every, month_fields)),
        draw(st.one_of(every, every, every, dow_fields)),
    ]
    sched = CronSchedule(
        draw(seconds_fields) + " ".join(fields),
        tz,
        draw(st.sampled_from(list(GapPolicy))),
        draw(st.sampled_from(list(FoldPolicy))),
    )
    lead = st.integers(0, 4 * HOUR_MS) | st.sampled_from([HOUR_MS, 2 * HOUR_MS, 3 * HOUR_MS])
    start = center - draw(lead)
    return sched, start, start + 8 * HOUR_MS


@settings(max_examples=200, deadline=None)
@given(windows_around_transitions())
def test_matches_brute_force_oracle_around_transitions(case: tuple[CronSchedule, int, int]) -> None:
    """Every occurrence near a DST transition equals the brute-force application of the rules."""
    sched, start, end = case
    expected = oracle(sched, start, end)
    got = [
        (o.at_ms, o.local_iso, o.flags, o.skipped)
        for o in occurrences(sched, start, len(expected) + 1)
        if o.at_ms < end
    ]
    assert got == expected
    for at_ms, *_ in expected:
        found = next_occurrence(sched, at_ms - 1)
        assert found is not None
        assert found.at_ms == at_ms  # also from 1 ms before, e.g. right before a gap
    for flag in sorted({f for o in expected for f in o[2]}):
        event(flag)


any_instant = st.integers(utc_ms(1971), utc_ms(2090))


@settings(max_examples=200, deadline=None)
@given(sched=schedules, tz=st.sampled_from(ALL_ZONES), after=any_instant)
def test_fires_increase_and_exist_in_any_zone(sched: CronSchedule, tz: str, after: int) -> None:
    """In every zone: fires strictly increase, none is in a gap, each matches or is flagged."""
    sched = CronSchedule(sched.expr, tz, sched.gap, sched.fold)
    found = occurrences(sched, after, 25)
    assert all(a.at_ms < b.at_ms for a, b in itertools.pairwise(found))
    assert all(o.at_ms > after for o in found)
    for o in found:
        aware = wall_of(o.at_ms, tz)
        assert o.local_iso == aware.isoformat(timespec="seconds")  # a real wall time
        if "dst_gap_shifted" not in o.flags and "dst_gap_skipped" not in o.flags:
            assert matches(sched.expr, aware.replace(tzinfo=None))
        if o.skipped:
            assert o.flags == ("dst_gap_skipped",)


@settings(max_examples=100, deadline=None)
@given(sched=schedules, after=any_instant, data=st.data())
def test_restarting_between_fires_gives_the_same_sequence(
    sched: CronSchedule, after: int, data: st.DataObject
) -> None:
    """occurrences equals iterating next_occurrence, from any instant between two fires."""
    found = occurrences(sched, after, 12)
    cursor = after
    for expected in found:
        assert next_occurrence(sched, cursor) == expected
        cursor = expected.at_ms
    for before, following in itertools.pairwise(found):
        between = data.draw(st.integers(before.at_ms, following.at_ms - 1))
        assert next_occurrence(sched, between) == following
        assert next_occurrence(sched, following.at_ms - 1) == following


full_expressions = st.builds(
    " ".join,
    st.tuples(
        st.sampled_from(["0", "15", "*/10", "5-20/5", "*", "0,59"]),
        st.sampled_from(["0", "*/7", "30", "*"]),
        st.sampled_from(["*", "3", "*/5", "9-17", "0,23", "22-23"]),
        st.sampled_from(["*", "1", "L", "LW", "15-31", "29", "*/10", "31"]),
        st.sampled_from(["*", "2", "FEB", "4-6", "*/3", "DEC"]),
        st.sampled_from(["*", "MON", "5L", "SUN#1", "1-5", "6,0", "*/2", "7"]),
    ),
)


@settings(max_examples=300, deadline=None)
@given(expr=full_expressions, wall_ms=st.integers(0, utc_ms(2060)))
def test_naive_search_equals_cronsim_iteration(expr: str, wall_ms: int) -> None:
    """The bisection time-of-day search agrees with cronsim's own iterator on naive times."""
    try:
        cron = schedule._compile(expr)
    except ScheduleError:
        assume(False)  # day/month pairs that never exist are validate()'s business
    wall = NAIVE_EPOCH + timedelta(milliseconds=wall_ms)
    expected = next(CronSim(expr, wall), None)
    assume(expected is not None)  # cronsim's 50-year give-up differs from ours by a few days
    got_ms = schedule._next_wall(cron, wall_ms)
    assert NAIVE_EPOCH + timedelta(milliseconds=got_ms) == expected


@settings(max_examples=100, deadline=None)
@given(tz=st.sampled_from(ALL_ZONES), at_s=st.integers(utc_ms(1950) // 1000, utc_ms(2080) // 1000))
def test_segments_agree_with_zoneinfo(tz: str, at_s: int) -> None:
    """The probed segment of any instant has zoneinfo's offset, and so do its edges."""
    segment = schedule._segment(tz, at_s * 1000)
    assert segment.start_ms <= at_s * 1000 < segment.end_ms
    assert wall_of(at_s * 1000, tz).utcoffset() == timedelta(milliseconds=segment.off_ms)
    assert wall_of(segment.end_ms - 1000, tz).utcoffset() == timedelta(milliseconds=segment.off_ms)
    assert wall_of(segment.end_ms, tz).utcoffset() == timedelta(milliseconds=segment.next_off_ms)
    assert wall_of(segment.start_ms, tz).utcoffset() == timedelta(milliseconds=segment.off_ms)


def test_occurrence_is_frozen() -> None:
    """Occurrence is a frozen value, safe to share from the cache."""
    occurrence = Occurrence(0, "1970-01-01T00:00:00+00:00")
    assert occurrence.flags == ()
    assert occurrence.skipped is False
