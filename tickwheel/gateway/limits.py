"""Per-team create rate (token buckets) and the in-process part of idempotency-key reuse
detection (the durable part is the read model's key claims; see ``handlers._check_key``).
Pure: the caller passes the time."""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass


@dataclass
class TokenBucket:
    """``rate`` tokens per second up to ``burst``; a request takes one."""

    rate: float
    burst: int
    tokens: float
    updated_s: float

    def take(self, now_s: float) -> float:
        """0 if a token was taken, else the seconds until one will be available."""
        self.tokens = min(float(self.burst), self.tokens + max(0.0, now_s - self.updated_s) * self.rate)
        self.updated_s = max(self.updated_s, now_s)
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return 0.0
        return (1.0 - self.tokens) / self.rate


class RateLimiter:
    """One token bucket per key (team), created full on first use; idle buckets are dropped."""

    def __init__(self, rate: float, burst: int, *, max_keys: int = 10_000) -> None:
        self.rate = rate
        self.burst = burst
        self.max_keys = max_keys
        self._buckets: OrderedDict[str, TokenBucket] = OrderedDict()

    def take(self, key: str, now_s: float) -> int:
        """0 if allowed, else the whole seconds to wait (the ``Retry-After`` value, >= 1)."""
        bucket = self._buckets.pop(key, None) or TokenBucket(self.rate, self.burst, float(self.burst), now_s)
        self._buckets[key] = bucket
        while len(self._buckets) > self.max_keys:
            self._buckets.popitem(last=False)  # a dropped bucket comes back full: generous, bounded
        wait = bucket.take(now_s)
        return 0 if wait == 0.0 else max(1, math.ceil(wait))


class IdempotencyKeys:
    """Recent (principal, key) -> request fingerprint, to refuse a key reused for another request.

    The first of two checks, bounded and per process. The durable one is the read model's
    key claim (``ReadModel.claim``), folded from the audit record every mutation appends with
    its fingerprint: shared by every gateway and kept across restarts (the audit topic is
    kept forever). This cache covers the moments before the fold has a claim: this process's
    own recent keys, which it knows at once.
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._seen: OrderedDict[tuple[str, str], str] = OrderedDict()

    def check(self, principal: str, key: str, fingerprint: str) -> bool | None:
        """None for a new key (now remembered), True for a retry, False for a reuse."""
        if self.capacity == 0:
            return None
        known = self._seen.get((principal, key))
        if known is not None:
            self._seen.move_to_end((principal, key))
            return known == fingerprint
        self._seen[(principal, key)] = fingerprint
        if len(self._seen) > self.capacity:
            self._seen.popitem(last=False)
        return None

    def forget(self, principal: str, key: str) -> None:
        """Drop a key whose request failed before its command was appended."""
        self._seen.pop((principal, key), None)
