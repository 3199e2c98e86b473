"""Chaos suite fixtures: the scale of a run, the figures table, and the slow-test gate.

``TICKWHEEL_CHAOS_SCALE=small`` (the default) runs every scenario for a few cycles inside
the CI budget; ``large`` runs the counts of issue #7 (``tickwheel chaos --scale large``).
Tests marked ``slow`` run only with ``TICKWHEEL_SLOW=1`` (the large command sets it).
Each scenario reports its figures with the ``chaos_report`` fixture; they are printed at the
end of the session and, with ``TICKWHEEL_CHAOS_REPORT=<file>``, appended there as JSON lines.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.chaos.checker import CheckResult

_ROWS: list[dict[str, Any]] = []


@dataclass(frozen=True)
class Scale:
    """How many cycles of each fault one run injects."""

    name: str
    failpoint_cycles: int  # per processor failpoint
    hot_instant_runs: int
    processor_kills: int  # random SIGKILLs during the hot instant
    zombie_cycles: int
    worker_kills: int
    worker_runs: int
    broker_restarts: int
    partitions: int
    partition_seconds: tuple[int, int]
    cancels: int
    seed: int


SMALL = Scale("small", 1, 2_000, 2, 2, 4, 60, 2, 2, (12, 15), 100, 7)
LARGE = Scale("large", 20, 100_000, 100, 50, 200, 2_000, 10, 50, (5, 60), 1_000, 7)
LARGE_TIMEOUT_S = 4 * 3600


def current_scale() -> Scale:
    name = os.environ.get("TICKWHEEL_CHAOS_SCALE", "small")
    seed = int(os.environ.get("TICKWHEEL_CHAOS_SEED", "7"))
    base = LARGE if name == "large" else SMALL
    return Scale(**{**base.__dict__, "seed": seed})


@pytest.fixture(scope="session")
def scale() -> Scale:
    """The scale of this run (small unless TICKWHEEL_CHAOS_SCALE=large)."""
    return current_scale()


@pytest.fixture
def chaos_report() -> Callable[..., None]:
    """Record one scenario's figures: ``chaos_report(scenario, cycles, result, **extra)``."""

    def report(scenario: str, cycles: int, result: CheckResult, **extra: Any) -> None:
        row = {"scenario": scenario, "cycles": cycles, **result.row(), **result.problems(), **extra,
               "info": dict(result.info)}
        _ROWS.append(row)
        target = os.environ.get("TICKWHEEL_CHAOS_REPORT")
        if target:
            with Path(target).open("a") as out:
                out.write(json.dumps(row) + "\n")

    return report


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if current_scale().name == "large":
        # The scenarios' timeouts fit the small scale; a large run is bounded by its counts.
        for item in items:
            if "tests/chaos" in str(item.fspath):
                item.add_marker(pytest.mark.timeout(LARGE_TIMEOUT_S))
    if os.environ.get("TICKWHEEL_SLOW") == "1":
        return
    skip = pytest.mark.skip(reason="slow: set TICKWHEEL_SLOW=1 (tickwheel chaos --scale large)")
    for item in items:
        if "slow" in item.keywords and "tests/chaos" in str(item.fspath):
            item.add_marker(skip)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not _ROWS:
        return
    terminalreporter.section("chaos figures")
    head = f"{'scenario':<34}{'cycles':>7}{'runs':>8}{'lost':>6}{'dup':>5}{'2x eff':>7}{'cancel':>7}"
    terminalreporter.write_line(head)
    for row in _ROWS:
        terminalreporter.write_line(
            f"{row['scenario']:<34}{row['cycles']:>7}{row['runs']:>8}{row['lost']:>6}"
            f"{row['duplicate']:>5}{row['double_effects']:>7}{row['starts_after_cancel']:>7}"
        )
