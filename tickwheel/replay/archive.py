"""Incident archives: a log slice as an Avro object container file or JSON lines.

Both hold the same envelope per record (topic, partition, offset, timestamp, key, value),
chosen by the file's extension: ``.avro`` is a fastavro container (deflate) with the
export's parameters in the file metadata; ``.jsonl``/``.ndjson`` is one JSON object per
line, keys and values in base64, preceded by one header line. A JSON line may also carry a
``"note"`` (the decoded event's type) for people reading the file; reading ignores it.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import fastavro

from tickwheel.replay.log import LogRecord, role_of
from tickwheel.schemas import mappers
from tickwheel.schemas.codec import CodecError

ENVELOPE_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "LogRecord",
    "namespace": "tickwheel.replay",
    "doc": "One committed Kafka record of a Tickwheel topic, as exported for forensics.",
    "fields": [
        {"name": "topic", "type": "string"},
        {"name": "partition", "type": "int"},
        {"name": "offset", "type": "long"},
        {"name": "timestamp", "type": "long", "doc": "Kafka record timestamp, epoch ms"},
        {"name": "key", "type": ["null", "bytes"]},
        {"name": "value", "type": ["null", "bytes"]},
    ],
}
_PARSED = fastavro.parse_schema(ENVELOPE_SCHEMA)
_META_KEY = "tickwheel.export"
_JSON_SUFFIXES = (".jsonl", ".ndjson")


class ArchiveError(ValueError):
    """An archive that cannot be written or read; the message names the file and why."""


@dataclass(frozen=True, slots=True)
class ExportHeader:
    """What an export holds: the window asked for, the job filter and the topics."""

    from_ms: int | None = None
    to_ms: int | None = None
    job_id: str | None = None
    topics: tuple[str, ...] = ()
    complete_until_ms: int | None = None  # the log held everything committed before this
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"tickwheel_export": 1, "from_ms": self.from_ms, "to_ms": self.to_ms,
                "job_id": self.job_id, "topics": list(self.topics),
                "complete_until_ms": self.complete_until_ms, **self.extra}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ExportHeader:
        known = {"tickwheel_export", "from_ms", "to_ms", "job_id", "topics", "complete_until_ms"}
        return cls(data.get("from_ms"), data.get("to_ms"), data.get("job_id"),
                   tuple(data.get("topics") or ()), data.get("complete_until_ms"),
                   {k: v for k, v in data.items() if k not in known})


def format_of(path: Path) -> str:
    """``"avro"`` or ``"jsonl"`` from the file name; anything else is an :class:`ArchiveError`."""
    name = path.name.lower()
    if name.endswith(".avro"):
        return "avro"
    if name.endswith(_JSON_SUFFIXES):
        return "jsonl"
    raise ArchiveError(f"{path}: unknown archive format (use .avro, .jsonl or .ndjson)")


def write_archive(path: Path, records: Iterable[LogRecord], header: ExportHeader) -> int:
    """Write ``records`` to ``path`` in the format its extension names; return how many."""
    kind = format_of(path)
    try:
        with path.open("wb" if kind == "avro" else "w", encoding=None if kind == "avro" else "utf-8") as out:
            if kind == "avro":
                return _write_avro(out, records, header)
            return _write_jsonl(out, records, header)
    except OSError as exc:
        raise ArchiveError(f"{path}: cannot write: {exc.strerror or exc}") from exc


def read_archive(path: Path) -> tuple[ExportHeader, list[LogRecord]]:
    """The header and records of an archive written by :func:`write_archive`."""
    kind = format_of(path)
    try:
        if kind == "avro":
            return _read_avro(path)
        return _read_jsonl(path)
    except OSError as exc:
        raise ArchiveError(f"{path}: cannot read: {exc.strerror or exc}") from exc


# -- Avro ---------------------------------------------------------------------------------


def _write_avro(out: Any, records: Iterable[LogRecord], header: ExportHeader) -> int:
    count = 0

    def rows() -> Iterator[dict[str, Any]]:
        nonlocal count
        for record in records:
            count += 1
            yield {"topic": record.topic, "partition": record.partition, "offset": record.offset,
                   "timestamp": record.timestamp, "key": record.key, "value": record.value}

    fastavro.writer(out, _PARSED, rows(), codec="deflate",
                    metadata={_META_KEY: json.dumps(header.to_json())})
    return count


def _row_record(row: Any) -> LogRecord:
    return LogRecord(row["topic"], row["partition"], row["offset"], row["timestamp"], row["key"],
                     row["value"])


def _read_avro(path: Path) -> tuple[ExportHeader, list[LogRecord]]:
    with path.open("rb") as source:
        try:
            reader = fastavro.reader(source)
            meta = reader.metadata.get(_META_KEY)
            header = ExportHeader.from_json(json.loads(meta)) if meta else ExportHeader()
            records = [_row_record(row) for row in reader]
        except (ValueError, KeyError, TypeError, EOFError) as exc:
            raise ArchiveError(f"{path}: not a Tickwheel Avro export: {exc}") from exc
    return header, records


# -- JSON lines ---------------------------------------------------------------------------


def _write_jsonl(out: Any, records: Iterable[LogRecord], header: ExportHeader) -> int:
    out.write(json.dumps(header.to_json(), separators=(",", ":")) + "\n")
    count = 0
    for record in records:
        out.write(json.dumps(record_json(record), separators=(",", ":")) + "\n")
        count += 1
    return count


def record_json(record: LogRecord) -> dict[str, Any]:
    """One JSON line of an export (with a ``note`` naming the event, for readers)."""
    return {
        "topic": record.topic, "partition": record.partition, "offset": record.offset,
        "timestamp": record.timestamp, "key": _b64(record.key), "value": _b64(record.value),
        "note": _note(record),
    }


def record_from_json(data: dict[str, Any]) -> LogRecord:
    return LogRecord(str(data["topic"]), int(data["partition"]), int(data["offset"]),
                     int(data["timestamp"]), _unb64(data.get("key")), _unb64(data.get("value")))


def _read_jsonl(path: Path) -> tuple[ExportHeader, list[LogRecord]]:
    header = ExportHeader()
    records: list[LogRecord] = []
    with path.open(encoding="utf-8") as source:
        for number, line in enumerate(source, start=1):
            if not line.strip():
                continue
            try:
                data = json.loads(line)
                if "tickwheel_export" in data:
                    header = ExportHeader.from_json(data)
                else:
                    records.append(record_from_json(data))
            except (ValueError, KeyError, TypeError) as exc:
                raise ArchiveError(f"{path}:{number}: not an export line: {exc}") from exc
    return header, records


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode("ascii")


def _unb64(text: str | None) -> bytes | None:
    return None if text is None else base64.b64decode(text, validate=True)


def _note(record: LogRecord) -> str:
    if record.value is None:
        return "tombstone"
    try:
        event = mappers.from_bytes(record.value)
    except CodecError:
        return "undecodable"
    role = role_of(record.topic)
    return f"{type(event).__name__} on {role.value if role else record.topic}"
