"""Schedules by example: the architecture's DST rules, policies, validation and offsets."""

from __future__ import annotations

import importlib
import itertools
import time
from datetime import datetime
from importlib import resources

import pytest

from tickwheel.schemas.model import CronSchedule, FoldPolicy, GapPolicy, OneTime
from tickwheel.streams.schedule import (
    Occurrence,
    ScheduleError,
    next_occurrence,
    occurrences,
    offset_ms,
    tz_version,
    tzinfo_for,
    validate,
)

NY = "America/New_York"


def at(local: str, tz: str = "UTC") -> int:
    """Epoch ms of a naive local ISO time in ``tz`` (first pass if ambiguous)."""
    return int(datetime.fromisoformat(local).replace(tzinfo=tzinfo_for(tz)).timestamp() * 1000)


def local_fires(
    expr: str,
    tz: str,
    after: str,
    count: int,
    gap: GapPolicy = GapPolicy.SHIFT,
    fold: FoldPolicy = FoldPolicy.FIRST,
) -> list[tuple[str, tuple[str, ...], bool]]:
    """(local ISO, flags, skipped) of the next ``count`` occurrences after local ``after``."""
    found = occurrences(CronSchedule(expr, tz, gap, fold), at(after, tz), count)
    return [(o.local_iso, o.flags, o.skipped) for o in found]


# ---------------------------------------------------------------------------
# The acceptance examples


def test_spring_forward_fixed_time_shifts_to_gap_end() -> None:
    """30 2 * * * in New York fires at 03:00 on the spring-forward day, then 02:30 again."""
    assert local_fires("30 2 * * *", NY, "2026-03-07T12:00", 3) == [
        ("2026-03-08T03:00:00-04:00", ("dst_gap_shifted",), False),
        ("2026-03-09T02:30:00-04:00", (), False),
        ("2026-03-10T02:30:00-04:00", (), False),
    ]


def test_fall_back_fixed_time_fires_once_at_first_pass() -> None:
    """30 1 * * * in New York fires once on the fall-back day, at the EDT 01:30."""
    assert local_fires("30 1 * * *", NY, "2026-10-31T12:00", 3) == [
        ("2026-11-01T01:30:00-04:00", ("dst_fold_first",), False),
        ("2026-11-02T01:30:00-05:00", (), False),
        ("2026-11-03T01:30:00-05:00", (), False),
    ]


def test_wildcard_hour_fires_in_both_passes_of_the_fold() -> None:
    """*/30 * * * * fires at 01:00 and 01:30 in both the EDT and the EST hour."""
    assert [f[0] for f in local_fires("*/30 * * * *", NY, "2026-11-01T00:15", 6)] == [
        "2026-11-01T00:30:00-04:00",
        "2026-11-01T01:00:00-04:00",
        "2026-11-01T01:30:00-04:00",
        "2026-11-01T01:00:00-05:00",
        "2026-11-01T01:30:00-05:00",
        "2026-11-01T02:00:00-05:00",
    ]


def test_wildcard_hour_is_not_shifted_in_the_gap() -> None:
    """*/30 * * * * has no fires in the spring-forward gap and none moved to its end."""
    assert local_fires("*/30 * * * *", NY, "2026-03-08T01:15", 3) == [
        ("2026-03-08T01:30:00-05:00", (), False),
        ("2026-03-08T03:00:00-04:00", (), False),
        ("2026-03-08T03:30:00-04:00", (), False),
    ]


# ---------------------------------------------------------------------------
# Policies and edge cases


def test_gap_skip_reports_a_skipped_occurrence() -> None:
    """gap=skip reports the nonexistent 02:30 as skipped at 03:00 with dst_gap_skipped."""
    fires = local_fires("30 2 * * *", NY, "2026-03-07T12:00", 2, gap=GapPolicy.SKIP)
    assert fires == [
        ("2026-03-08T03:00:00-04:00", ("dst_gap_skipped",), True),
        ("2026-03-09T02:30:00-04:00", (), False),
    ]


def test_collapsing_gap_times_give_one_occurrence() -> None:
    """02:00 and 02:30 both shift to 03:00 but fire there once."""
    fires = local_fires("0,30 2 * * *", NY, "2026-03-07T12:00", 2)
    assert fires == [
        ("2026-03-08T03:00:00-04:00", ("dst_gap_shifted",), False),
        ("2026-03-09T02:00:00-04:00", (), False),
    ]


def test_gap_end_that_matches_itself_fires_even_under_skip() -> None:
    """With gap=skip, 03:00 fires (it exists) and carries the flag of the swallowed 02:xx."""
    fires = local_fires("0 2,3 * * *", NY, "2026-03-07T12:00", 2, gap=GapPolicy.SKIP)
    assert fires == [
        ("2026-03-08T03:00:00-04:00", ("dst_gap_skipped",), False),
        ("2026-03-09T02:00:00-04:00", (), False),
    ]


