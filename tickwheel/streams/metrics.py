"""Prometheus metrics of the scheduler processor."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

_LAG_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)


@dataclass(frozen=True)
class ProcessorMetrics:
    registry: CollectorRegistry
    scheduling_lag: Histogram
    due_backlog: Gauge
    wheel_size: Gauge
    transaction_seconds: Histogram
    restore_seconds: Histogram
    fenced_producers: Counter
    dead_letters: Counter
    run_due_total: Counter
    assigned_partitions: Gauge
    states_warmed: Counter

    @classmethod
    def create(cls, registry: CollectorRegistry | None = None) -> ProcessorMetrics:
        reg = registry if registry is not None else CollectorRegistry()
        return cls(
            registry=reg,
            scheduling_lag=Histogram(
                "tickwheel_scheduling_lag_seconds",
                "Commit time of a RunDue minus its not_before (0 when dispatched ahead)",
                buckets=_LAG_BUCKETS, registry=reg,
            ),
            due_backlog=Gauge(
                "tickwheel_due_backlog", "Due timers deferred by admission", ["partition"], registry=reg
            ),
            wheel_size=Gauge(
                "tickwheel_wheel_size", "Timers held in the in-memory near wheel", ["partition"], registry=reg
            ),
            transaction_seconds=Histogram(
                "tickwheel_transaction_seconds", "Duration of one step's transaction", registry=reg
            ),
            restore_seconds=Histogram(
                "tickwheel_restore_seconds", "Time to fence, restore and start a partition task",
                buckets=(0.1, 0.5, 1, 2, 5, 10, 30, 60, 120, 300), registry=reg,
            ),
            fenced_producers=Counter(
                "tickwheel_fenced_producers", "Tasks stopped because a newer owner fenced them", registry=reg
            ),
            dead_letters=Counter("tickwheel_dead_letters", "Records written to the DLQ", registry=reg),
            run_due_total=Counter("tickwheel_run_due", "RunDue records committed", registry=reg),
            assigned_partitions=Gauge(
                "tickwheel_assigned_partitions", "Partition tasks running in this process", registry=reg
            ),
            states_warmed=Counter(
                "tickwheel_states_warmed",
                "Job states decoded by idle ticks ahead of their FIRE timers",
                registry=reg,
            ),
        )
