"""Which cron library should Tickwheel build on? cronsim vs croniter, measured.

(a) Runs each library natively (an aware start datetime, the library's own DST handling)
over DST cases and checks the architecture's rules; ``tickwheel`` is the same check run
through ``tickwheel.streams.schedule`` (cronsim for parsing and day matching, our own
segment walk for DST). (b) Measures next-fire calls per second.

Run: ``.venv/bin/python bench/cron_libs.py`` (about 20 s on two shared cores).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from zoneinfo import ZoneInfo

from croniter import croniter
from cronsim import CronSim

from tickwheel.schemas.model import CronSchedule
from tickwheel.streams import schedule


@dataclass(frozen=True)
class Case:
    rule: str
    expr: str
    tz: str
    after: str  # naive local start
    expected: tuple[str, ...]  # the first fires, local ISO with offset


CASES = (
    Case("gap: fixed time shifts to gap end (NY 02:30->03:00)", "30 2 * * *",
         "America/New_York", "2026-03-07T12:00",
         ("2026-03-08T03:00:00-04:00", "2026-03-09T02:30:00-04:00")),
    Case("fold: fixed time fires once, first pass (NY)", "30 1 * * *",
         "America/New_York", "2026-10-31T12:00",
         ("2026-11-01T01:30:00-04:00", "2026-11-02T01:30:00-05:00")),
    Case("fold: wildcard hour fires in both passes (NY)", "*/30 * * * *",
         "America/New_York", "2026-11-01T00:15",
         ("2026-11-01T00:30:00-04:00", "2026-11-01T01:00:00-04:00",
          "2026-11-01T01:30:00-04:00", "2026-11-01T01:00:00-05:00",
          "2026-11-01T01:30:00-05:00", "2026-11-01T02:00:00-05:00")),
    Case("gap: wildcard hour is not shifted (NY)", "*/30 * * * *",
         "America/New_York", "2026-03-08T01:15",
         ("2026-03-08T01:30:00-05:00", "2026-03-08T03:00:00-04:00",
          "2026-03-08T03:30:00-04:00")),
    Case("gap: collapsed times fire once (NY 02:00,02:30)", "0,30 2 * * *",
         "America/New_York", "2026-03-07T12:00",
         ("2026-03-08T03:00:00-04:00", "2026-03-09T02:00:00-04:00")),
    Case("gap: fixed hour, minute step collapses (NY)", "*/20 2 * * *",
         "America/New_York", "2026-03-07T12:00",
         ("2026-03-08T03:00:00-04:00", "2026-03-09T02:00:00-04:00")),
    Case("fold: hour range is fixed, fires once (NY)", "0 1-3 * * *",
         "America/New_York", "2026-11-01T00:15",
         ("2026-11-01T01:00:00-04:00", "2026-11-01T02:00:00-05:00",
          "2026-11-01T03:00:00-05:00")),
    Case("fold: hour step fires in both passes (NY)", "15 1-5/2 * * *",
         "America/New_York", "2026-11-01T00:00",
         ("2026-11-01T01:15:00-04:00", "2026-11-01T01:15:00-05:00",
          "2026-11-01T03:15:00-05:00")),
    Case("gap: 6-field fixed time shifts (NY)", "0 30 2 * * *",
         "America/New_York", "2026-03-07T12:00",
         ("2026-03-08T03:00:00-04:00", "2026-03-09T02:30:00-04:00")),
    Case("fold: 6-field fixed time once (NY)", "0 30 1 * * *",
         "America/New_York", "2026-10-31T12:00",
         ("2026-11-01T01:30:00-04:00", "2026-11-02T01:30:00-05:00")),
    Case("gap: London 01:30 -> 02:00 BST", "30 1 * * *",
         "Europe/London", "2026-03-28T12:00",
         ("2026-03-29T02:00:00+01:00", "2026-03-30T01:30:00+01:00")),
    Case("fold: London 01:30 once", "30 1 * * *",
         "Europe/London", "2026-10-24T12:00",
         ("2026-10-25T01:30:00+01:00", "2026-10-26T01:30:00+00:00")),
    Case("gap: Lord Howe 30-min gap (02:15 -> 02:30)", "15 2 * * *",
         "Australia/Lord_Howe", "2026-10-03T12:00",
         ("2026-10-04T02:30:00+11:00", "2026-10-05T02:15:00+11:00")),
    Case("fold: Lord Howe 30-min fold once", "45 1 * * *",
         "Australia/Lord_Howe", "2026-04-04T12:00",
         ("2026-04-05T01:45:00+11:00", "2026-04-06T01:45:00+10:30")),
    Case("gap: Santiago midnight gap (00:00 -> 01:00)", "0 0 * * *",
         "America/Santiago", "2026-09-05T12:00",
         ("2026-09-06T01:00:00-03:00", "2026-09-07T00:00:00-03:00")),
    Case("gap: Havana midnight gap (00:00 -> 01:00)", "0 0 * * *",
         "America/Havana", "2026-03-07T12:00",
         ("2026-03-08T01:00:00-04:00", "2026-03-09T00:00:00-04:00")),
    # tzdata 2026f keeps Cuba on -04 through winter 2026/27, so the fold case is 2025's.
    Case("fold: Havana midnight fold once", "30 0 * * *",
         "America/Havana", "2025-11-01T12:00",
         ("2025-11-02T00:30:00-04:00", "2025-11-03T00:30:00-05:00")),
    Case("gap: Troll 2-hour gap (01:30 -> 03:00)", "30 1 * * *",
         "Antarctica/Troll", "2026-03-28T12:00",
         ("2026-03-29T03:00:00+02:00", "2026-03-30T01:30:00+02:00")),
    Case("fold: Troll 2-hour fold once", "30 2 * * *",
         "Antarctica/Troll", "2026-10-24T12:00",
         ("2026-10-25T02:30:00+02:00", "2026-10-26T02:30:00+00:00")),
)

def zone(key: str) -> ZoneInfo:
    """The zone from the tzdata package, as tickwheel loads it: the host's copy may differ."""
    return schedule.tzinfo_for(key)


