"""Avro single-object encoding of Tickwheel records, with schema resolution.

Byte layout of every encoded record (Avro spec, "Single-object encoding")::

    offset  size  content
    0       2     magic C3 01
    2       8     CRC-64-AVRO (Rabin) fingerprint of the writer schema's Parsing
                  Canonical Form, little-endian
    10      n     Avro binary body of the record, written with that writer schema

Any consumer holding the ``.avsc`` files can decode: the fingerprint names the writer
schema, and Avro resolution turns the body into the *current* reader schema of the same
record name, filling defaults for fields the writer did not know and dropping fields the
reader does not know.

Schema files (package data, read with ``importlib.resources``):

* ``schemas/*.avsc``: the current schemas, one file per event family, each a JSON array of
  named records in namespace ``tickwheel.v1``. All current files share one name space, so
  ``runs.avsc`` may refer to ``ExecutorSpec`` defined in ``commands.avsc``.
* ``schemas/history/*.avsc``: earlier revisions of records (``runs_v0.avsc`` ...). Each
  history file is self-contained: a past writer schema must never change because a current
  file did. The record names stay the same, which is what lets resolution match them.
  The ``v1`` in the namespace changes only on a break that resolution cannot bridge.

Every named record becomes one self-contained schema (named types inlined at first use),
and every such schema gets a fingerprint. Only defaults, docs and aliases can change
without changing the fingerprint: they are not part of the canonical form.

Enumerations (policies, statuses, triggers) are Avro ``string``s, not Avro ``enum``s. An
enum's symbol list is part of the writer schema, and a reader that meets a symbol it does
not know fails the whole record unless it declared an enum default, which would silently
turn e.g. a new skip reason into some old one. A string always decodes; the mapper then
decides, and an unknown value becomes a ``CodecError`` that sends the record to the
dead-letter topic with a clear reason. The cost is a few bytes per value.
"""

from __future__ import annotations

import functools
import io
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from importlib.resources.abc import Traversable
from typing import Any

from fastavro import parse_schema, schemaless_reader, schemaless_writer
from fastavro.schema import to_parsing_canonical_form

MAGIC = b"\xc3\x01"
HEADER_SIZE = len(MAGIC) + 8
NAMESPACE = "tickwheel.v1"

Record = dict[str, Any]

# Avro spec, "Schema Fingerprints": the CRC-64-AVRO polynomial's fingerprint of "".
_EMPTY = 0xC15D213AA4D7A795
_PRIMITIVES = frozenset(("null", "boolean", "int", "long", "float", "double", "bytes", "string"))
_NAMED = frozenset(("record", "error", "enum", "fixed"))


class CodecError(ValueError):
    """Bytes that are not a record we can decode, or a record we cannot encode."""


# ---------------------------------------------------------------------------
# Fingerprints


def _rabin_table() -> tuple[int, ...]:
    table = []
    for i in range(256):
        fp = i
        for _ in range(8):
            fp = (fp >> 1) ^ (_EMPTY & -(fp & 1))
        table.append(fp)
    return tuple(table)


_TABLE = _rabin_table()


def crc64_avro(data: bytes) -> int:
    """The CRC-64-AVRO (Rabin) fingerprint of ``data`` as an unsigned 64-bit integer."""
    fp = _EMPTY
    for byte in data:
        fp = (fp >> 8) ^ _TABLE[(fp ^ byte) & 0xFF]
    return fp


def canonical_form(schema: Any) -> str:
    """The Parsing Canonical Form of a (self-contained) schema."""
    return to_parsing_canonical_form(schema)


def fingerprint(schema: Any) -> bytes:
    """The 8 header bytes naming ``schema``: its CRC-64-AVRO, little-endian."""
    return crc64_avro(canonical_form(schema).encode()).to_bytes(8, "little")


# ---------------------------------------------------------------------------
# Linking the .avsc files into self-contained schemas


def _fullname(name: str, namespace: str) -> str:
    return name if "." in name else f"{namespace}.{name}"


def _namespace_of(fullname: str) -> str:
    return fullname.rpartition(".")[0]


def _definitions(records: Iterable[Record], source: str) -> dict[str, Record]:
    """Top-level named records by full name; a name defined twice is an error."""
    defs: dict[str, Record] = {}
    for record in records:
        full = _fullname(record["name"], record.get("namespace", NAMESPACE))
        if full in defs:
            raise ValueError(f"{source}: {full} is defined twice")
        defs[full] = record
    return defs