def test_gap_end_that_matches_itself_fires_once_under_shift() -> None:
    """With gap=shift, a shifted 02:00 and a real 03:00 are one fire at 03:00."""
    fires = local_fires("0 2,3 * * *", NY, "2026-03-07T12:00", 2)
    assert fires == [
        ("2026-03-08T03:00:00-04:00", ("dst_gap_shifted",), False),
        ("2026-03-09T02:00:00-04:00", (), False),
    ]


@pytest.mark.parametrize(
    ("fold", "expected"),
    [
        (FoldPolicy.LAST, [("2026-11-01T01:30:00-05:00", ("dst_fold_second",), False)]),
        (
            FoldPolicy.BOTH,
            [
                ("2026-11-01T01:30:00-04:00", ("dst_fold_first",), False),
                ("2026-11-01T01:30:00-05:00", ("dst_fold_second",), False),
            ],
        ),
    ],
)
def test_fold_policies_last_and_both(
    fold: FoldPolicy, expected: list[tuple[str, tuple[str, ...], bool]]
) -> None:
    """fold=last fires at the EST pass only; fold=both fires at both passes."""
    fires = local_fires("30 1 * * *", NY, "2026-10-31T12:00", len(expected) + 1, fold=fold)
    assert fires[:-1] == expected
    assert fires[-1] == ("2026-11-02T01:30:00-05:00", (), False)


def test_fixed_hour_with_minute_step_collapses_in_gap_and_keeps_first_fold() -> None:
    """*/20 2 fires once at 03:00 in the gap; */20 1 fires only in the first fold pass."""
    assert local_fires("*/20 2 * * *", NY, "2026-03-07T12:00", 2) == [
        ("2026-03-08T03:00:00-04:00", ("dst_gap_shifted",), False),
        ("2026-03-09T02:00:00-04:00", (), False),
    ]
    assert [f[0] for f in local_fires("*/20 1 * * *", NY, "2026-10-31T12:00", 4)] == [
        "2026-11-01T01:00:00-04:00",
        "2026-11-01T01:20:00-04:00",
        "2026-11-01T01:40:00-04:00",
        "2026-11-02T01:00:00-05:00",
    ]


def test_hour_step_fires_in_both_passes() -> None:
    """An hour field with a step (1-5/2) is not a fixed time: 01:15 fires twice."""
    assert [f[0] for f in local_fires("15 1-5/2 * * *", NY, "2026-11-01T00:00", 3)] == [
        "2026-11-01T01:15:00-04:00",
        "2026-11-01T01:15:00-05:00",
        "2026-11-01T03:15:00-05:00",
    ]


def test_six_field_expression_uses_leading_seconds() -> None:
    """'15 30 2 * * *' fires at 02:30:15 and is shifted like a 5-field fixed time."""
    assert local_fires("15 30 2 * * *", NY, "2026-03-07T12:00", 2) == [
        ("2026-03-08T03:00:00-04:00", ("dst_gap_shifted",), False),
        ("2026-03-09T02:30:15-04:00", (), False),
    ]


@pytest.mark.parametrize(
    ("expr", "tz", "after", "expected"),
    [
        ("15 2 * * *", "Australia/Lord_Howe", "2026-10-03T12:00", "2026-10-04T02:30:00+11:00"),
        ("30 1 * * *", "Antarctica/Troll", "2026-03-28T12:00", "2026-03-29T03:00:00+02:00"),
        ("0 0 * * *", "America/Santiago", "2026-09-05T12:00", "2026-09-06T01:00:00-03:00"),
        ("0 0 * * *", "America/Havana", "2026-03-07T12:00", "2026-03-08T01:00:00-04:00"),
        ("30 1 * * *", "Europe/London", "2026-03-28T12:00", "2026-03-29T02:00:00+01:00"),
    ],
)
def test_gap_shift_in_other_zones(expr: str, tz: str, after: str, expected: str) -> None:
    """30-minute, 2-hour and midnight gaps all shift to the first instant after the gap."""
    assert local_fires(expr, tz, after, 1) == [(expected, ("dst_gap_shifted",), False)]


@pytest.mark.parametrize(
    ("expr", "tz", "after", "first", "second"),
    [
        (
            "45 1 * * *",
            "Australia/Lord_Howe",
            "2026-04-04T12:00",
            "2026-04-05T01:45:00+11:00",
            "2026-04-06T01:45:00+10:30",
        ),
        (
            "30 2 * * *",
            "Antarctica/Troll",
            "2026-10-24T12:00",
            "2026-10-25T02:30:00+02:00",
            "2026-10-26T02:30:00+00:00",
        ),
        (
            "30 0 * * *",
            "America/Havana",
            "2025-11-01T12:00",
            "2025-11-02T00:30:00-04:00",
            "2025-11-03T00:30:00-05:00",
        ),
    ],
)
def test_fold_once_in_other_zones(expr: str, tz: str, after: str, first: str, second: str) -> None:
    """30-minute, 2-hour and midnight folds fire a fixed time once, at the first pass."""
    assert local_fires(expr, tz, after, 2) == [
        (first, ("dst_fold_first",), False),
        (second, (), False),
    ]


