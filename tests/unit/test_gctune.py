"""tune_gc: a hot instant's burst of short-lived objects triggers no full collection."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from tickwheel.gctune import tune_gc


@pytest.fixture
def collections_by_generation() -> Iterator[list[int]]:
    """Counts the collector's passes per generation while the test runs; thresholds restored."""
    counts = [0, 0, 0]
    saved = gc.get_threshold()

    def count(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            counts[info["generation"]] += 1

    gc.collect()
    gc.callbacks.append(count)
    try:
        yield counts
    finally:
        gc.callbacks.remove(count)
        gc.set_threshold(*saved)


def _burst(n: int) -> list[object]:
    """What a hot instant does: many small containers, half freed at once, half kept (the
    processor's decoded states, a worker's held runs)."""
    live: list[object] = []
    for i in range(n):
        record = {"run_id": f"r-{i}", "attempt": 1, "flags": [i]}
        if i % 2 == 0:
            live.append(record)
    return live


def test_default_thresholds_run_full_passes_during_a_burst(collections_by_generation: list[int]) -> None:
    gc.set_threshold(700, 10, 10)  # CPython's defaults: the baseline this tuning changes
    _burst(1_000_000)
    assert collections_by_generation[2] > 0


def test_tuned_thresholds_run_no_full_pass_and_still_collect_young(
    collections_by_generation: list[int],
) -> None:
    tune_gc()
    _burst(1_000_000)
    assert collections_by_generation[2] == 0
    assert collections_by_generation[0] > 0  # young cycles are still reclaimed


def test_tuned_collector_still_reclaims_reference_cycles(collections_by_generation: list[int]) -> None:
    tune_gc()

    class Node:
        def __init__(self) -> None:
            self.me = self

    refs = [weakref.ref(Node()) for _ in range(200_000)]  # a cycle each: unreachable at once
    assert sum(ref() is None for ref in refs) > 150_000  # young passes found most of them
    assert collections_by_generation[2] == 0
