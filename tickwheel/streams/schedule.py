"""When a schedule fires: one-time instants and cron expressions in an IANA zone, with DST.

Pure core: every function takes the instant it reasons about; nothing reads a clock.

**Wall times.** A cron expression matches *local wall times* (naive date-times). The zone maps
UTC instants to wall times piecewise: between two offset transitions (a *segment*) the
offset is constant, so the fires inside a segment are exactly the expression's wall-time
matches inside that segment's wall range. Walking segment by segment in UTC order gives
fires in strictly increasing UTC order, including the repeated hour of a fold. cronsim
parses the expression (5 fields, or 6 with leading seconds; names, ranges, steps, lists,
``L``, ``LW``, ``#``; Debian rule: day-of-month and day-of-week are ANDed when either
starts with ``*``) and decides which days match; it never sees a zone. The time of day,
the zone walk and the DST rules below are ours.

**Fixed local time.** An expression denotes a fixed local time when its *hour field*
contains neither ``*`` nor ``/`` (``30 2 * * *``, ``0 1,13 * * *``, ``0 9-17 * * *``).
Only fixed expressions get the gap and fold policies; every other expression (``*/30 * * *
*``, ``0 */2 * * *``) fires at every real instant whose wall time matches, so it fires in
both passes of a fold and simply has no fires inside a gap. Edge case, decided: a minute
(or second) wildcard under a fixed hour is still fixed, so ``*/15 2 * * *`` on a
spring-forward day collapses its four 02:xx times into one fire at 03:00, and on a
fall-back day with ``fold=first`` fires 01:00..01:45 only in the first pass.

**Gap** (spring forward). Fixed wall times that do not exist fire once at the first instant
after the gap (``gap=shift``, flag ``dst_gap_shifted``), or are reported once as
``skipped`` there (``gap=skip``, flag ``dst_gap_skipped``). Several nonexistent times
collapse into that one occurrence. If the first wall time after the gap is itself a match,
it fires (never skipped) and carries the gap flag, because one instant has one run id.

**Fold** (fall back). A fixed wall time inside the repeated range fires at its first pass
(``fold=first``, flag ``dst_fold_first``), its second (``last``, ``dst_fold_second``), or
both. Non-fixed expressions fire in both passes and carry the same flags, for operators.

**Bounded.** No search looks further than ``HORIZON_YEARS`` ahead (cronsim gives up at the
same distance); beyond it ``ScheduleError`` says so. A loop step either returns, drops a
whole fold pass, or moves to the next segment, so the step count is bounded by segments.

**Zone data.** Zones are read from the pinned ``tzdata`` package, never from the host's
``/usr/share/zoneinfo``, so every processor that runs the same release decides the same
instants; :func:`tz_version` names that data and is recorded on each decision.
"""

from __future__ import annotations

import bisect
import hashlib
import importlib
import itertools
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from functools import cache, lru_cache
from importlib import resources
from zoneinfo import ZoneInfo

from cronsim import CronSim, CronSimError

from tickwheel.schemas.model import CronSchedule, FoldPolicy, GapPolicy, OneTime, Schedule

FLAG_GAP_SHIFTED = "dst_gap_shifted"
FLAG_GAP_SKIPPED = "dst_gap_skipped"
FLAG_FOLD_FIRST = "dst_fold_first"
FLAG_FOLD_SECOND = "dst_fold_second"

HORIZON_YEARS = 50  # cronsim's own give-up distance; covers Feb-29 and MON#5-in-Feb rules
_HORIZON_DAYS = HORIZON_YEARS * 366
_HORIZON_MS = _HORIZON_DAYS * 86_400_000
_MAX_STEPS = 10_000  # far above the ~3 steps per segment a 50-year search needs
_MAX_EXPR_LEN = 256  # parse time grows with list length; no real expression is this long