def test_next_occurrence_is_strictly_after() -> None:
    """An occurrence exactly at after_ms is not returned; one a millisecond later is."""
    sched = CronSchedule("0 12 * * *")
    noon = at("2026-05-01T12:00")
    assert next_occurrence(sched, noon - 1) == Occurrence(noon, "2026-05-01T12:00:00+00:00", ())
    found = next_occurrence(sched, noon)
    assert found is not None
    assert found.at_ms == noon + 86_400_000


@pytest.mark.parametrize("gap", list(GapPolicy))
def test_gap_occurrence_is_found_from_one_ms_before(gap: GapPolicy) -> None:
    """Asked from 1 ms before the gap end, the shifted or skipped occurrence is still next."""
    sched = CronSchedule("30 2 * * *", NY, gap=gap)
    gap_end = at("2026-03-08T03:00", NY)
    found = next_occurrence(sched, gap_end - 1)
    assert found is not None
    assert (found.at_ms, found.local_iso) == (gap_end, "2026-03-08T03:00:00-04:00")
    assert found.skipped == (gap == GapPolicy.SKIP)


def test_after_inside_a_fold_resumes_at_the_second_pass() -> None:
    """Asked from between the two passes, a wildcard-hour job continues in the EST hour."""
    sched = CronSchedule("*/30 * * * *", NY)
    first_pass_0130 = at("2026-11-01T01:30", NY)
    found = next_occurrence(sched, first_pass_0130)
    assert found is not None
    assert found.local_iso == "2026-11-01T01:00:00-05:00"


def test_day_of_month_last_and_nth_weekday() -> None:
    """L is the last day of the month and MON#2 the second Monday (cronsim syntax)."""
    assert [f[0] for f in local_fires("0 9 L * *", "UTC", "2026-02-01T00:00", 2)] == [
        "2026-02-28T09:00:00+00:00",
        "2026-03-31T09:00:00+00:00",
    ]
    assert local_fires("0 9 * * MON#2", "UTC", "2026-06-01T00:00", 1)[0][0] == ("2026-06-08T09:00:00+00:00")


def test_one_time_fires_once_then_never() -> None:
    """OneTime(at) fires at at_ms when after_ms is earlier, and is None afterwards."""
    sched = OneTime(1_800_000_000_123)
    assert next_occurrence(sched, 0) == Occurrence(1_800_000_000_123, "2027-01-15T08:00:00.123+00:00", ())
    assert next_occurrence(sched, 1_800_000_000_123) is None
    assert occurrences(sched, 0, 5) == [next_occurrence(sched, 0)]


# ---------------------------------------------------------------------------
# Validation and bounds


@pytest.mark.parametrize(
    ("sched", "field", "fragment"),
    [
        (CronSchedule("0 0 * * *", "Mars/Olympus"), "tz", "unknown time zone"),
        (CronSchedule("0 0 * * *", "../../etc/passwd"), "tz", "unknown time zone"),
        (CronSchedule("0 0 * *"), "expr", "expected 5 or 6"),
        (CronSchedule("61 0 * * *"), "expr", "malformed"),
        (CronSchedule("H 0 * * *"), "expr", "malformed"),
        (CronSchedule("0 0 31 2 *"), "expr", "never fires"),
        (CronSchedule("0 0 0 31 4,6 *"), "expr", "never fires"),
        (CronSchedule("0 0 */9 * MON#5"), "expr", "never fires"),
        (CronSchedule("* " * 200), "expr", "at most"),
        (CronSchedule("0 0 * * *", gap="sometimes"), "gap", "unknown gap policy"),  # type: ignore[arg-type]
        (OneTime(-1), "at_ms", "outside"),
        (OneTime(10**20), "at_ms", "outside"),
        (OneTime(True), "at_ms", "integer"),
        (OneTime(1.5), "at_ms", "integer"),  # type: ignore[arg-type]
    ],
)
def test_validate_names_the_bad_field(sched: CronSchedule | OneTime, field: str, fragment: str) -> None:
    """Each invalid input raises ScheduleError with the field and a specific message."""
    with pytest.raises(ScheduleError) as caught:
        validate(sched)
    assert caught.value.field == field
    assert fragment in caught.value.message
    assert str(caught.value) == f"{field}: {caught.value.message}"


