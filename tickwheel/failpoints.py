"""Failpoints: named places where a fault can be injected, inert unless armed.

Armed by ``TICKWHEEL_FAILPOINTS``, a comma-separated list of ``name=action`` where action is
``kill`` (SIGKILL this process), ``raise`` (raise :class:`FailpointError`), ``sleep:MS``
(block this thread for MS milliseconds, e.g. to outlive a lease or a transaction timeout), or
any of these followed by ``@N`` to act only on the N-th hit (1-based), e.g.
``after_produce_before_commit=kill@3``.

Names in use: ``after_decide``, ``after_produce_before_commit``, ``after_commit_before_store``,
``inside_store_write``, ``worker_before_call``, ``worker_after_call_before_outcome``,
``during_heartbeat``.
"""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from dataclasses import dataclass


class FailpointError(RuntimeError):
    """Raised by a failpoint armed with ``raise``."""


@dataclass(frozen=True, slots=True)
class _Action:
    verb: str
    arg: int
    on_hit: int  # 0 = every hit


def parse(spec: str) -> dict[str, _Action]:
    """Parse a ``TICKWHEEL_FAILPOINTS`` value; raise ValueError naming the bad entry."""
    armed: dict[str, _Action] = {}
    for entry in filter(None, (part.strip() for part in spec.split(","))):
        name, sep, action = entry.partition("=")
        action, _, nth = action.partition("@")
        verb, _, arg = action.partition(":")
        if not sep or verb not in {"kill", "raise", "sleep"} or (verb == "sleep" and not arg.isdigit()):
            raise ValueError(f"bad failpoint {entry!r}: expected name=kill|raise|sleep:MS[@N]")
        if nth and not nth.isdigit():
            raise ValueError(f"bad failpoint {entry!r}: @N needs a number")
        armed[name] = _Action(verb, int(arg or 0), int(nth or 0))
    return armed


_ARMED = parse(os.environ.get("TICKWHEEL_FAILPOINTS", ""))
_HITS: Counter[str] = Counter()


def hit(name: str) -> None:
    """Pass through failpoint ``name``; act if it is armed. Costs one dict lookup when not."""
    action = _ARMED.get(name)
    if action is None:
        return
    _HITS[name] += 1
    if action.on_hit and _HITS[name] != action.on_hit:
        return
    if action.verb == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif action.verb == "sleep":
        time.sleep(action.arg / 1000)
    else:
        raise FailpointError(f"failpoint {name} fired")


def arm(spec: str) -> None:
    """Re-arm from a spec string (for tests inside one process)."""
    global _ARMED  # noqa: PLW0603 - the armed set is process-wide by design
    _ARMED = parse(spec)
    _HITS.clear()
