"""Captured run output: scrubbed, cut into LogChunk events, bounded per run attempt.

Executors call :meth:`OutputCapture.write` with whatever text they produce (a process's
stdout and stderr merged in arrival order, an HTTP response, workflow step headers). The
capture

* scrubs secret values, holding back the tail of the stream that might be the start of a
  secret split across two writes (see :meth:`Scrubber.safe_cut`);
* cuts a :class:`LogChunk` every ``chunk_bytes`` of UTF-8;
* keeps at most ``limit_bytes`` per attempt. The chunk that reaches the limit is marked
  ``truncated=True`` and ends with a marker line naming the limit; everything after it is
  counted (``dropped_bytes``) and discarded. The marker itself is not counted.

The capture is pure bookkeeping: the worker drains :meth:`take` and sends the chunks.
"""

from __future__ import annotations

from collections.abc import Callable

from tickwheel.schemas.model import LogChunk
from tickwheel.workers.secrets import Scrubber


def truncation_marker(limit_bytes: int) -> str:
    return f"\n[tickwheel: output truncated at {limit_bytes} bytes]\n"


def utf8_prefix(text: str, max_bytes: int) -> str:
    """The longest prefix of ``text`` that is at most ``max_bytes`` of UTF-8 (no split chars)."""
    encoded = text.encode()
    if len(encoded) <= max_bytes:
        return text
    return encoded[:max_bytes].decode(errors="ignore")


class OutputCapture:
    """Bounded, scrubbed output of one run attempt, as LogChunk events."""

    def __init__(
        self,
        run_id: str,
        job_id: str,
        attempt: int,
        *,
        limit_bytes: int,
        chunk_bytes: int,
        scrubber: Scrubber,
        clock: Callable[[], int],
        on_ready: Callable[[], None] = lambda: None,
    ) -> None:
        self._ids = (run_id, job_id, attempt)
        self.limit_bytes = limit_bytes
        self.chunk_bytes = chunk_bytes
        self._scrubber = scrubber
        self._clock = clock
        self._on_ready = on_ready
        self._raw = ""  # written, not yet scrubbed (a possible secret prefix)
        self._current: list[str] = []  # scrubbed, not yet cut into a chunk
        self._current_bytes = 0
        self._kept_bytes = 0
        self._ready: list[LogChunk] = []
        self._seq = 0
        self.truncated = False
        self.dropped_bytes = 0

    def write(self, text: str) -> None:
        """Add output; cuts chunks as they fill."""
        if self.truncated:
            self.dropped_bytes += len(text.encode())
            return
        self._raw += text
        cut = self._scrubber.safe_cut(self._raw)
        emitted, self._raw = self._raw[:cut], self._raw[cut:]
        self._keep(self._scrubber.scrub(emitted))

    def close(self) -> None:
        """End of output: flush everything held back into a last chunk."""
        rest, self._raw = self._raw, ""
        if self.truncated:
            self.dropped_bytes += len(rest.encode())
        else:
            self._keep(self._scrubber.scrub(rest))
        self._cut()

    def take(self) -> list[LogChunk]:
        """The chunks cut since the last call, in order."""
        ready, self._ready = self._ready, []
        return ready

    def _keep(self, text: str) -> None:
        while text and not self.truncated:
            fits = utf8_prefix(text, self.limit_bytes - self._kept_bytes)
            if not fits:
                self._truncate(text)
                return
            space = self.chunk_bytes - self._current_bytes
            # A character wider than the space left starts the next chunk (or, alone, fills one).
            piece = utf8_prefix(fits, space) or ("" if self._current else fits[0])
            if piece:
                self._append(piece)
                text = text[len(piece) :]
            if not piece or self._current_bytes >= self.chunk_bytes:
                self._cut()

    def _truncate(self, dropped: str) -> None:
        self.dropped_bytes += len(dropped.encode())
        self._append(truncation_marker(self.limit_bytes), counted=False)
        self.truncated = True
        self._cut()

    def _append(self, text: str, *, counted: bool = True) -> None:
        size = len(text.encode())
        self._current.append(text)
        self._current_bytes += size
        if counted:
            self._kept_bytes += size

    def _cut(self) -> None:
        if not self._current:
            return
        run_id, job_id, attempt = self._ids
        data = "".join(self._current)
        self._current, self._current_bytes = [], 0
        self._ready.append(LogChunk(run_id, job_id, attempt, self._seq, self._clock(), data, self.truncated))
        self._seq += 1
        self._on_ready()
