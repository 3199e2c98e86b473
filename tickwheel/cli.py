"""The ``tickwheel`` console entry point.

Each service or tool owns a module exposing ``register(subparsers)``, which adds its
subcommand and sets ``func`` on the parser to a callable taking the parsed namespace and
returning the process exit code. Exit codes: 0 success, 1 operational failure (the
message says what), 2 bad input (argparse's convention).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

# Modules that register subcommands; imported lazily so `tickwheel --help` stays fast.
_COMMAND_MODULES = (
    "tickwheel.localbroker",
    "tickwheel.topics",
    "tickwheel.streams.preview",
    "tickwheel.streams.runtime",
    "tickwheel.benchcli",
    "tickwheel.up",
    "tickwheel.echo",
    "tickwheel.workers.cli",
    "tickwheel.projections.cli",
    "tickwheel.gateway.cli",
    "tickwheel.jobs_cli",
    "tickwheel.replay.cli",
    "tickwheel.chaos",
)


class CliError(Exception):
    """A failure to report as one line on stderr with an exit code."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line on stderr (and exit code 2), not a usage dump."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="tickwheel", description=__doc__.splitlines()[0])
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in _COMMAND_MODULES:
        module = importlib.import_module(name)
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    func: Callable[[argparse.Namespace], int] = args.func
    try:
        return func(args)
    except CliError as exc:
        print(f"tickwheel {args.command}: {exc}", file=sys.stderr)
        return exc.code
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    # Run through the imported module, so that CliError raised by the command modules (which
    # import tickwheel.cli) is the class main() catches, not a second copy in __main__.
    from tickwheel.cli import main as _main

    sys.exit(_main())
