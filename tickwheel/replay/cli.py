"""``tickwheel replay export|state|why|verify``: a thin shell over :class:`Replayer`.

Every subcommand but ``export`` reads the live topics (``TICKWHEEL_*`` settings) or, with
``--in FILE``, an archive written by ``export``. Exit codes: 0 done (``verify``: clean),
1 ``verify`` found violations or Kafka could not be read, 2 bad input (an unparseable time,
an unknown job, an unreadable file), always with one line on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from tickwheel.replay.archive import ArchiveError, ExportHeader, format_of, read_archive, write_archive
from tickwheel.replay.describe import describe_schedule
from tickwheel.replay.live import read_topics, select_window
from tickwheel.replay.log import DEFAULT_ROLES, LogRecord, Role
from tickwheel.replay.progress import Progress, wanted
from tickwheel.replay.replayer import (
    DEFAULT_GRACE_MS,
    JobStateAt,
    Replayer,
    ReplayResult,
    Source,
    UnknownJobError,
)
from tickwheel.replay.times import TimeError, iso, parse_time
from tickwheel.settings import load

BAD_INPUT = 2
T = TypeVar("T")
TIME_HELP = "ISO 8601 with a zone (2026-03-08T07:00:00Z) or epoch milliseconds"


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "replay", help="incident forensics from the log: export, state at T, why, verify")
    commands = parser.add_subparsers(dest="replay_command", required=True, metavar="SUBCOMMAND")
    export = commands.add_parser("export", help="archive committed events to .avro or .jsonl")
    export.add_argument("--from", dest="from_", required=True, metavar="T1", help=TIME_HELP)
    export.add_argument("--to", required=True, metavar="T2", help=TIME_HELP)
    export.add_argument("--job", help="only this job's records")
    export.add_argument("--topics", nargs="+", choices=[r.value for r in Role],
                        default=[r.value for r in DEFAULT_ROLES], help="logical topic names")
    export.add_argument("--out", required=True, help="FILE.avro or FILE.jsonl")
    _common(export, with_input=False)
    export.set_defaults(func=_export)
    state = commands.add_parser("state", help="each job's state as of T (fold of the log)")
    state.add_argument("--at", required=True, metavar="T", help=TIME_HELP)
    state.add_argument("--job", help="only this job")
    state.add_argument("--json", action="store_true", help="machine-readable output")
    _common(state)
    state.set_defaults(func=_state)
    why = commands.add_parser("why", help="what happened to the job's occurrence nearest T")
    why.add_argument("job", metavar="JOB")
    why.add_argument("--at", required=True, metavar="T", help=TIME_HELP)
    why.add_argument("--json", action="store_true", help="machine-readable output")
    _common(why)
    why.set_defaults(func=_why)
    verify = commands.add_parser("verify", help="check the invariants; exit 1 unless clean")
    verify.add_argument("--from", dest="from_", required=True, metavar="T1", help=TIME_HELP)
    verify.add_argument("--to", required=True, metavar="T2", help=TIME_HELP)
    verify.add_argument("--report", help="write the JSON report here instead of stdout")
    _common(verify)
    verify.set_defaults(func=_verify)


def _common(parser: argparse.ArgumentParser, *, with_input: bool = True) -> None:
    if with_input:
        parser.add_argument("--in", dest="input", metavar="FILE",
                            help="read an export instead of the live topics")
        parser.add_argument("--grace-ms", type=int, default=DEFAULT_GRACE_MS,
                            help="time the processor may take to decide a due occurrence")
    parser.add_argument("--progress", action="store_true",
                        help="draw a progress bar on stderr even when it is not a terminal")


# -- subcommands ------------------------------------------------------------------------


def _export(args: argparse.Namespace) -> int:
    from_ms, to_ms = _time(args.from_), _time(args.to)
    out = Path(args.out)
    try:
        format_of(out)
    except ArchiveError as exc:
        raise _bad(str(exc)) from exc
    roles = [Role(name) for name in args.topics]
    read, read_at = _read_live(args, roles, args.job)
    records = select_window(read, from_ms, to_ms)
    if args.job is not None and not any(r.key == args.job.encode() for r in records):
        raise _bad(f"unknown job {args.job!r}: no record of it up to {iso(to_ms)}")
    header = ExportHeader(from_ms, to_ms, args.job, tuple(args.topics),
                          complete_until_ms=min(to_ms, read_at))
    try:
        count = write_archive(out, records, header)
    except ArchiveError as exc:
        raise _bad(str(exc)) from exc
    print(f"exported {count} records ({', '.join(args.topics)}) to {out}")
    return 0


def _state(args: argparse.Namespace) -> int:
    at_ms = _time(args.at)
    result = _replay(args, args.job)
    report = _ask(lambda: result.state_at(at_ms, args.job))
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
    else:
        print(f"state as of {iso(at_ms)} ({len(report.jobs)} job(s))")
        for job in report.jobs:
            print(_state_text(job))
    return 0


def _why(args: argparse.Namespace) -> int:
    at_ms = _time(args.at)
    result = _replay(args, args.job)
    explanation = _ask(lambda: result.why(args.job, at_ms))
    print(json.dumps(explanation.to_json(), indent=2) if args.json else explanation.render())
    return 0


def _verify(args: argparse.Namespace) -> int:
    from_ms, to_ms = _time(args.from_), _time(args.to)
    report = _replay(args, None).verify(from_ms, to_ms)
    text = json.dumps(report.to_json(), indent=2)
    if args.report:
        try:
            Path(args.report).write_text(text + "\n", encoding="utf-8")
        except OSError as exc:
            raise _bad(f"{args.report}: cannot write the report: {exc.strerror or exc}") from exc
        verdict = "clean" if report.clean else f"{len(report.violations)} violation(s)"
        print(f"verify {iso(from_ms)} .. {iso(to_ms)}: {verdict}; report in {args.report}")
    else:
        print(text)
    return 0 if report.clean else 1


# -- shared -----------------------------------------------------------------------------


def _replay(args: argparse.Namespace, job_id: str | None) -> ReplayResult:
    if args.input:
        try:
            header, records = read_archive(Path(args.input))
        except ArchiveError as exc:
            raise _bad(str(exc)) from exc
        source = Source(grace_ms=args.grace_ms, end_ms=header.complete_until_ms)
    else:
        records, read_at = _read_live(args, list(DEFAULT_ROLES), job_id)
        source = Source(prefix=load().topic_prefix, grace_ms=args.grace_ms, end_ms=read_at)
    progress = Progress(len(records), "replaying") if wanted(args.progress) else None
    try:
        return Replayer(source).replay(records, progress=progress)
    finally:
        if progress is not None:
            progress.close()


def _read_live(
    args: argparse.Namespace, roles: list[Role], job_id: str | None
) -> tuple[list[LogRecord], int]:
    """The committed records, and the wall-clock time the read began (the log's known end)."""
    from tickwheel.cli import CliError

    settings = load()
    read_at = time.time_ns() // 1_000_000
    progress = Progress(0, "reading", unit="offsets") if wanted(args.progress) else None
    try:
        records = asyncio.run(read_topics(settings, roles, job_id=job_id, progress=progress))
    except Exception as exc:
        reason = f"{type(exc).__name__}: {exc}".splitlines()[0]
        raise CliError(f"cannot read the log from Kafka at {settings.bootstrap_servers}: {reason}") from exc
    finally:
        if progress is not None:
            progress.close()
    return records, read_at


def _ask(question: Callable[[], T]) -> T:
    try:
        return question()
    except UnknownJobError as exc:
        raise _bad(str(exc)) from exc


def _time(text: str) -> int:
    try:
        return parse_time(text)
    except TimeError as exc:
        raise _bad(str(exc)) from exc


def _bad(message: str) -> Exception:
    from tickwheel.cli import CliError

    return CliError(message, code=BAD_INPUT)


def _state_text(job: JobStateAt) -> str:
    state = job.state
    check = {None: "no changelog record yet", True: "agrees with changelog",
             False: "DIFFERS from changelog"}[job.agrees]
    where = f" {job.changelog}" if job.changelog is not None else ""
    if state is None:
        return f"- {job.job_id}: absent (not created yet, or deleted); {check}{where}"
    lines = [
        f"- {job.job_id}: {state.status.value} v{state.version}, "
        f"{describe_schedule(state.spec.schedule)}; {check}{where}",
        f"    next occurrence {iso(state.next_fire_ms)}, last decided {iso(state.last_scheduled_ms)}"
        + (f", buffered {list(state.buffered)}" if state.buffered else ""),
    ]
    lines += [f"    run {r.run_id} attempt {r.attempt} {r.status.value}"
              + (f" on {r.worker_id}" if r.worker_id else "") for r in state.runs]
    lines += [f"    difference: {d}" for d in job.differences]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run ``tickwheel replay`` on its own (the lead wires ``register`` into ``tickwheel``)."""
    from tickwheel.cli import CliError

    parser = argparse.ArgumentParser(prog="tickwheel")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    try:
        code: int = args.func(args)
    except CliError as exc:
        print(f"tickwheel replay: {exc}", file=sys.stderr)
        return exc.code
    return code


if __name__ == "__main__":
    sys.exit(main())
