"""``tickwheel bench <name> [--json] [--quick] [options]``: run one benchmark from ``bench/``.

Each benchmark is a module ``bench/<name>.py`` with ``main(argv) -> int``; the name on the
command line may use dashes for the module's underscores (``hot-instant`` runs
``bench/hot_instant.py``). The ``bench`` folder sits beside the ``tickwheel`` package in the
repository and is not installed with it, so the repository root is put on ``sys.path``.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
BENCH_DIR = REPO_ROOT / "bench"
# Modules in bench/ that are support code rather than benchmarks.
_NOT_BENCHMARKS = frozenset({"common"})


def available(bench_dir: Path = BENCH_DIR) -> list[str]:
    """The benchmark names, as typed on the command line, sorted."""
    return sorted(
        path.stem.replace("_", "-")
        for path in bench_dir.glob("*.py")
        if not path.stem.startswith("_") and path.stem not in _NOT_BENCHMARKS
    )


def module_name(name: str, names: list[str]) -> str:
    """The importable module for a benchmark name; ValueError naming the choices if unknown."""
    wanted = name.replace("_", "-")
    if wanted not in names:
        choices = ", ".join(names) or "none found"
        raise ValueError(f"unknown benchmark {name!r} (available: {choices})")
    return "bench." + wanted.replace("-", "_")


def bench_argv(args: argparse.Namespace) -> list[str]:
    """The options for the benchmark's own ``main``, wherever they stood on the line."""
    shared = [flag for flag, on in (("--json", args.json), ("--quick", args.quick)) if on]
    return [*shared, *args.bench_args]


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "bench",
        help="run a benchmark from bench/ (tickwheel bench <name> --help for its options)",
        description=__doc__.splitlines()[0] if __doc__ else None,
    )
    parser.add_argument("name", help="benchmark: " + (", ".join(available()) or "none found"))
    parser.add_argument("--json", action="store_true", help="print JSON instead of the table")
    parser.add_argument("--quick", action="store_true", help="a short smoke run")
    # Everything after the name goes to the benchmark, which parses its own options.
    parser.add_argument("bench_args", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    parser.set_defaults(func=_cli)


def _cli(args: argparse.Namespace) -> int:
    from tickwheel.cli import CliError

    try:
        module = module_name(args.name, available())
    except ValueError as exc:
        raise CliError(str(exc), code=2) from exc
    if str(REPO_ROOT) not in sys.path:
        sys.path.insert(0, str(REPO_ROOT))
    main = getattr(importlib.import_module(module), "main", None)
    if not callable(main):
        raise CliError(f"{module} has no main(argv) function")
    code = main(bench_argv(args))
    return int(code) if code is not None else 0
