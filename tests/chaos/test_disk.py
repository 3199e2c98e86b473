"""A full disk under RocksDB: the processor's state dir on a small tmpfs that the test fills.

The commit protocol writes RocksDB only after the Kafka commit (processor.py, step 6), with
the changelog offset in the same batch, so a store write that fails with ENOSPC loses
nothing: the task restarts and restores from the changelog. The checker asserts that, and
that the store recovered after the disk is freed equals the changelog (invariant 6).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.chaos.checker import check
from tests.chaos.conftest import Scale
from tests.chaos.faults import Fleet, can_mount, fill, tmpfs, unfill
from tests.chaos.recorder import Recorder
from tests.chaos.scenario import (
    deploy,
    every_second_jobs,
    now_ms,
    one_time_jobs,
    recover_and_read_stores,
    run_ids,
    wait_dispatched,
)

pytestmark = [pytest.mark.broker, pytest.mark.timeout(600)]


async def test_full_disk_under_rocksdb_loses_nothing_and_recovers_the_changelog_state(
    bootstrap: str, tmp_path: Path, scale: Scale, chaos_report: Callable[..., None]
) -> None:
    """Fault: the processor's RocksDB lives on a 32 MiB tmpfs that is filled to ENOSPC while
    every-second jobs and a hot instant fire, then freed. Checker: nothing lost or duplicated,
    no aborted read, the state recovered after the disk is freed equals the changelog and the
    fold of the log."""
    reason = can_mount()
    if reason is not None:
        pytest.skip(reason)
    deployment = await deploy(bootstrap, tmp_path, 2)
    fleet = Fleet(deployment)
    recorder = Recorder(deployment.settings)
    hot = one_time_jobs("hot", 1_000, now_ms() + 9_000)
    with tmpfs(tmp_path / "disk", "32m") as disk:
        try:
            async with recorder.tailing():
                await recorder.submit([*every_second_jobs("cron", 10), *hot])
                fleet.processor("p", home=disk / "home")
                await asyncio.sleep(5)
                filled = fill(disk)
                await asyncio.sleep(12)  # the hot instant fires while RocksDB cannot write
                unfill(disk)
                await asyncio.sleep(3)
                crashed = not fleet.live("processor")
                if crashed:  # a supervisor would restart it; so do we
                    fleet.processor("p-again", home=disk / "home")
                missing = await wait_dispatched(deployment.settings, run_ids(hot), 60)
                await asyncio.sleep(3)
                fleet.stop_all()
            assert not missing, fleet.logs()
            stores = await recover_and_read_stores(fleet, disk / "home", partitions=2)
            history = await recorder.finish()
        finally:
            fleet.stop_all()
    result = check(history, stores=stores)
    chaos_report("full disk (RocksDB ENOSPC)", 1, result, filled_bytes=filled)
    assert result.problems() == {}, result.explain() + "\n" + fleet.logs()
    assert "No space left on device" in fleet.logs(tail=1_000_000), "the disk never filled up"
    # Liveness too: a failing store restarts its task, never the whole processor (this was a
    # defect the scenario found: ENOSPC from RocksDB's close() escaped Processor.run).
    assert not crashed, fleet.logs()
