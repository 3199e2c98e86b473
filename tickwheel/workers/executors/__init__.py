"""Executors and their registry.

Built in: ``http``, ``process``, ``container``, ``workflow`` and ``noop``. A deployment adds a
kind with :func:`register_executor` (process-wide) before starting its workers, or passes its
own :class:`ExecutorRegistry` to ``Worker``.
"""

from __future__ import annotations

from tickwheel.workers.executors import container, http, noop, process, workflow
from tickwheel.workers.executors.base import (
    ExecResult,
    Executor,
    ExecutorConfigError,
    ExecutorEnv,
    ExecutorFactory,
    ExecutorRegistry,
    OutputSink,
    RunContext,
)

__all__ = [
    "ExecResult",
    "Executor",
    "ExecutorConfigError",
    "ExecutorEnv",
    "ExecutorFactory",
    "ExecutorRegistry",
    "OutputSink",
    "RunContext",
    "builtin_registry",
    "default_registry",
    "register_executor",
]


def builtin_registry() -> ExecutorRegistry:
    """A fresh registry holding only the built-in kinds."""
    return ExecutorRegistry(
        {
            "http": http.create,
            "process": process.create,
            "container": container.create,
            "workflow": workflow.create,
            "noop": noop.NoopExecutor,
        }
    )


_DEFAULT = builtin_registry()


def default_registry() -> ExecutorRegistry:
    """The process-wide registry that workers use unless given another."""
    return _DEFAULT


def register_executor(kind: str, factory: ExecutorFactory, *, replace: bool = False) -> None:
    """Make ``kind`` available to every worker of this process built after this call."""
    _DEFAULT.register(kind, factory, replace=replace)
