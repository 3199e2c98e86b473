"""``tickwheel preview``: show when a schedule fires, with its DST decisions and offsets.

The shell around :mod:`tickwheel.streams.schedule`: it reads the clock (only for the
default ``--after``), parses options and prints. Every bad input is one line on stderr and
exit code 2, naming the offending option.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, NoReturn

from tickwheel.schemas.model import CronSchedule, FoldPolicy, GapPolicy, OneTime, Schedule
from tickwheel.streams.schedule import (
    Occurrence,
    ScheduleError,
    occurrences,
    offset_ms,
    tzinfo_for,
    validate,
)

MAX_COUNT = 1000
_BAD_INPUT = 2
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_MS = timedelta(milliseconds=1)


@dataclass(frozen=True, slots=True)
class _Offsets:
    job_id: str
    spread_ms: int
    jitter_ms: int


def register(subparsers: Any) -> None:  # argparse's subparsers action has no public type
    """Add the ``preview`` subcommand."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "preview",
        help="show the next fire times of a schedule",
        description=__doc__.splitlines()[0] if __doc__ else None,
    )
    parser.add_argument("--cron", metavar="EXPR", help="5- or 6-field cron expression")
    parser.add_argument("--at", metavar="ISO", help="one-time instant instead of --cron")
    parser.add_argument("--tz", default="UTC", metavar="ZONE", help="IANA zone (default UTC)")
    parser.add_argument(
        "--after", metavar="ISO8601", help="start after this (default now; naive = in --tz)"
    )
    parser.add_argument("--count", default="10", metavar="N", help=f"fires (1..{MAX_COUNT})")
    parser.add_argument("--gap", choices=[p.value for p in GapPolicy], default="shift")
    parser.add_argument("--fold", choices=[p.value for p in FoldPolicy], default="first")
    parser.add_argument("--job-id", metavar="ID", help="show spread/jitter offsets of this job")
    parser.add_argument("--spread-seconds", default="0", metavar="S")
    parser.add_argument("--jitter-seconds", default="0", metavar="S")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    # argparse's own errors print usage plus a message; the contract is one line.
    parser.error = _one_line_error  # type: ignore[method-assign]
    parser.set_defaults(func=run)


def _one_line_error(message: str) -> NoReturn:
    print(f"tickwheel preview: {message}", file=sys.stderr)
    raise SystemExit(_BAD_INPUT)


def run(args: argparse.Namespace) -> int:
    """Print the next fires; bad input prints one line on stderr and returns 2."""
    try:
        sched = _schedule(args)
        after_ms = _after_ms(args.after, args.tz)
        count = _count(args.count)
        offsets = _offsets(args)
        validate(sched)
        fires = occurrences(sched, after_ms, count)
    except ScheduleError as exc:
        # Printed here rather than raised as CliError: under ``python -m tickwheel.cli`` that
        # module runs as __main__, so its CliError is not the class this module imports.
        print(f"tickwheel preview: {exc.field}: {exc.message}", file=sys.stderr)
        return _BAD_INPUT
    rows = [_row(o, sched, args.tz, offsets) for o in fires]
    if args.json:
        print(json.dumps({"fires": rows}))
    for row in [] if args.json else rows:
        print(_line(row))
    return 0


def _schedule(args: argparse.Namespace) -> Schedule:
    if (args.cron is None) == (args.at is None):
        raise ScheduleError("cron", "give exactly one of --cron EXPR or --at ISO")
    tzinfo_for(args.tz)  # an unknown zone is reported as such, also for --at
    if args.at is not None:
        return OneTime(_instant_ms("at", args.at, args.tz))
    return CronSchedule(args.cron, args.tz, GapPolicy(args.gap), FoldPolicy(args.fold))


def _after_ms(text: str | None, tz: str) -> int:
    if text is None:
        return int(datetime.now(UTC).timestamp() * 1000)
    return _instant_ms("after", text, tz)


def _instant_ms(field: str, text: str, tz: str) -> int:
    """ISO 8601 with offset or ``Z`` is absolute; naive is wall time in ``tz`` (fold=0)."""
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise ScheduleError(field, f"not an ISO 8601 date-time: {text!r}") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=tzinfo_for(tz))
    return (parsed - _EPOCH) // _ONE_MS


def _count(text: str) -> int:
    try:
        count = int(text)
    except ValueError:
        raise ScheduleError("count", f"not an integer: {text!r}") from None
    if not 1 <= count <= MAX_COUNT:
        raise ScheduleError("count", f"must be between 1 and {MAX_COUNT}, got {count}")
    return count


def _offsets(args: argparse.Namespace) -> _Offsets | None:
    spread = _seconds_ms("spread-seconds", args.spread_seconds)
    jitter = _seconds_ms("jitter-seconds", args.jitter_seconds)
    if args.job_id is None:
        if spread or jitter:
            raise ScheduleError("job-id", "--spread-seconds and --jitter-seconds need --job-id")
        return None
    return _Offsets(args.job_id, spread, jitter)


def _seconds_ms(field: str, text: str) -> int:
    try:
        seconds = float(text)
    except ValueError:
        raise ScheduleError(field, f"not a number of seconds: {text!r}") from None
    if not 0 <= seconds <= 86_400:  # also rejects nan and inf
        raise ScheduleError(field, f"must be between 0 and 86400, got {text}")
    return round(seconds * 1000)


def _row(o: Occurrence, sched: Schedule, tz: str, offsets: _Offsets | None) -> dict[str, Any]:
    # A one-time instant carries no zone of its own; show it in --tz like the rest.
    local = _local_in(o.at_ms, tz) if isinstance(sched, OneTime) else o.local_iso
    row: dict[str, Any] = {"local": local, "utc": _utc_iso(o.at_ms), "flags": list(o.flags)}
    if o.skipped:
        row["skipped"] = True
    elif offsets is not None:
        delay = offset_ms(offsets.job_id, o.at_ms, offsets.spread_ms, offsets.jitter_ms)
        row["fire_utc"] = _utc_iso(o.at_ms + delay)
    return row


def _line(row: dict[str, Any]) -> str:
    parts = [row["local"], row["utc"]]
    if "fire_utc" in row:
        parts.append(f"fire {row['fire_utc']}")
    if row.get("skipped"):
        parts.append("SKIPPED")
    parts.extend(row["flags"])
    return "  ".join(parts)


def _local_in(at_ms: int, tz: str) -> str:
    moment = (_EPOCH + at_ms * _ONE_MS).astimezone(tzinfo_for(tz))
    return moment.isoformat(timespec="milliseconds" if at_ms % 1000 else "seconds")


def _utc_iso(at_ms: int) -> str:
    moment = _EPOCH + at_ms * _ONE_MS
    text = moment.isoformat(timespec="milliseconds" if at_ms % 1000 else "seconds")
    return text.removesuffix("+00:00") + "Z"
