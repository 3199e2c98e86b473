"""``?wait=committed``: the waiter against a fake answer source, driven by hand (no sleeps)."""

from __future__ import annotations

import asyncio

import pytest

from tickwheel.gateway.handlers import api_field, rejection
from tickwheel.gateway.waiting import CommandWaiter
from tickwheel.projections.views import CommandAnswer


class Answers:
    """A fake answer source: answers appear when the test says so; lookups are counted."""

    def __init__(self) -> None:
        self.known: dict[str, CommandAnswer] = {}
        self.lookups: list[list[str]] = []

    async def __call__(self, command_ids: list[str]) -> dict[str, CommandAnswer]:
        self.lookups.append(sorted(command_ids))
        return {c: self.known[c] for c in command_ids if c in self.known}

    def answer(self, command_id: str, outcome: str = "accepted") -> CommandAnswer:
        self.known[command_id] = CommandAnswer(command_id, "job", outcome, 1)
        return self.known[command_id]


async def _settle() -> None:
    """Let started tasks run up to their next await on a future."""
    for _ in range(5):
        await asyncio.sleep(0)


async def test_answer_already_present_returns_at_once() -> None:
    """A command answered before the wait began is returned by the first lookup."""
    source = Answers()
    expected = source.answer("c1")
    waiter = CommandWaiter(source, interval_s=60)
    assert await waiter.wait("c1", timeout_s=60) == expected
    assert waiter.pending == 0


async def test_answer_arriving_later_resolves_every_waiter_with_one_lookup() -> None:
    """Waiters registered for pending commands are all resolved by one batched poll."""
    source = Answers()
    waiter = CommandWaiter(source, interval_s=60)
    first = asyncio.create_task(waiter.wait("c1", timeout_s=60))
    second = asyncio.create_task(waiter.wait("c1", timeout_s=60))
    third = asyncio.create_task(waiter.wait("c2", timeout_s=60))
    await _settle()
    assert waiter.pending == 2
    source.lookups.clear()
    expected = source.answer("c1")
    assert await waiter.poll_once() == 2
    assert source.lookups == [["c1", "c2"]]
    assert await first == expected
    assert await second == expected
    assert not third.done()
    source.answer("c2", "rejected")
    await waiter.poll_once()
    assert (await third) is not None
    assert waiter.pending == 0


async def test_timeout_gives_none_and_forgets_the_waiter() -> None:
    """With no answer within the timeout the wait returns None and leaves nothing registered."""
    waiter = CommandWaiter(Answers(), interval_s=60)
    assert await waiter.wait("c1", timeout_s=0) is None
    assert waiter.pending == 0
    assert await waiter.poll_once() == 0


async def test_poll_loop_resolves_waits_by_itself() -> None:
    """The background loop wakes on a new waiter and polls until the answer arrives."""
    source = Answers()
    waiter = CommandWaiter(source, interval_s=0)
    loop = asyncio.create_task(waiter.run())
    try:
        waiting = asyncio.create_task(waiter.wait("c1", timeout_s=60))
        await _settle()
        expected = source.answer("c1")
        assert await asyncio.wait_for(waiting, 10) == expected
    finally:
        loop.cancel()
        with pytest.raises(asyncio.CancelledError):
            await loop


@pytest.mark.parametrize(
    ("reason", "field", "status", "api"),
    [
        ("version_conflict", "expected_version", 412, "If-Match"),
        ("already_exists", "job_id", 409, "job_id"),
        ("not_found", "job_id", 404, "job_id"),
        ("invalid: fires too often", "spec.schedule.expr", 422, "schedule.expr"),
        ("team_immutable", "spec.team", 422, "team"),
        ("completed", "status", 409, "status"),
    ],
)
def test_rejections_map_to_problems_with_api_fields(reason: str, field: str, status: int, api: str) -> None:
    """Each processor rejection becomes the matching HTTP status, with the field in API spelling."""
    problem = rejection(CommandAnswer("c", "j", "rejected", 1, reason=reason, field=field))
    assert (problem.status, problem.field) == (status, api)
    assert api_field(field) == api
