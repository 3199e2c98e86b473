"""Incident forensics from the log: export, state at T, why/why-not, verify.

The library face is ``Replayer(source).replay(log) -> ReplayResult``; the ``tickwheel
replay`` CLI (``replay.cli``) is a thin layer over it. Replay folds the processor's own
output with the processor's pure core (``streams.core.evolve``/``decide``) and recomputes
schedules with ``streams.schedule``; it never re-implements a scheduling rule.
"""

from tickwheel.replay.archive import ExportHeader, read_archive, write_archive
from tickwheel.replay.log import Cite, LogRecord, Role
from tickwheel.replay.replayer import (
    JobStateAt,
    Replayer,
    ReplayResult,
    Source,
    StateReport,
    UnknownJobError,
)
from tickwheel.replay.verify import Invariant, VerifyReport, Violation
from tickwheel.replay.why import Explanation, Verdict

__all__ = [
    "Cite",
    "Explanation",
    "ExportHeader",
    "Invariant",
    "JobStateAt",
    "LogRecord",
    "ReplayResult",
    "Replayer",
    "Role",
    "Source",
    "StateReport",
    "UnknownJobError",
    "Verdict",
    "VerifyReport",
    "Violation",
    "read_archive",
    "write_archive",
]