@dataclass
class _Linker:
    """Inlines each named type at its first use and refers to it by full name after."""

    definitions: Mapping[str, Record]
    seen: set[str] = field(default_factory=set)

    def link(self, schema: Any, namespace: str) -> Any:
        if isinstance(schema, str):
            return self._reference(schema, namespace)
        if isinstance(schema, list):
            return [self.link(branch, namespace) for branch in schema]
        kind = schema["type"]
        if kind in _NAMED:
            return self._named(schema, namespace)
        if kind == "array":
            return {**schema, "items": self.link(schema["items"], namespace)}
        if kind == "map":
            return {**schema, "values": self.link(schema["values"], namespace)}
        return schema

    def _reference(self, name: str, namespace: str) -> Any:
        if name in _PRIMITIVES:
            return name
        full = _fullname(name, namespace)
        if full in self.seen:
            return full
        if full not in self.definitions:
            raise ValueError(f"unknown type {full}")
        return self.link(self.definitions[full], namespace)

    def _named(self, schema: Record, namespace: str) -> Record:
        full = _fullname(schema["name"], schema.get("namespace", namespace))
        self.seen.add(full)
        linked = {k: v for k, v in schema.items() if k != "namespace"}
        linked["name"] = full
        if schema["type"] in ("record", "error"):
            inner = _namespace_of(full)
            linked["fields"] = [{**f, "type": self.link(f["type"], inner)} for f in schema["fields"]]
        return linked


# ---------------------------------------------------------------------------
# The registry


@dataclass(frozen=True, slots=True)
class SchemaEntry:
    """One writer schema: a record name at one revision."""

    name: str  # full record name, e.g. "tickwheel.v1.RunDue"
    fingerprint: bytes  # the 8 header bytes
    source: str  # the file it came from, e.g. "history/runs_v0.avsc"
    schema: dict[str, Any] = field(repr=False)  # parsed, self-contained
    # The current schema of the same name to resolve into; None when this entry is current.
    reader: dict[str, Any] | None = field(repr=False)

    @property
    def is_current(self) -> bool:
        return self.reader is None


class _ExactReader(io.BytesIO):
    """A BytesIO that refuses short and negative reads instead of returning fewer bytes.

    fastavro checks the length of what it *reads* but not of what it *skips*; when resolving
    into a reader that lacks a field, a truncated body would otherwise decode. Checking the
    declared length against what is left also bounds every allocation by the input size.
    """

    def __init__(self, data: bytes) -> None:
        super().__init__(data)
        self._size = len(data)

    def read(self, size: int | None = -1, /) -> bytes:
        if size is None or size < 0 or size > self._size - self.tell():
            raise EOFError(f"declared length {size} exceeds the input")
        return super().read(size)


class Registry:
    """Writer schemas by fingerprint, current schemas by name; encodes and decodes."""

    def __init__(self, entries: Iterable[SchemaEntry]) -> None:
        self._by_fingerprint: dict[bytes, SchemaEntry] = {}
        self._current: dict[str, SchemaEntry] = {}
        for entry in entries:
            self._add(entry)

    def _add(self, entry: SchemaEntry) -> None:
        known = self._by_fingerprint.get(entry.fingerprint)
        if known is not None:
            if known.name != entry.name:
                raise ValueError(f"fingerprint collision: {known.name} and {entry.name}")
            return  # an unchanged record repeated in a history file
        self._by_fingerprint[entry.fingerprint] = entry
        if entry.is_current:
            self._current[entry.name] = entry

    @classmethod
    def from_files(cls, current: Mapping[str, str], history: Mapping[str, str] | None = None) -> Registry:
        """Build from ``.avsc`` texts keyed by file name; ``history`` files are self-contained."""
        latest = _current_entries(current)
        old = [
            entry
            for source, text in (history or {}).items()
            for entry in _history_entries(f"history/{source}", text, latest)
        ]
        return cls([*latest.values(), *old])

    # -- lookups

    def entries(self) -> tuple[SchemaEntry, ...]:
        """Every distinct writer schema, current ones included."""
        return tuple(self._by_fingerprint.values())

    def current(self, name: str) -> SchemaEntry:
        """The current schema of a record name."""
        try:
            return self._current[name]
        except KeyError:
            raise CodecError(f"no schema named {name!r}") from None

    def names(self) -> tuple[str, ...]:
        return tuple(self._current)

    def entry(self, source: str, name: str) -> SchemaEntry:
        """The writer schema of ``name`` from one file, e.g. to key an upcaster."""
        for entry in self._by_fingerprint.values():
            if entry.name == name and entry.source == source:
                return entry
        raise KeyError(f"{name} in {source}")

    # -- encoding

    def encode(self, name: str, record: Mapping[str, Any]) -> bytes:
        """Encode ``record`` with the current schema of ``name``, header included."""
        return self.encode_with(self.current(name), record)

    @staticmethod
    def encode_with(entry: SchemaEntry, record: Mapping[str, Any]) -> bytes:
        """Encode with a given writer schema (tests use it to play an old writer)."""
        out = io.BytesIO()
        out.write(MAGIC)
        out.write(entry.fingerprint)
        try:
            schemaless_writer(out, entry.schema, record)
        except Exception as exc:  # fastavro raises many types; callers get one typed error
            raise CodecError(f"cannot encode {entry.name}: {exc!r}") from exc
        return out.getvalue()

    # -- decoding

    def decode(self, data: bytes) -> tuple[str, Record]:
        """The record name and the record, resolved into the current schema of that name."""
        entry, record = self.decode_entry(data)
        return entry.name, record

    def decode_entry(self, data: bytes) -> tuple[SchemaEntry, Record]:
        """Like :meth:`decode`, also telling which writer schema the bytes were written with."""
        entry = self.writer_of(data)
        return entry, _read(data, entry.schema, entry.reader, entry.name)

    def decode_as(self, data: bytes, reader: SchemaEntry) -> Record:
        """Resolve into ``reader`` instead of the current schema: how an older reader sees it."""
        entry = self.writer_of(data)
        if entry.name != reader.name:
            raise CodecError(f"{entry.name} cannot be read as {reader.name}")
        same = entry.fingerprint == reader.fingerprint
        return _read(data, entry.schema, None if same else reader.schema, entry.name)

    def writer_of(self, data: bytes) -> SchemaEntry:
        """The writer schema named by the header of ``data``."""
        if not isinstance(data, bytes | bytearray | memoryview):
            raise CodecError(f"expected bytes, got {type(data).__name__}")
        if len(data) < HEADER_SIZE:
            raise CodecError(f"{len(data)} bytes is shorter than the {HEADER_SIZE}-byte header")
        if data[:2] != MAGIC:
            raise CodecError(f"bad magic {bytes(data[:2]).hex()}, expected c301")
        fp = bytes(data[2:HEADER_SIZE])
        entry = self._by_fingerprint.get(fp)
        if entry is None:
            raise CodecError(f"unknown schema fingerprint {fp.hex()}")
        return entry


