"""Leases: how long a worker may keep executing an attempt, and when it must stop itself.

The lease protocol (the processor's side is in ``streams/core.py``):

1. Before calling the executor the worker sends ``RunStarted(lease_until = now + lease_ms)``
   and waits for the broker's ack. No ack, no execution.
2. Every ``lease_ms / 3`` it sends ``RunHeartbeat(lease_until = now + lease_ms)``; the lease
   is extended only once that heartbeat is acked.
3. A failed or timed-out heartbeat is retried with exponential backoff (100 ms doubling,
   capped at half the interval), but never past the *stop point*
   ``lease_until - margin``.
4. At the stop point without a renewal, the worker stops the execution itself and reports
   nothing more for that attempt: the processor will declare the lease lapsed and
   re-dispatch with ``attempt + 1``, and the stale attempt must not race the new one.

The margin (``lease_ms / 10``, at most 5 s) absorbs clock skew between worker and processor
and the processor's own lag in reading heartbeats. A worker frozen past its stop point
(SIGSTOP, a blocked event loop, a failpoint sleep) notices on the next clock reading and
stops without sending anything.

The arithmetic is pure (``LeasePolicy``, ``LeaseState`` and the functions below);
:class:`LeaseKeeper` is the loop around it, with the clock and the sleep injected.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace

from tickwheel import failpoints

log = logging.getLogger("tickwheel.worker.lease")

RETRY_BASE_MS = 100
MAX_MARGIN_MS = 5_000


@dataclass(frozen=True, slots=True)
class LeasePolicy:
    """Heartbeat timing derived from a job's ``lease_ms`` (computed once: read a few times a run)."""

    lease_ms: int
    interval_ms: int = field(init=False)
    margin_ms: int = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "interval_ms", max(1, self.lease_ms // 3))
        object.__setattr__(self, "margin_ms", min(MAX_MARGIN_MS, max(1, self.lease_ms // 10)))

    def retry_delay_ms(self, failures: int) -> int:
        """Backoff after the ``failures``-th consecutive failed heartbeat (1-based)."""
        return min(RETRY_BASE_MS << min(failures - 1, 20), max(1, self.interval_ms // 2))


@dataclass(frozen=True, slots=True)
class LeaseState:
    lease_until_ms: int  # as last acknowledged by the broker
    renewed_at_ms: int  # when the acknowledged RunStarted / RunHeartbeat was sent
    failures: int = 0  # consecutive failed heartbeats since the last renewal
    last_try_ms: int = 0


def granted(policy: LeasePolicy, sent_at_ms: int) -> LeaseState:
    """The lease a RunStarted sent at ``sent_at_ms`` holds once acked."""
    return LeaseState(lease_until_ms=sent_at_ms + policy.lease_ms, renewed_at_ms=sent_at_ms)


def stop_at_ms(policy: LeasePolicy, state: LeaseState) -> int:
    """The instant the worker must have stopped the execution unless renewed."""
    return state.lease_until_ms - policy.margin_ms


def next_try_at_ms(policy: LeasePolicy, state: LeaseState) -> int:
    """When the next heartbeat is due: on schedule, or after backoff following failures."""
    if state.failures == 0:
        return state.renewed_at_ms + policy.interval_ms
    return state.last_try_ms + policy.retry_delay_ms(state.failures)


def renewed(policy: LeasePolicy, sent_at_ms: int) -> LeaseState:
    return granted(policy, sent_at_ms)


def failed(state: LeaseState, at_ms: int) -> LeaseState:
    return replace(state, failures=state.failures + 1, last_try_ms=at_ms)


Renew = Callable[[int, int], Awaitable[None]]  # (lease_until_ms, at_ms) -> acked or raises


class LeaseKeeper:
    """Renews one attempt's lease until cancelled; returns when the lease is lost."""

    def __init__(
        self,
        policy: LeasePolicy,
        state: LeaseState,
        *,
        renew: Renew,
        clock: Callable[[], int],
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        tick_ms: int = 250,
    ) -> None:
        self.policy = policy
        self.state = state
        self.renewals = 0
        self._renew = renew
        self._clock = clock
        self._sleep = sleep
        self._tick_ms = tick_ms  # wake at least this often, so a clock jump is noticed

    def valid(self) -> bool:
        """Whether the execution may go on (and its outcome be reported) right now."""
        return self._clock() < stop_at_ms(self.policy, self.state)

    def idle_ms(self) -> int:
        """How long :meth:`keep` started now would sleep before doing anything (0: it would act)."""
        now = self._clock()
        stop = stop_at_ms(self.policy, self.state)
        wait = next_try_at_ms(self.policy, self.state) - now
        if now >= stop or wait <= 0:
            return 0
        return min(wait, stop - now, self._tick_ms)

    async def keep(self) -> str:
        """Heartbeat on schedule; return why the lease was lost when it cannot be renewed."""
        while True:
            stop = stop_at_ms(self.policy, self.state)
            if self._clock() >= stop:
                return f"lease not renewed before its stop point ({self.state.failures} failed heartbeats)"
            nap = self.idle_ms()
            if nap > 0:
                await self._sleep(nap / 1000)
            else:
                await self._try_renew(stop)

    async def _try_renew(self, stop: int) -> None:
        failpoints.hit("during_heartbeat")
        now = self._clock()
        if now >= stop:
            return  # frozen past the stop point: sending now would only confuse the processor
        try:
            # asyncio.timeout, not wait_for: 3.11's wait_for can swallow a cancel that coincides
            # with the ack, which would leave this loop heartbeating for a finished run.
            async with asyncio.timeout((stop - now) / 1000):
                await self._renew(now + self.policy.lease_ms, now)
        except Exception as exc:  # noqa: BLE001 - any failure to get an ack is a failed heartbeat
            self.state = failed(self.state, self._clock())
            log.warning("heartbeat failed (%d in a row): %r", self.state.failures, exc)
            return
        self.state = renewed(self.policy, now)
        self.renewals += 1