def test_validate_accepts_good_schedules() -> None:
    """Well-formed schedules validate silently, including names and 6 fields."""
    validate(OneTime(1_800_000_000_000))
    validate(CronSchedule("0 9 * JAN-MAR MON-FRI", NY))
    validate(CronSchedule("*/10 * * * * *", "Asia/Kolkata"), min_interval_ms=10_000)


def test_validate_rejects_an_interval_below_the_minimum() -> None:
    """*/5 * * * * fires every 300 s, below a 600 s minimum; 0,1 0 * * * twice a minute apart."""
    with pytest.raises(ScheduleError, match="fires 300s apart") as caught:
        validate(CronSchedule("*/5 * * * *"), min_interval_ms=600_000)
    assert caught.value.field == "expr"
    with pytest.raises(ScheduleError, match="fires 60s apart"):
        validate(CronSchedule("0,1 0 * * *", NY), min_interval_ms=3_600_000)
    validate(CronSchedule("0 0 * * *", NY), min_interval_ms=3_600_000)


def test_evaluation_is_bounded_for_rare_and_impossible_expressions() -> None:
    """A never-firing expression fails fast, and a once-in-28-years one still answers quickly."""
    began = time.perf_counter()
    with pytest.raises(ScheduleError, match="within 50 years") as caught:
        next_occurrence(CronSchedule("0 0 */9 * MON#5", NY), at("2026-01-01T00:00"))
    assert caught.value.field == "expr"
    rare = next_occurrence(CronSchedule("0 0 * 2 MON#5", NY), at("2016-03-01T00:00"))
    assert rare is not None
    assert rare.local_iso == "2044-02-29T00:00:00-05:00"
    assert time.perf_counter() - began < 5.0


def test_after_ms_outside_the_schedulable_range_is_rejected() -> None:
    """Cron evaluation refuses instants before 1900 or after 3000 instead of overflowing."""
    with pytest.raises(ScheduleError) as caught:
        next_occurrence(CronSchedule("0 0 * * *"), 40_000_000_000_000)
    assert caught.value.field == "after_ms"


# ---------------------------------------------------------------------------
# Offsets and tz version


def test_offset_is_deterministic_and_in_range() -> None:
    """Spread depends on the job only, jitter on job and occurrence; both within bounds."""
    assert offset_ms("job-1", 1_000, 60_000, 0) == offset_ms("job-1", 2_000, 60_000, 0)
    assert offset_ms("job-1", 1_000, 0, 0) == 0
    values = {offset_ms(f"job-{i}", 1_000, 60_000, 1_000) for i in range(200)}
    assert all(0 <= v < 61_000 for v in values)
    assert len(values) > 150  # spread out, not clustered
    jitters = {offset_ms("job-1", t, 0, 1_000) for t in range(0, 200_000, 1_000)}
    assert len(jitters) > 100
    assert offset_ms("job-1", 5, 7_000, 900) == offset_ms("job-1", 5, 7_000, 900)


def test_offset_rejects_negative_windows() -> None:
    """A negative spread or jitter window is an error naming the field."""
    with pytest.raises(ScheduleError) as caught:
        offset_ms("job", 0, -1, 0)
    assert caught.value.field == "spread_ms"


def test_offset_is_stable_across_releases() -> None:
    """The hash is blake2b with fixed personalisation: these values must never change."""
    assert offset_ms("job-1", 0, 60_000, 0) == offset_ms("job-1", 99, 60_000, 0)
    assert offset_ms("job-1", 0, 60_000, 0) == 53_627
    assert offset_ms("job-1", 0, 0, 60_000) == 59_349


def test_offset_changes_are_further_apart_than_the_probe_step() -> None:
    """Every zone's offset changes are > 1 day apart, so the daily transition probe sees all."""
    # The pure-Python zoneinfo exposes its transition list; the C one does not.
    python_zoneinfo = importlib.import_module("zoneinfo._zoneinfo").ZoneInfo
    closest = 10**9
    for key in resources.files("tzdata").joinpath("zones").read_text().split():
        with resources.files("tzdata").joinpath("zoneinfo", *key.split("/")).open("rb") as f:
            zone = python_zoneinfo.from_file(f, key=key)
        changes = [
            at
            for at, before, after in zip(
                zone._trans_utc, [zone._tti_before, *zone._ttinfos], zone._ttinfos, strict=False
            )
            if before is None or before.utcoff != after.utcoff
        ]
        closest = min([closest, *(b - a for a, b in itertools.pairwise(changes))])
    assert 86_400 < closest < 30 * 86_400  # the second bound shows the scan saw transitions


def test_tz_version_names_the_tzdata_release() -> None:
    """tz_version is an IANA release name such as 2026f."""
    version = tz_version()
    assert len(version) == 5
    assert version[:4].isdigit()
    assert version[4].isalpha()
