"""Instants as people type them (ISO 8601 or epoch milliseconds) and as replay prints them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, tzinfo

from tickwheel.streams.schedule import tzinfo_for

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class TimeError(ValueError):
    """A time a person typed that replay cannot read; the message says what is accepted."""


def parse_time(text: str) -> int:
    """Epoch ms from ``1767225600000`` or ISO 8601 with a zone (``2026-01-01T00:00:00Z``).

    A wall time without a zone is refused rather than guessed: in an incident, reading
    10:00 as UTC when the reporter meant New York would explain the wrong hour.
    """
    value = text.strip()
    if value.lstrip("-").isdigit():
        return int(value)
    try:
        parsed = datetime.fromisoformat(value.replace("z", "Z"))
    except ValueError:
        raise TimeError(f"cannot read time {text!r}: use ISO 8601 with a zone "
                        "(2026-03-08T07:00:00Z) or epoch milliseconds") from None
    if parsed.tzinfo is None:
        raise TimeError(f"time {text!r} has no zone: add Z or an offset such as -05:00")
    return (parsed - _EPOCH) // timedelta(milliseconds=1)


def iso(at_ms: int | None, tz: str = "UTC") -> str:
    """``at_ms`` as ISO 8601 in ``tz`` (millisecond precision only when it is not zero)."""
    if at_ms is None:
        return "-"
    moment = (_EPOCH + timedelta(milliseconds=at_ms)).astimezone(_zone(tz))  # exact, unlike floats
    spec = "milliseconds" if at_ms % 1000 else "seconds"
    text = moment.isoformat(timespec=spec)
    return text.replace("+00:00", "Z") if tz == "UTC" else text


def _zone(tz: str) -> tzinfo:
    # The zone as the scheduler sees it (pinned tzdata), not the host's zoneinfo.
    return UTC if tz == "UTC" else tzinfo_for(tz)
