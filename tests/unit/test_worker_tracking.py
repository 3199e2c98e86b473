"""Worker bookkeeping: committable offsets, dedupe memory, cancel memory, config parsing."""

from __future__ import annotations

import pytest

from tickwheel.workers.config import WorkerConfig
from tickwheel.workers.tracking import CancelMemory, OffsetLedger, RecentSet


def test_commit_point_stops_at_the_oldest_unleased_run() -> None:
    """The committable offset is min(held offsets, position); it moves as leases are acked."""
    ledger: OffsetLedger[str] = OffsetLedger()
    ledger.hold("p0", 5)
    ledger.hold("p0", 8)
    ledger.consumed("p0", 12)
    assert ledger.to_commit() == {"p0": 5}
    ledger.committed("p0", 5)
    assert ledger.to_commit() == {}
    ledger.release("p0", 5)
    assert ledger.to_commit() == {"p0": 8}
    ledger.release("p0", 8)
    assert ledger.commit_point("p0") == 12


def test_reassignment_relearns_position_and_forget_drops_held() -> None:
    """After a rebalance nothing commits until the position is known; lost partitions are forgotten."""
    ledger: OffsetLedger[str] = OffsetLedger()
    ledger.hold("p0", 3)
    ledger.consumed("p0", 9)
    ledger.reset("p0")
    assert ledger.commit_point("p0") is None
    ledger.consumed("p0", 2)  # re-seeked to the committed offset, below the held record
    assert ledger.commit_point("p0") == 2
    ledger.forget("p0")
    ledger.consumed("p0", 4)
    assert ledger.commit_point("p0") == 4
    assert ledger.held("p0") == 0


def test_recent_set_is_bounded_lru() -> None:
    """Dedupe memory keeps the last N attempts."""
    recent: RecentSet[tuple[str, int]] = RecentSet(2)
    for key in [("a", 1), ("b", 1), ("a", 1), ("c", 1)]:
        recent.add(key)
    assert ("a", 1) in recent
    assert ("c", 1) in recent
    assert ("b", 1) not in recent


def test_cancel_covers_its_attempt_and_older_only() -> None:
    """RunCancelled(attempt n) cancels attempts <= n; the re-dispatched n+1 is not cancelled."""
    cancels = CancelMemory(10)
    cancels.record("r", 2)
    assert cancels.cancelled("r", 1)
    assert cancels.cancelled("r", 2)
    assert not cancels.cancelled("r", 3)
    assert not cancels.cancelled("other", 1)


def test_worker_config_from_env() -> None:
    """TICKWHEEL_WORKER_* variables are parsed; flags override; bad values name the variable."""
    env = {
        "TICKWHEEL_WORKER_POOLS": "gpu, default",
        "TICKWHEEL_WORKER_TEAM_LIMITS": '{"team-a": 10}',
        "TICKWHEEL_WORKER_SSRF_ALLOW": "127.0.0.1,10.0.0.0/8",
        "TICKWHEEL_WORKER_CONTAINER_RUNTIME": '["docker", "run", "--rm"]',
        "TICKWHEEL_WORKER_CONCURRENCY": "4",
        "TICKWHEEL_WORKER_ID": "from-env",
    }
    config = WorkerConfig.from_env(env, concurrency=8, worker_id="w1")
    assert config.pools == ("gpu", "default")
    assert config.team_limits == {"team-a": 10}
    assert config.ssrf_allow == ("127.0.0.1", "10.0.0.0/8")
    assert config.container_runtime[0] == "docker"
    assert (config.concurrency, config.worker_id) == (8, "w1")
    assert WorkerConfig.from_env(env).worker_id == "from-env"
    with pytest.raises(ValueError, match="TICKWHEEL_WORKER_TEAM_LIMITS"):
        WorkerConfig.from_env({"TICKWHEEL_WORKER_TEAM_LIMITS": "[1]"})
    with pytest.raises(ValueError, match="concurrency must be >= 1"):
        WorkerConfig.from_env({}, concurrency=0)
