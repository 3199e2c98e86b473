"""Per-team concurrency: share arithmetic across a pool's workers, and the gate that enforces it."""

from __future__ import annotations

import asyncio

from hypothesis import given, settings
from hypothesis import strategies as st

from tickwheel.workers.tenancy import Slots, TeamGate, team_share


def test_share_is_proportional_to_assigned_partitions() -> None:
    """floor(limit * assigned / total), at least 1 with any partition, 0 with none."""
    assert team_share(10, 6, 12) == 5
    assert team_share(10, 12, 12) == 10
    assert team_share(10, 1, 12) == 1  # floor 0, raised to 1
    assert team_share(10, 0, 12) == 0
    assert team_share(3, 5, 12) == 1


@settings(max_examples=200, deadline=None)
@given(
    limit=st.integers(min_value=1, max_value=50),
    sizes=st.lists(st.integers(min_value=0, max_value=12), min_size=1, max_size=12),
)
def test_shares_of_disjoint_assignments_stay_within_the_documented_bound(
    limit: int, sizes: list[int]
) -> None:
    """Summed over members, shares are <= limit plus one per member whose floor was 0."""
    total = sum(sizes)
    if total == 0:
        return
    shares = [team_share(limit, size, total) for size in sizes]
    floored_to_zero = sum(1 for size in sizes if size and limit * size // total == 0)
    assert sum(shares) <= limit + floored_to_zero
    if floored_to_zero == 0:
        assert sum(shares) <= limit


async def test_gate_holds_runs_over_the_share_until_a_slot_frees() -> None:
    """A team at its share waits; other teams and unlimited teams pass; release admits the next."""
    gate = TeamGate({"team-a": 4})
    gate.set_assignment(6, 12)  # share 2
    order: list[str] = []
    release = asyncio.Event()

    async def run(team: str, name: str) -> None:
        async with gate.slot(team):
            order.append(name)
            await release.wait()

    tasks = [asyncio.create_task(run("team-a", f"a{i}")) for i in range(3)]
    tasks.append(asyncio.create_task(run("team-b", "b0")))
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert sorted(order) == ["a0", "a1", "b0"]
    assert gate.in_use["team-a"] == 2
    release.set()
    await asyncio.gather(*tasks)
    assert order[-1] == "a2"
    assert gate.in_use["team-a"] == 0


async def test_gate_follows_rebalances() -> None:
    """A larger assignment widens the share and wakes waiters; no assignment admits nothing."""
    gate = TeamGate({"team-a": 12})
    entered = asyncio.Event()

    async def run() -> None:
        async with gate.slot("team-a"):
            entered.set()

    task = asyncio.create_task(run())
    await asyncio.sleep(0)
    assert not entered.is_set()  # no partitions yet: share 0
    gate.set_assignment(3, 12)
    await asyncio.wait_for(task, 1)
    assert entered.is_set()


async def test_cancelled_waiter_takes_no_slot() -> None:
    """A run cancelled while waiting for its team's slot leaves the count untouched."""
    gate = TeamGate({"team-a": 1})
    gate.set_assignment(1, 1)
    async with gate.slot("team-a"):
        waiter = asyncio.create_task(gate.slot("team-a").__aenter__())
        await asyncio.sleep(0)
        waiter.cancel()
        await asyncio.gather(waiter, return_exceptions=True)
    assert gate.in_use["team-a"] == 0


async def test_slots_hand_each_release_to_the_longest_waiter() -> None:
    """Worker slots never exceed their count and are handed over first come, first served."""
    slots = Slots(2)
    order: list[int] = []
    gate = asyncio.Event()

    async def run(i: int) -> None:
        async with slots:
            order.append(i)
            await gate.wait()

    tasks = [asyncio.create_task(run(i)) for i in range(6)]
    for _ in range(5):
        await asyncio.sleep(0)
    assert order == [0, 1]
    gate.set()
    await asyncio.wait_for(asyncio.gather(*tasks), 5)
    assert order == list(range(6))


async def test_a_waiter_that_gives_up_does_not_lose_a_slot() -> None:
    """A cancelled waiter is skipped, and one cancelled just after being handed a slot passes it on."""
    slots = Slots(1)
    await slots.acquire()
    skipped = asyncio.create_task(slots.acquire())
    handed = asyncio.create_task(slots.acquire())
    last = asyncio.create_task(slots.acquire())
    await asyncio.sleep(0)
    skipped.cancel()
    await asyncio.sleep(0)
    slots.release()  # goes past the cancelled waiter to `handed`...
    handed.cancel()  # ...which gives up before it could run: the slot must reach `last`
    await asyncio.wait_for(last, 5)
    assert skipped.cancelled()
    assert handed.cancelled()
    slots.release()
    await asyncio.wait_for(slots.acquire(), 5)  # exactly one slot again, not two or none
    assert not await _acquires_at_once(slots)


async def _acquires_at_once(slots: Slots) -> bool:
    attempt = asyncio.create_task(slots.acquire())
    for _ in range(3):
        await asyncio.sleep(0)
    attempt.cancel()
    return attempt.done() and not attempt.cancelled()


async def test_a_team_without_a_limit_takes_no_team_slot() -> None:
    """Only teams with a limit are counted; the others pass straight through."""
    gate = TeamGate({"capped": 1})
    gate.set_assignment(1, 1)
    async with gate.slot("free"), gate.slot("free"):
        assert gate.in_use["free"] == 0
    async with gate.slot("capped"):
        assert gate.in_use["capped"] == 1