_EARLIEST_MS = -2_208_988_800_000  # 1900-01-01T00:00Z: older instants are not scheduled
_LATEST_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z, datetime's last instant
_LATEST_SEARCH_MS = 32_503_680_000_000  # 3000-01-01T00:00Z: room for a horizon search

# validate() has no clock, so it looks for fires after a fixed instant. The horizon from
# 2000 spans a whole 28-year cycle of weekdays and leap days, so an expression that ever
# fires (this side of 2100) fires within it.
_REFERENCE_MS = 946_684_800_000  # 2000-01-01T00:00Z
_INTERVAL_SAMPLES = 128
_INTERVAL_SPAN_MS = 2 * 366 * 86_400_000

_NAIVE_EPOCH = datetime(1970, 1, 1, tzinfo=UTC).replace(tzinfo=None)
_EPOCH_ORDINAL = _NAIVE_EPOCH.toordinal()
_ONE_MS = timedelta(milliseconds=1)


class ScheduleError(ValueError):
    """A schedule that cannot be evaluated; ``field`` names the offending input."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


@dataclass(frozen=True, slots=True)
class Occurrence:
    """One occurrence of a schedule: a fire, or (``skipped``) a reported non-fire."""

    at_ms: int  # UTC instant in epoch ms (before spread/jitter)
    local_iso: str  # local wall time with offset, e.g. "2026-03-08T03:00:00-04:00"
    flags: tuple[str, ...] = ()
    skipped: bool = False  # gap=skip: must not fire; the caller emits RunSkipped(dst_gap)


# ---------------------------------------------------------------------------
# Public API


def validate(schedule: Schedule, *, min_interval_ms: int = 0) -> None:
    """Raise :class:`ScheduleError` unless ``schedule`` is well formed and fires often enough."""
    if isinstance(schedule, OneTime):
        _check_instant("at_ms", schedule.at_ms, 0, _LATEST_MS)
        return
    _check_fields(schedule)
    _zone(schedule.tz)
    cron = _compile(schedule.expr)
    _check_fires(cron)
    if min_interval_ms > 0:
        _check_interval(schedule, min_interval_ms)


def next_occurrence(schedule: Schedule, after_ms: int) -> Occurrence | None:
    """The first occurrence strictly after ``after_ms``; None once a one-time job has passed."""
    if isinstance(schedule, OneTime):
        if schedule.at_ms <= after_ms:
            return None
        return Occurrence(schedule.at_ms, _local_iso(schedule.at_ms, 0))
    _check_instant("after_ms", after_ms, _EARLIEST_MS, _LATEST_SEARCH_MS)
    return _next_cron(schedule, after_ms)


def occurrences(schedule: Schedule, after_ms: int, count: int) -> list[Occurrence]:
    """The next ``count`` occurrences after ``after_ms``, each strictly after the previous."""
    found: list[Occurrence] = []
    cursor = after_ms
    while len(found) < count:
        occurrence = next_occurrence(schedule, cursor)
        if occurrence is None:
            break
        found.append(occurrence)
        cursor = occurrence.at_ms
    return found


def offset_ms(job_id: str, scheduled_for_ms: int, spread_ms: int, jitter_ms: int) -> int:
    """The deterministic delay of a run: per-job spread plus per-occurrence jitter.

    Spread in ``[0, spread_ms)`` hashes the job id alone, so a job keeps its slot in the
    window every time; jitter in ``[0, jitter_ms)`` hashes the job id and the occurrence.
    blake2b, not ``hash()``, because every owner of the partition must agree.
    """
    if spread_ms < 0 or jitter_ms < 0:
        raise ScheduleError("spread_ms" if spread_ms < 0 else "jitter_ms", "must not be negative")
    if spread_ms <= 1 and jitter_ms <= 1:
        return 0  # the common case, and on every timer derivation: skip building the inputs
    spread = _hash_mod(b"tw-spread", job_id.encode(), spread_ms)
    jitter = _hash_mod(b"tw-jitter", f"{job_id}\x00{scheduled_for_ms}".encode(), jitter_ms)
    return spread + jitter


def tzinfo_for(tz: str) -> ZoneInfo:
    """The zone ``tz`` as every evaluation here sees it (``ScheduleError`` on ``tz`` if unknown).

    Use it to show local times consistently: the host's zoneinfo may be a different release.
    """
    return _zone(tz)


@cache
def tz_version() -> str:
    """The IANA tz database version every evaluation here uses, e.g. ``"2026f"``."""
    return str(importlib.import_module("tzdata").IANA_VERSION)


# ---------------------------------------------------------------------------
# Validation helpers


def _check_instant(field: str, value: object, lowest: int, highest: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ScheduleError(field, f"must be integer epoch milliseconds, got {value!r}")
    if not lowest <= value <= highest:
        raise ScheduleError(field, f"{value} is outside the schedulable range")


def _check_fields(schedule: CronSchedule) -> None:
    # Caches below key on these values, so an unhashable one must be stopped here.
    for field, value in (("expr", schedule.expr), ("tz", schedule.tz)):
        if not isinstance(value, str):
            raise ScheduleError(field, f"must be a string, got {type(value).__name__}")
    if schedule.gap not in tuple(GapPolicy):
        raise ScheduleError("gap", f"unknown gap policy {schedule.gap!r}")
    if schedule.fold not in tuple(FoldPolicy):
        raise ScheduleError("fold", f"unknown fold policy {schedule.fold!r}")


def _check_fires(cron: _Cron) -> None:
    try:
        _next_wall(cron, _REFERENCE_MS)
    except ScheduleError:
        raise ScheduleError("expr", f"{cron.expr!r} never fires") from None


def _check_interval(schedule: CronSchedule, min_interval_ms: int) -> None:
    """Sampled, not proven: the smallest gap between the fires that follow the reference."""
    fires = [
        o.at_ms
        for o in occurrences(schedule, _REFERENCE_MS, _INTERVAL_SAMPLES)
        if not o.skipped and o.at_ms <= _REFERENCE_MS + _INTERVAL_SPAN_MS
    ]
    gaps = [b - a for a, b in itertools.pairwise(fires)]
    if gaps and min(gaps) < min_interval_ms:
        raise ScheduleError(
            "expr",
            f"fires {min(gaps) / 1000:g}s apart; the minimum interval is "
            f"{min_interval_ms / 1000:g}s",
        )


# ---------------------------------------------------------------------------
# Zones: read from the tzdata package; transitions found by probing and cached per chunk

_CHUNK_S = 384 * 86_400
# tzdata 2026 has no two offset changes closer than ~4 days (Africa/Freetown, 1940s), so a
# daily probe sees every change; bisection then finds the exact second.
_PROBE_S = 86_400


@dataclass(frozen=True, slots=True)
class _Transition:
    at_s: int  # first second with the new offset
    before_s: int
    after_s: int


@dataclass(frozen=True, slots=True)
class _Segment:
    """A stretch of UTC time with one offset, and the offsets on either side of it."""

    start_ms: int  # a transition, or any earlier instant when none is near (prev == off)
    end_ms: int  # the next transition, or a later instant with the same offset (next == off)
    off_ms: int
    prev_off_ms: int
    next_off_ms: int


@lru_cache(maxsize=1)
def _zone_keys() -> frozenset[str]:
    text = resources.files("tzdata").joinpath("zones").read_text(encoding="utf-8")
    return frozenset(text.split())


@cache
def _zone(key: str) -> ZoneInfo:
    # Membership in the package's own list also rules out path tricks such as "../x".
    if key not in _zone_keys():
        raise ScheduleError("tz", f"unknown time zone {key!r}")
    path = resources.files("tzdata").joinpath("zoneinfo", *key.split("/"))
    with path.open("rb") as data:
        return ZoneInfo.from_file(data, key=key)


def _offset_s(zone: ZoneInfo, at_s: int) -> int:
    offset = datetime.fromtimestamp(at_s, tz=zone).utcoffset()
    assert offset is not None
    return offset // timedelta(seconds=1)


@dataclass(frozen=True, slots=True)
class _Chunk:
    """The offset changes at seconds in ``(start, end]`` of one chunk, in order."""

    starts: tuple[int, ...]  # ``at_s`` of each transition, for bisection
    transitions: tuple[_Transition, ...]


@lru_cache(maxsize=8192)
def _chunk(key: str, index: int) -> _Chunk:
    zone = _zone(key)
    found: list[_Transition] = []
    low = index * _CHUNK_S
    low_off = _offset_s(zone, low)
    for high in range(low + _PROBE_S, low + _CHUNK_S + 1, _PROBE_S):
        high_off = _offset_s(zone, high)
        if high_off != low_off:
            found.append(_bisect_transition(zone, low, low_off, high))
        low, low_off = high, high_off
    return _Chunk(tuple(t.at_s for t in found), tuple(found))


def _bisect_transition(zone: ZoneInfo, low: int, low_off: int, high: int) -> _Transition:
    while high - low > 1:
        middle = (low + high) // 2
        if _offset_s(zone, middle) == low_off:
            low = middle
        else:
            high = middle
    return _Transition(high, low_off, _offset_s(zone, high))


def _previous_transition(key: str, at_s: int) -> _Transition | None:
    """The last change at or before ``at_s``, if one happened in the last ~1.5 chunks."""
    index = at_s // _CHUNK_S
    for chunk in (_chunk(key, index), _chunk(key, index - 1)):
        position = bisect.bisect_right(chunk.starts, at_s)
        if position:
            return chunk.transitions[position - 1]
    return None


def _following_transition(key: str, at_s: int) -> _Transition | None:
    """The first change after ``at_s``, if one happens in the next ~1.5 chunks."""
    index = at_s // _CHUNK_S
    for chunk in (_chunk(key, index), _chunk(key, index + 1)):
        position = bisect.bisect_right(chunk.starts, at_s)
        if position < len(chunk.starts):
            return chunk.transitions[position]
    return None


def _segment(key: str, at_ms: int) -> _Segment:
    """The segment holding instant ``at_ms``."""
    at_s = at_ms // 1000
    chunk = at_s // _CHUNK_S
    before = _previous_transition(key, at_s)
    after = _following_transition(key, at_s)
    off_s = before.after_s if before else _offset_s(_zone(key), at_s)
    # With no change nearby, pretend one at the edge of the searched chunks: same offset on
    # both sides, so nothing downstream treats it as a gap or a fold.
    start_s, prev_s = (before.at_s, before.before_s) if before else ((chunk - 1) * _CHUNK_S, off_s)
    end_s, next_s = (after.at_s, after.after_s) if after else ((chunk + 2) * _CHUNK_S, off_s)
    return _Segment(start_s * 1000, end_s * 1000, off_s * 1000, prev_s * 1000, next_s * 1000)


# ---------------------------------------------------------------------------
# Expressions: parsed once by cronsim, iterated over naive wall times


@dataclass(frozen=True, slots=True)
class _Cron:
    """A parsed expression. Day matching (``L``, ``LW``, ``#``, the AND/OR rule) stays
    cronsim's; the time of day is found here by bisection, because cronsim's iterator
    steps hour by hour and dominated the hot path (~90 us per call, measured)."""

    expr: str
    parsed: CronSim
    months: frozenset[int]
    hours: tuple[int, ...]
    minutes: tuple[int, ...]
    seconds: tuple[int, ...]
    fixed_hour: bool


@lru_cache(maxsize=4096)
def _compile(expr: str) -> _Cron:
    if not isinstance(expr, str) or len(expr) > _MAX_EXPR_LEN:
        raise ScheduleError("expr", f"must be a cron expression of at most {_MAX_EXPR_LEN} chars")
    fields = expr.split()
    if len(fields) not in (5, 6):
        raise ScheduleError("expr", f"{expr!r} has {len(fields)} fields; expected 5 or 6")
    try:
        parsed = CronSim(expr, _NAIVE_EPOCH)
    except (CronSimError, ValueError, IndexError) as exc:
        if _parses_in_any_month(fields):
            raise ScheduleError("expr", f"{expr!r} never fires: no such day in its months") from None
        raise ScheduleError("expr", f"malformed cron expression {expr!r}: {exc}") from None
    hour = fields[len(fields) - 4]
    return _Cron(
        expr,
        parsed,
        frozenset(parsed.months),
        tuple(sorted(parsed.hours)),
        tuple(sorted(parsed.minutes)),
        tuple(sorted(parsed.seconds)),
        fixed_hour="*" not in hour and "/" not in hour,
    )


def _parses_in_any_month(fields: list[str]) -> bool:
    """Whether cronsim only refused the day/month pairing (``0 0 31 2 *``), not the syntax."""
    every_month = [*fields[:-2], "*", fields[-1]]
    try:
        CronSim(" ".join(every_month), _NAIVE_EPOCH)
    except (CronSimError, ValueError, IndexError):
        return False
    return True


def _next_wall(cron: _Cron, wall_ms: int) -> int:
    """The first wall time (naive epoch ms) matching ``cron`` strictly after ``wall_ms``."""
    day, second = divmod(wall_ms // 1000 + 1, 86_400)
    last_day = day + _HORIZON_DAYS
    while day <= last_day:
        today = date.fromordinal(_EPOCH_ORDINAL + day)
        if today.month not in cron.months:
            day, second = _next_month_day(today), 0
            continue
        if cron.parsed.match_day(today):
            found = _time_of_day(cron, second)
            if found is not None:
                return (day * 86_400 + found) * 1000
        day, second = day + 1, 0
    raise ScheduleError("expr", f"{cron.expr!r} has no occurrence within {HORIZON_YEARS} years")


def _next_month_day(today: date) -> int:
    """The epoch day number of the first of the month after ``today``'s."""
    first = (today.replace(day=28) + timedelta(days=4)).replace(day=1)
    return first.toordinal() - _EPOCH_ORDINAL


def _time_of_day(cron: _Cron, second: int) -> int | None:
    """The first matching second of the day at or after ``second``, if any."""
    hour, rest = divmod(second, 3600)
    minute, sec = divmod(rest, 60)
    hours, minutes, seconds = cron.hours, cron.minutes, cron.seconds
    h = bisect.bisect_left(hours, hour)
    if h < len(hours) and hours[h] == hour:
        m = bisect.bisect_left(minutes, minute)
        if m < len(minutes) and minutes[m] == minute:
            s = bisect.bisect_left(seconds, sec)
            if s < len(seconds):
                return hour * 3600 + minute * 60 + seconds[s]
            m += 1
        if m < len(minutes):
            return hour * 3600 + minutes[m] * 60 + seconds[0]
        h += 1
    if h < len(hours):
        return hours[h] * 3600 + minutes[0] * 60 + seconds[0]
    return None


class _WallCursor:
    """Remembers the last answer: walking segments re-asks about walls with no match."""

    __slots__ = ("_cron", "_from", "_to")

    def __init__(self, cron: _Cron) -> None:
        self._cron = cron
        self._from = 0
        self._to = 0  # empty interval: the first question always asks cronsim

    def after(self, wall_ms: int) -> int:
        # No wall in (_from, _to) matches, so every question inside it has answer _to.
        if not self._from <= wall_ms < self._to:
            self._from, self._to = wall_ms, _next_wall(self._cron, wall_ms)
        return self._to


# ---------------------------------------------------------------------------
# Evaluation


@lru_cache(maxsize=65_536)
def _next_cron(schedule: CronSchedule, after_ms: int) -> Occurrence:
    """Cached: at a hot instant thousands of jobs ask the same (schedule, instant) question."""
    cron = _compile(schedule.expr)
    walls = _WallCursor(cron)
    # Candidates are instants after ``cursor`` inside ``segment``. The segment is carried,
    # not derived from the cursor: asked from 1 ms before a gap, the cursor sits in the
    # segment whose end owns the gap occurrence.
    cursor = after_ms
    segment = _segment(schedule.tz, cursor)
    for _ in range(_MAX_STEPS):
        if cursor - after_ms > _HORIZON_MS:
            break
        wall = walls.after(cursor + segment.off_ms)
        at_ms = wall - segment.off_ms
        if at_ms < segment.end_ms:
            outcome = _in_segment(schedule, cron, segment, at_ms, wall)
            if isinstance(outcome, Occurrence):
                return outcome
            cursor = outcome
        elif cron.fixed_hour and wall < segment.end_ms + segment.next_off_ms:
            return _gap_occurrence(schedule, segment, walls)  # a wall the gap swallowed
        else:
            cursor, segment = segment.end_ms - 1, _segment(schedule.tz, segment.end_ms)
    raise ScheduleError("expr", f"{schedule.expr!r} has no occurrence within {HORIZON_YEARS} years")


def _in_segment(
    schedule: CronSchedule, cron: _Cron, segment: _Segment, at_ms: int, wall: int
) -> Occurrence | int:
    """The occurrence at a real matching instant, or the cursor to resume from if dropped."""
    local = _local_iso(wall, segment.off_ms)
    second_pass_end = segment.start_ms + segment.prev_off_ms - segment.off_ms
    first_pass_start = segment.end_ms - segment.off_ms + segment.next_off_ms
    if at_ms < second_pass_end:
        if cron.fixed_hour and schedule.fold == FoldPolicy.FIRST:
            return second_pass_end - 1
        return Occurrence(at_ms, local, (FLAG_FOLD_SECOND,))
    if at_ms >= first_pass_start:
        if cron.fixed_hour and schedule.fold == FoldPolicy.LAST:
            return segment.end_ms - 1
        return Occurrence(at_ms, local, (FLAG_FOLD_FIRST,))
    return Occurrence(at_ms, local)


def _gap_occurrence(schedule: CronSchedule, segment: _Segment, walls: _WallCursor) -> Occurrence:
    """The one occurrence, at the first instant after the gap, for the walls it swallowed."""
    at_ms = segment.end_ms
    wall = at_ms + segment.next_off_ms
    local = _local_iso(wall, segment.next_off_ms)
    if schedule.gap == GapPolicy.SHIFT:
        return Occurrence(at_ms, local, (FLAG_GAP_SHIFTED,))
    matches_itself = walls.after(wall - 1) == wall
    return Occurrence(at_ms, local, (FLAG_GAP_SKIPPED,), skipped=not matches_itself)


# ---------------------------------------------------------------------------
# Formatting and hashing


def _local_iso(wall_ms: int, off_ms: int) -> str:
    naive = _NAIVE_EPOCH + wall_ms * _ONE_MS
    spec = "milliseconds" if wall_ms % 1000 else "seconds"
    return naive.isoformat(timespec=spec) + _iso_offset(off_ms // 1000)


@lru_cache(maxsize=256)
def _iso_offset(off_s: int) -> str:
    sign = "-" if off_s < 0 else "+"
    hours, rest = divmod(abs(off_s), 3600)
    minutes, seconds = divmod(rest, 60)
    text = f"{sign}{hours:02d}:{minutes:02d}"
    return f"{text}:{seconds:02d}" if seconds else text


def _hash_mod(person: bytes, data: bytes, modulus: int) -> int:
    if modulus <= 1:
        return 0
    digest = hashlib.blake2b(data, digest_size=8, person=person).digest()
    return int.from_bytes(digest, "big") % modulus
