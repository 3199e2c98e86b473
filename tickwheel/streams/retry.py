"""Retry backoff: exponential, capped, with jitter that is a pure function of the run.

The jitter must be reproducible: the processor derives a run's retry time inside ``evolve``,
and replaying the log on another machine has to land on the same millisecond. So the
"random" factor is a hash of ``(run_id, attempt)``, never ``random()``.
"""

from __future__ import annotations

import hashlib
import math

from tickwheel.schemas.model import RetryPolicy


def backoff_ms(policy: RetryPolicy, run_id: str, attempt: int) -> int:
    """The delay between the end of attempt ``attempt`` and the start of attempt ``attempt + 1``.

    ``initial * multiplier ** (attempt - 1)``, capped at ``backoff_max_ms``, then scaled by
    ``1 + jitter * u`` with ``u`` in ``[-1, 1)`` from a stable hash of ``(run_id, attempt)``.
    The cap applies before the jitter (so a capped delay still spreads retries out), which
    means the result may exceed ``backoff_max_ms`` by up to ``jitter`` of it. Never negative.
    """
    base = _capped_exponential(policy, attempt)
    jitter = min(1.0, max(0.0, policy.jitter))
    return max(0, round(base * (1.0 + jitter * _unit(run_id, attempt))))


def _capped_exponential(policy: RetryPolicy, attempt: int) -> float:
    """The un-jittered delay, computed without ever overflowing a float."""
    steps = max(0, attempt - 1)
    cap = float(max(0, policy.backoff_max_ms))
    initial = float(max(0, policy.backoff_initial_ms))
    multiplier = policy.backoff_multiplier
    if initial == 0.0 or initial >= cap:
        return min(initial, cap)
    # Compare in log space first: multiplier ** steps overflows long before steps is large.
    if multiplier > 1.0 and steps * math.log(multiplier) >= math.log(cap / initial):
        return cap
    return min(cap, initial * max(0.0, multiplier) ** steps)


def _unit(run_id: str, attempt: int) -> float:
    """A stable pseudo-random number in ``[-1, 1)`` for one (run, attempt)."""
    digest = hashlib.sha256(f"backoff\x00{run_id}\x00{attempt}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**63 - 1.0
