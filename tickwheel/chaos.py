"""``tickwheel chaos --scale small|large``: run the fault-injection suite and print its figures.

The scenarios live in ``tests/chaos`` of the source tree (they need its test harness and
a broker the suite starts itself); this command runs them with pytest at the chosen scale
and prints one table row per scenario (cycles, runs, lost, duplicate, double effects,
starts after cancel), which is what ``docs/design.md`` records for the large run.

``small`` is what the default test run does; ``large`` uses the counts of issue #7 and takes
hours on a two-core machine. ``-k`` selects scenarios by pytest expression.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

SOURCE_ROOT = Path(__file__).resolve().parent.parent
COLUMNS = ("scenario", "cycles", "runs", "lost", "duplicate", "double_effects", "starts_after_cancel")


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("chaos", help="run the fault-injection suite and print its figures")
    parser.add_argument("--scale", choices=("small", "large"), default="small")
    parser.add_argument("--seed", type=int, default=7, help="random seed of the fault schedule")
    parser.add_argument("-k", dest="select", default=None, help="pytest -k expression selecting scenarios")
    parser.add_argument("--report", type=Path, default=None, help="also keep the figures here (JSON lines)")
    parser.set_defaults(func=_cli)


def _cli(args: argparse.Namespace) -> int:
    from tickwheel.cli import CliError

    suite = SOURCE_ROOT / "tests" / "chaos"
    if not suite.is_dir():
        raise CliError(f"the chaos suite is not here ({suite}); run from a source checkout", 2)
    with tempfile.TemporaryDirectory(prefix="tickwheel-chaos-") as scratch:
        report = args.report or Path(scratch) / "figures.jsonl"
        code = subprocess.call(_argv(suite, args.select), cwd=SOURCE_ROOT, env=_env(args, report))
        rows = read_rows(report)
    sys.stdout.write(table(rows) + "\n")
    return code


def _argv(suite: Path, select: str | None) -> list[str]:
    argv = [sys.executable, "-m", "pytest", str(suite), "-q", "-p", "no:cacheprovider"]
    return [*argv, "-k", select] if select else argv


def _env(args: argparse.Namespace, report: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["TICKWHEEL_CHAOS_SCALE"] = args.scale
    env["TICKWHEEL_CHAOS_SEED"] = str(args.seed)
    env["TICKWHEEL_CHAOS_REPORT"] = str(report)
    if args.scale == "large":
        env["TICKWHEEL_SLOW"] = "1"
    return env


def read_rows(report: Path) -> list[dict[str, Any]]:
    """The scenario rows the suite appended to ``report`` (none if it wrote nothing)."""
    if not report.exists():
        return []
    return [json.loads(line) for line in report.read_text().splitlines() if line.strip()]


def table(rows: list[dict[str, Any]]) -> str:
    """A Markdown table of the figures, one row per scenario."""
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(str(row.get(column, "")) for column in COLUMNS) + " |" for row in rows]
    return "\n".join(lines)
