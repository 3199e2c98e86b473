"""A one-line progress bar on stderr for long reads (only when asked, or on a terminal)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO

_WIDTH = 30
_EVERY_S = 0.2  # redraw at most this often: a bar must not slow the read it reports on


class Progress:
    """Counts records against an expected total and redraws the bar as it goes."""

    def __init__(
        self,
        total: int,
        label: str = "reading",
        *,
        unit: str = "records",
        stream: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.total = max(0, total)
        self.done = 0
        self.label = label
        self.unit = unit
        self._stream = stream if stream is not None else sys.stderr
        self._clock = clock
        self._drawn_at: float | None = None

    def advance(self, count: int) -> None:
        self.done += count
        now = self._clock()
        if self._drawn_at is None or now - self._drawn_at >= _EVERY_S:
            self._draw()
            self._drawn_at = now

    def close(self) -> None:
        """Draw the final count and end the line."""
        self._draw()
        self._stream.write("\n")
        self._stream.flush()

    def line(self) -> str:
        shown = min(self.done, self.total) if self.total else self.done
        fraction = shown / self.total if self.total else 1.0
        filled = round(fraction * _WIDTH)
        bar = "#" * filled + "." * (_WIDTH - filled)
        return f"{self.label} [{bar}] {fraction:4.0%} {self.done:,}/{self.total:,} {self.unit}"

    def _draw(self) -> None:
        self._stream.write("\r" + self.line())
        self._stream.flush()


def wanted(forced: bool, stream: TextIO | None = None) -> bool:
    """A bar is drawn when forced (``--progress``) or when stderr is a terminal."""
    target = stream if stream is not None else sys.stderr
    return forced or target.isatty()