Runner = Callable[[str, datetime, int], list[str]]


def run_cronsim(expr: str, start: datetime, count: int) -> list[str]:
    it = CronSim(expr, start)
    return [next(it).isoformat() for _ in range(count)]


def run_croniter(expr: str, start: datetime, count: int) -> list[str]:
    it = croniter(expr, start, second_at_beginning=len(expr.split()) == 6)
    return [it.get_next(datetime).isoformat() for _ in range(count)]


def run_tickwheel(expr: str, start: datetime, count: int) -> list[str]:
    assert start.tzinfo is not None
    assert isinstance(start.tzinfo, ZoneInfo)
    sched = CronSchedule(expr, start.tzinfo.key)
    found = schedule.occurrences(sched, int(start.timestamp() * 1000), count)
    return [o.local_iso for o in found]


RUNNERS: dict[str, Runner] = {
    "cronsim 2.8": run_cronsim,
    "croniter 7.0": run_croniter,
    "tickwheel": run_tickwheel,
}


def correctness() -> dict[str, int]:
    print(f"tz database {schedule.tz_version()} (the tzdata package) for every library\n")
    print("(a) DST rules, native behaviour (OK = first fires equal the expected ones)\n")
    names = list(RUNNERS)
    print(f"{'rule':52} " + " ".join(f"{n:>13}" for n in names))
    passed = dict.fromkeys(names, 0)
    for case in CASES:
        start = datetime.fromisoformat(case.after).replace(tzinfo=zone(case.tz))
        cells = []
        for name, runner in RUNNERS.items():
            try:
                got = runner(case.expr, start, len(case.expected))
            except Exception as exc:  # noqa: BLE001 - a library error is a result here
                got = [f"error: {exc}"]
            ok = tuple(got) == case.expected
            passed[name] += ok
            cells.append("OK" if ok else "wrong")
            if not ok:
                print(f"    {name} on {case.expr!r} {case.tz}: {got}")
        print(f"{case.rule:52} " + " ".join(f"{c:>13}" for c in cells))
    print(f"{'passed':52} " + " ".join(f"{passed[n]:>10}/{len(CASES)}" for n in names))
    return passed


SPEED_EXPRS = (
    ("30 2 * * *", "America/New_York"),
    ("*/5 * * * *", "UTC"),
    ("0 9 * * MON-FRI", "Europe/London"),
    ("0 0 L * *", "Australia/Lord_Howe"),
)


def rate(fn: Callable[[int], object], seconds: float = 0.6) -> float:
    """Calls per second, best of three windows (the cores are shared)."""
    best = 0.0
    for _ in range(3):
        calls, began = 0, time.perf_counter()
        while (elapsed := time.perf_counter() - began) < seconds / 3:
            for i in range(50):
                fn(calls + i)
            calls += 50
        best = max(best, calls / elapsed)
    return best


def speed() -> None:
    print("\n(b) next-fire calls/second (fresh start instant per call unless 'cached')\n")
    base = 1_780_000_000_000  # 2026-05-28
    header = ("cronsim", "croniter", "tickwheel", "tw cached")
    print(f"{'expression':30} " + " ".join(f"{h:>10}" for h in header))
    for expr, tz in SPEED_EXPRS:
        tzinfo = zone(tz)
        sched = CronSchedule(expr, tz)

        def start(i: int, tzinfo: ZoneInfo = tzinfo) -> datetime:
            return datetime.fromtimestamp((base + i * 997_000) / 1000, tzinfo)

        def with_cronsim(i: int, expr: str = expr, start: Callable[[int], datetime] = start) -> object:
            return next(CronSim(expr, start(i)))

        def with_croniter(i: int, expr: str = expr, start: Callable[[int], datetime] = start) -> object:
            return croniter(expr, start(i)).get_next(datetime)

        def uncached(i: int, sched: CronSchedule = sched) -> object:
            return schedule._next_cron.__wrapped__(sched, base + i * 997_000)  # no cache

        def cached(_i: int, sched: CronSchedule = sched) -> object:
            return schedule.next_occurrence(sched, base)

        rates = [rate(fn) for fn in (with_cronsim, with_croniter, uncached, cached)]
        print(f"{expr + ' ' + tz:30} " + " ".join(f"{r:>10,.0f}" for r in rates))


def hot_instant(jobs: int = 100_000) -> None:
    """The processor's case: many jobs ask for their next fire after the same instant."""
    print(f"\n(c) hot instant: {jobs:,} next_occurrence calls after one instant, cold cache\n")
    hot = 1_798_761_600_000  # 2027-01-01T00:00Z
    zones = sorted(schedule._zone_keys())[:70]
    variety = [CronSchedule(f"{m} {h} * * *", tz) for tz in zones for h in range(24) for m in range(60)]
    for distinct in (10, 1_000, jobs):
        batch = [variety[(i * 7_919) % distinct] for i in range(jobs)]
        schedule._next_cron.cache_clear()
        for sched in {*batch}:
            schedule.validate(sched)  # warm zone and parse caches, as registration would
        began = time.perf_counter()
        for sched in batch:
            schedule.next_occurrence(sched, hot)
        elapsed = time.perf_counter() - began
        print(f"{distinct:>7,} distinct schedules: {elapsed:6.2f} s  ({jobs / elapsed:>9,.0f} calls/s)")


if __name__ == "__main__":
    correctness()
    speed()
    hot_instant()