def _current_entries(files: Mapping[str, str]) -> dict[str, SchemaEntry]:
    """The current schema of every record; all current files share one name space."""
    defs: dict[str, Record] = {}
    sources: dict[str, str] = {}
    for source, text in files.items():
        for name, record in _definitions(json.loads(text), source).items():
            if name in defs:
                raise ValueError(f"{source}: {name} is also defined in {sources[name]}")
            defs[name], sources[name] = record, source
    return {name: _entry(name, defs, sources[name], None) for name in sorted(defs)}


def _history_entries(source: str, text: str, latest: Mapping[str, SchemaEntry]) -> list[SchemaEntry]:
    """The old writer schemas of one history file, each resolving into its current version."""
    defs = _definitions(json.loads(text), source)
    missing = sorted(set(defs) - set(latest))
    if missing:
        raise ValueError(f"{source}: {', '.join(missing)} has no current schema to resolve into")
    return [_entry(name, defs, source, latest[name].schema) for name in sorted(defs)]


def _entry(name: str, defs: Mapping[str, Record], source: str, reader: Any) -> SchemaEntry:
    linked = _Linker(defs).link(name, _namespace_of(name))
    parsed = parse_schema(linked)
    assert isinstance(parsed, dict)  # a record schema parses to a dict
    return SchemaEntry(
        name=name, fingerprint=fingerprint(linked), source=source, schema=parsed, reader=reader
    )


def _read(data: bytes, writer: Any, reader: Any, name: str) -> Record:
    """Decode the body after the header; every failure becomes a CodecError."""
    # Without resolution fastavro checks every read length itself and never skips, so
    # the plain (C-speed) BytesIO is enough; resolution can skip, so it needs the check.
    buf = io.BytesIO(data) if reader is None else _ExactReader(bytes(data))
    buf.seek(HEADER_SIZE)
    try:
        record = schemaless_reader(
            buf, writer, reader, return_record_name=True, return_record_name_override=True
        )
    except Exception as exc:  # garbage can raise anything; callers get one typed error
        raise CodecError(f"malformed {name} body: {exc!r}") from exc
    if buf.tell() != len(data):
        raise CodecError(f"{len(data) - buf.tell()} trailing bytes after {name}")
    if not isinstance(record, dict):
        raise CodecError(f"{name} did not decode to a record")
    return record


# ---------------------------------------------------------------------------
# The default registry: the package's own schema files


def _avsc_texts(folder: Traversable) -> dict[str, str]:
    return {
        item.name: item.read_text(encoding="utf-8")
        for item in sorted(folder.iterdir(), key=lambda t: t.name)
        if item.is_file() and item.name.endswith(".avsc")
    }


@functools.cache
def default_registry() -> Registry:
    """The registry of ``tickwheel/schemas/*.avsc`` and ``history/*.avsc``, loaded once."""
    root = resources.files(__package__ or "tickwheel.schemas")
    return Registry.from_files(_avsc_texts(root), _avsc_texts(root / "history"))


def encode_record(name: str, record: Mapping[str, Any]) -> bytes:
    """Single-object-encode ``record`` with the current schema named ``name``."""
    return default_registry().encode(name, record)


def decode_record(data: bytes) -> tuple[str, Record]:
    """Decode single-object bytes into (record name, record in the current schema)."""
    return default_registry().decode(data)
