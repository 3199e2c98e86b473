"""Timer entries of the timing wheel, derived from job state.

A timer is identified by its byte key, which sorts by due time::

    key   = be64(due_ms) | job_id (UTF-8) | 0x00 | kind (1 ASCII byte) | run_id (UTF-8, may be empty)
    value = team (UTF-8)

``be64`` is the unsigned big-endian 8-byte encoding of the due time in epoch milliseconds,
so lexicographic key order is time order. ``job_id`` never contains NUL (validated at the
edge). ``run_id`` is empty for FIRE timers, which belong to the job, and set for the
per-run kinds.

A changelog record carries its state's timers in the ``tw-timers`` header (see
:func:`pack_timers`), so a restore fills the index without decoding the state.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum

_BE64 = struct.Struct(">Q")


class TimerKind(StrEnum):
    FIRE = "f"  # the job's next scheduled occurrence
    RETRY = "r"  # a failed run's next attempt
    LEASE = "l"  # a run's lease (or start deadline) expires
    TIMEOUT = "t"  # a running attempt's execution timeout


@dataclass(frozen=True, slots=True, order=True)
class Timer:
    due_ms: int
    job_id: str
    kind: TimerKind
    run_id: str = ""
    # The job's team rides along as the index entry's *value* (not part of the key or of
    # equality), so fair admission can interleave teams without loading any job state.
    team: str = field(default="", compare=False)

    def key(self) -> bytes:
        """The RocksDB key of this timer; sorts by ``due_ms`` first."""
        return b"".join(
            (
                _BE64.pack(self.due_ms),
                self.job_id.encode(),
                b"\x00",
                self.kind.value.encode(),
                self.run_id.encode(),
            )
        )

    @classmethod
    def from_key(cls, key: bytes, value: bytes = b"") -> Timer:
        """Invert :meth:`key` (and the index value, which holds the team)."""
        (due_ms,) = _BE64.unpack_from(key)
        job_id, _, rest = key[8:].partition(b"\x00")
        return cls(due_ms, job_id.decode(), _KINDS[rest[0]], rest[1:].decode(), value.decode())


_KINDS = {ord(kind.value): kind for kind in TimerKind}


def due_prefix(due_ms: int) -> bytes:
    """The smallest key with this due time: seek here to scan everything due from then on."""
    return _BE64.pack(due_ms)


# The changelog header that lists a state's timers. The version byte names the rules that
# derived them (``core.timers_of``): bump TIMER_RULES when those rules change, and a
# restore decodes states written under other rules instead of trusting their header.
TIMERS_HEADER = "tw-timers"
TIMER_RULES = 1
_U16 = struct.Struct(">H")


def pack_timers(timers: Iterable[Timer]) -> bytes:
    """``TIMER_RULES | (u16 len | key | u16 len | team)*``: the header value of a changelog record."""
    parts = [bytes((TIMER_RULES,))]
    for timer in sorted(timers):
        key, team = timer.key(), timer.team.encode()
        parts += (_U16.pack(len(key)), key, _U16.pack(len(team)), team)
    return b"".join(parts)


def unpack_timers(raw: bytes) -> frozenset[Timer] | None:
    """The timers :func:`pack_timers` wrote, or None if written under other rules or malformed."""
    if not raw or raw[0] != TIMER_RULES:
        return None
    timers: list[Timer] = []
    at = 1
    try:
        while at < len(raw):
            (size,) = _U16.unpack_from(raw, at)
            key = raw[at + 2 : at + 2 + size]
            at += 2 + size
            (size,) = _U16.unpack_from(raw, at)
            team = raw[at + 2 : at + 2 + size]
            at += 2 + size
            if at > len(raw):
                return None
            timers.append(Timer.from_key(key, team))
    except (struct.error, IndexError, KeyError, UnicodeDecodeError):
        return None
    return frozenset(timers)
