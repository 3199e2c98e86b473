"""Retry backoff: exponential, capped, deterministic jitter."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tickwheel.schemas.model import RetryPolicy
from tickwheel.streams.retry import backoff_ms

EXACT = RetryPolicy(backoff_initial_ms=1_000, backoff_max_ms=60_000, backoff_multiplier=2.0,
                    jitter=0.0)


def test_without_jitter_the_delay_doubles_until_the_cap() -> None:
    """initial * multiplier^(attempt-1), capped at backoff_max_ms."""
    delays = [backoff_ms(EXACT, "r-1", n) for n in range(1, 9)]
    assert delays == [1_000, 2_000, 4_000, 8_000, 16_000, 32_000, 60_000, 60_000]


def test_a_multiplier_of_one_gives_a_constant_delay() -> None:
    """multiplier 1.0 keeps the initial delay for every attempt."""
    policy = RetryPolicy(backoff_initial_ms=5_000, backoff_multiplier=1.0, jitter=0.0)
    assert {backoff_ms(policy, "r-1", n) for n in range(1, 50)} == {5_000}


def test_huge_attempt_numbers_do_not_overflow() -> None:
    """The exponent is bounded before it is computed: attempt 10^6 is just the cap."""
    assert backoff_ms(EXACT, "r-1", 1_000_000) == 60_000


def test_jitter_is_deterministic_per_run_and_attempt() -> None:
    """The same (run id, attempt) always gives the same delay; others spread out."""
    policy = RetryPolicy(backoff_initial_ms=10_000, jitter=0.5)
    assert backoff_ms(policy, "r-1", 1) == backoff_ms(policy, "r-1", 1)
    spread = {backoff_ms(policy, f"r-{i}", 1) for i in range(50)}
    assert len(spread) > 40
    assert min(spread) < 8_000
    assert max(spread) > 12_000


def test_zero_initial_delay_retries_at_once() -> None:
    """backoff_initial_ms=0 gives no delay whatever the attempt."""
    policy = RetryPolicy(backoff_initial_ms=0, backoff_max_ms=0)
    assert backoff_ms(policy, "r-1", 5) == 0


@settings(max_examples=200, deadline=None)
@given(
    initial=st.integers(0, 10**6),
    extra=st.integers(0, 10**7),
    multiplier=st.floats(1.0, 10.0),
    jitter=st.floats(0.0, 1.0),
    attempt=st.integers(1, 200),
    run_id=st.text(max_size=20),
)
def test_delay_stays_within_jitter_of_the_capped_exponential(
    initial: int, extra: int, multiplier: float, jitter: float, attempt: int, run_id: str
) -> None:
    """Every delay is within ±jitter of min(initial * m^(n-1), cap), and never negative."""
    cap = initial + extra
    policy = RetryPolicy(backoff_initial_ms=initial, backoff_max_ms=cap,
                         backoff_multiplier=multiplier, jitter=jitter)
    base = min(float(cap), initial * multiplier ** min(attempt - 1, 1000)) if initial else 0.0
    delay = backoff_ms(policy, run_id, attempt)
    assert delay >= 0
    assert base * (1 - jitter) - 1 <= delay <= base * (1 + jitter) + 1
