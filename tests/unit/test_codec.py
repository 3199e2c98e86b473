"""The single-object-encoding codec: fingerprints, header bytes, registry, and hostile input."""

from __future__ import annotations

import contextlib
import json
import tracemalloc
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tickwheel.schemas.codec import (
    HEADER_SIZE,
    MAGIC,
    CodecError,
    Registry,
    SchemaEntry,
    canonical_form,
    crc64_avro,
    decode_record,
    default_registry,
    encode_record,
    fingerprint,
)
from tickwheel.schemas.mappers import to_bytes
from tickwheel.schemas.model import ExecutorSpec, JobSpec, JobState, JobStatus, OneTime

RUN_DUE = "tickwheel.v1.RunDue"
REGISTRY = default_registry()

RUN_DUE_RECORD: dict[str, Any] = {
    "run_id": "r-1",
    "job_id": "job-1",
    "team": "payments",
    "pool": "default",
    "attempt": 1,
    "scheduled_for_ms": 1_767_225_600_000,
    "not_before_ms": 1_767_225_600_000,
    "emitted_at_ms": 1_767_225_590_000,
    "trigger": "scheduled",
    "executor": {"kind": "http", "config_json": "{}"},
    "timeout_ms": 60_000,
    "lease_ms": 30_000,
    "tz_version": "2025b",
    "flags": ["lookahead"],
}

# Current fingerprints, pinned. A failure here means a schema's canonical form changed:
# copy the old version into schemas/history/ (so old bytes stay readable), then update this.
PINNED = {
    "tickwheel.v1.AttemptRecord": "7475dd8c8be437c0",
    "tickwheel.v1.AuditRecord": "430e6ada6e571306",
    "tickwheel.v1.CancelJob": "ce4c96fa653a7ec9",
    "tickwheel.v1.CommandMeta": "f1c98f970005d580",
    "tickwheel.v1.CreateJob": "e46a828ad694023d",
    "tickwheel.v1.CronSchedule": "f29af54cd0d103b1",
    "tickwheel.v1.DeadLetter": "89263ce561d577da",
    "tickwheel.v1.DeleteJob": "44eaaa12dba5fbaf",
    "tickwheel.v1.ExecutorSpec": "f4c8efd91539b3b7",
    "tickwheel.v1.JobAccepted": "1be83fc8a9db7c84",
    "tickwheel.v1.JobChanged": "f118493ac93e8a82",
    "tickwheel.v1.JobRejected": "4a99b28351631742",
    "tickwheel.v1.JobSpec": "da14c2a0d97b72d1",
    "tickwheel.v1.JobState": "cbe8b34c7814b989",
    "tickwheel.v1.LogChunk": "29c95e8ee7e242d3",
    "tickwheel.v1.OneTime": "6e2a5c710a93c239",
    "tickwheel.v1.PauseJob": "aa2ea1e1957c4a0b",
    "tickwheel.v1.ResumeJob": "73ba0915bd8679f7",
    "tickwheel.v1.RetryPolicy": "a907e6f09d356cb4",
    "tickwheel.v1.RunCancelled": "4cfa563703ef14ee",
    "tickwheel.v1.RunDue": "521ba3f4f2286088",
    "tickwheel.v1.RunFailed": "769bfca26edfc292",
    "tickwheel.v1.RunHeartbeat": "96297e79fe5cd25e",
    "tickwheel.v1.RunSettled": "61abc966531c97cb",
    "tickwheel.v1.RunSkipped": "bd5e5df0e8dcca88",
    "tickwheel.v1.RunStarted": "f58ce4b41bce1508",
    "tickwheel.v1.RunState": "ca73a24665c53433",
    "tickwheel.v1.RunSucceeded": "253d4f162dda80bd",
    "tickwheel.v1.RunTimedOut": "85532d55f4cf7540",
    "tickwheel.v1.TriggerJob": "279fa8013f86f602",
    "tickwheel.v1.UpdateJob": "b233db193ffcf49c",
}

# From the Avro project's share/test/data/schema-tests.txt: (schema, canonical form,
# CRC-64-AVRO as a signed Java long). In case 026 the default "true" became true: fastavro
# validates defaults, and a default is not part of the canonical form either way.
AVRO_SPEC_VECTORS = [
    ('"null"', '"null"', 7195948357588979594),
    ('{"type":"int"}', '"int"', 8247732601305521295),
    ('"string"', '"string"', -8142146995180207161),
    ('["int", {"type":"boolean"}]', '["int","boolean"]', 5392556393470105090),
    (
        '{"fields":[], "type":"record", "name":"foo", "namespace":"x.y"}',
        '{"name":"x.y.foo","type":"record","fields":[]}',
        5916914534497305771,
    ),
    (
        '{"fields":[{"type":"boolean","aliases":[],"name":"f1","default":true},'
        '{"order":"descending","name":"f2","doc":"Hello","type":"int"}],"type":"record","name":"foo"}',
        '{"name":"foo","type":"record","fields":[{"name":"f1","type":"boolean"},{"name":"f2","type":"int"}]}',
        -4860222112080293046,
    ),
    ('{"items":{"type":"null"}, "type":"array"}', '{"type":"array","items":"null"}', -589620603366471059),
    ('{"values":"string", "type":"map"}', '{"type":"map","values":"string"}', -8732877298790414990),
]


def _valid() -> bytes:
    return encode_record(RUN_DUE, RUN_DUE_RECORD)


# ---------------------------------------------------------------------------
# Fingerprints and the header


def test_crc64_avro_of_int_matches_the_spec_value() -> None:
    """CRC-64-AVRO of the canonical form "int" is 0x7275d51a3f395c8f, as the Avro spec's tests say."""
    assert crc64_avro(b'"int"') == 0x7275D51A3F395C8F


def test_crc64_avro_of_empty_input_is_the_empty_constant() -> None:
    """The fingerprint of no bytes is the spec's EMPTY constant, the algorithm's seed."""
    assert crc64_avro(b"") == 0xC15D213AA4D7A795


@pytest.mark.parametrize(("schema", "canonical", "signed"), AVRO_SPEC_VECTORS)
def test_canonical_form_and_fingerprint_match_the_avro_test_vectors(
    schema: str, canonical: str, signed: int
) -> None:
    """Parsing Canonical Form and CRC-64-AVRO agree with the Avro project's published vectors."""
    assert canonical_form(json.loads(schema)) == canonical
    assert fingerprint(json.loads(schema)) == (signed % 2**64).to_bytes(8, "little")


def test_single_object_header_for_int_is_the_spec_example() -> None:
    """The header of schema "int" is C3 01 8F 5C 39 3F 1A D5 75 72 (little-endian fingerprint)."""
    assert MAGIC + fingerprint("int") == bytes.fromhex("c3018f5c393f1ad57572")


def test_encoded_record_starts_with_magic_and_writer_fingerprint() -> None:
    """Every encoding is C3 01, then the current schema's fingerprint, then the body."""
    data = _valid()
    entry = REGISTRY.current(RUN_DUE)
    assert data[:2] == b"\xc3\x01"
    assert data[2:HEADER_SIZE] == entry.fingerprint == fingerprint(entry.schema)
    assert len(data) > HEADER_SIZE


def test_current_fingerprints_are_pinned() -> None:
    """Changing a schema's canonical form fails here until the old version goes to history/."""
    current = {e.name: e.fingerprint.hex() for e in REGISTRY.entries() if e.is_current}
    assert current == PINNED


def test_docs_and_defaults_do_not_change_a_fingerprint() -> None:
    """Only the parsing-relevant parts of a schema are fingerprinted: docs/defaults may change freely."""
    plain = [{"type": "record", "name": "A", "namespace": "t", "fields": [{"name": "x", "type": "long"}]}]
    decorated = [{**plain[0], "doc": "why", "fields": [{"name": "x", "type": "long", "default": 7}]}]
    one = Registry.from_files({"a.avsc": json.dumps(plain)}).current("t.A")
    two = Registry.from_files({"a.avsc": json.dumps(decorated)}).current("t.A")
    assert one.fingerprint == two.fingerprint


def test_fingerprints_are_stable_across_loads() -> None:
    """Loading the schema files twice yields identical fingerprints (no dict-order dependence)."""
    again = Registry.from_files({"runs.avsc": _text("runs.avsc"), "commands.avsc": _text("commands.avsc")})
    assert again.current(RUN_DUE).fingerprint == REGISTRY.current(RUN_DUE).fingerprint


def _text(name: str) -> str:
    from importlib import resources

    return (resources.files("tickwheel.schemas") / name).read_text(encoding="utf-8")


# ---------------------------------------------------------------------------
# The registry


def test_registry_loads_every_schema_file_and_history() -> None:
    """The package data yields the seven families and at least one historical writer schema."""
    sources = {e.source for e in REGISTRY.entries()}
    families = {"commands", "runs", "outcomes", "job_events", "dlq", "audit", "state"}
    assert {f"{family}.avsc" for family in families} <= sources
    assert any(source.startswith("history/") for source in sources)


def test_cross_file_references_are_inlined() -> None:
    """RunDue refers to ExecutorSpec from commands.avsc; its writer schema is still self-contained."""
    assert '"name":"tickwheel.v1.ExecutorSpec"' in canonical_form(REGISTRY.current(RUN_DUE).schema)


def test_a_name_defined_twice_is_rejected() -> None:
    """Two current files may not both define the same record name."""
    record = json.dumps([{"type": "record", "name": "A", "namespace": "t", "fields": []}])
    with pytest.raises(ValueError, match="also defined"):
        Registry.from_files({"a.avsc": record, "b.avsc": record})


def test_an_unknown_type_reference_is_rejected() -> None:
    """A field typed with a name no file defines fails at load, not at first decode."""
    fields = [{"name": "x", "type": "B"}]
    record = json.dumps([{"type": "record", "name": "A", "namespace": "t", "fields": fields}])
    with pytest.raises(ValueError, match=r"unknown type t\.B"):
        Registry.from_files({"a.avsc": record})


def test_a_history_record_without_a_current_version_is_rejected() -> None:
    """Every historical writer must have a current reader of the same name to resolve into."""
    old = json.dumps([{"type": "record", "name": "Gone", "namespace": "t", "fields": []}])
    with pytest.raises(ValueError, match="no current schema"):
        Registry.from_files({}, {"gone_v0.avsc": old})


def test_encode_with_an_unknown_name_is_a_codec_error() -> None:
    """Encoding a record name no schema defines raises CodecError."""
    with pytest.raises(CodecError, match="no schema named"):
        encode_record("tickwheel.v1.Nope", {})


def test_encode_of_a_mistyped_record_is_a_codec_error() -> None:
    """A record that does not fit its schema raises CodecError, not fastavro's own error."""
    with pytest.raises(CodecError, match="cannot encode"):
        encode_record(RUN_DUE, {**RUN_DUE_RECORD, "attempt": "one"})


def test_encode_of_an_out_of_range_long_is_a_codec_error() -> None:
    """Avro longs are 64-bit: 2**63 cannot be encoded."""
    with pytest.raises(CodecError):
        encode_record(RUN_DUE, {**RUN_DUE_RECORD, "attempt": 2**63})


def test_round_trip_of_a_current_record() -> None:
    """decode_record(encode_record(...)) returns the name and the same record."""
    assert decode_record(_valid()) == (RUN_DUE, RUN_DUE_RECORD)


def test_decode_as_an_unrelated_reader_is_a_codec_error() -> None:
    """Bytes of one record cannot be resolved into a reader of another name."""
    with pytest.raises(CodecError, match="cannot be read as"):
        REGISTRY.decode_as(_valid(), REGISTRY.current("tickwheel.v1.LogChunk"))


# ---------------------------------------------------------------------------
# Hostile input: only CodecError, ever


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "shorter than"),
        (b"\xc3\x01\x00", "shorter than"),
        (b"\xc3\x02" + bytes(8) + b"\x00", "bad magic"),
        (b"\xc3\x01" + bytes(8) + b"\x00", "unknown schema fingerprint"),
    ],
)
def test_malformed_header_is_a_codec_error(data: bytes, message: str) -> None:
    """Short input, wrong magic and unknown fingerprints each raise CodecError with a reason."""
    with pytest.raises(CodecError, match=message):
        decode_record(data)


def test_non_bytes_input_is_a_codec_error() -> None:
    """A str (or None) where bytes belong raises CodecError rather than TypeError."""
    with pytest.raises(CodecError, match="expected bytes"):
        decode_record("c301")  # type: ignore[arg-type]


def test_trailing_bytes_are_a_codec_error() -> None:
    """Anything after a complete body is rejected: a record is exactly one value."""
    with pytest.raises(CodecError, match="trailing"):
        decode_record(_valid() + b"\x00")


def test_every_truncation_of_a_valid_record_is_a_codec_error() -> None:
    """Cutting a valid encoding at any length short of complete raises CodecError."""
    data = _valid()
    for cut in range(len(data)):
        with pytest.raises(CodecError):
            decode_record(data[:cut])


def test_every_truncation_is_a_codec_error_when_resolving_into_an_old_reader() -> None:
    """Resolution skips fields the reader lacks; a truncated skipped *last* field is still caught.

    JobState's last field, tz_version, is unknown to the v0 reader. fastavro checks what it
    reads but not what it skips, so without the codec's exact reader a cut inside that
    string would decode "successfully".
    """
    old = REGISTRY.entry("history/state_v0.avsc", "tickwheel.v1.JobState")
    spec = JobSpec(team="t", name="n", schedule=OneTime(at_ms=1), executor=ExecutorSpec("http"))
    state = JobState("job-1", spec, 1, JobStatus.ACTIVE, None, None, tz_version="2025b")
    data = to_bytes(state)
    assert data.endswith(b"2025b")
    assert REGISTRY.decode_as(data, old)["job_id"] == "job-1"
    for cut in range(len(data)):
        with pytest.raises(CodecError):
            REGISTRY.decode_as(data[:cut], old)


def _header(name: str = RUN_DUE) -> bytes:
    return MAGIC + REGISTRY.current(name).fingerprint


@pytest.mark.parametrize("length", [2**31 - 1, 2**62, -5])
def test_absurd_declared_length_neither_allocates_nor_escapes(length: int) -> None:
    """A varint claiming a 2 GB (or negative) string raises CodecError without allocating it."""
    zigzag = (length << 1) ^ (length >> 63)
    varint = bytearray()
    while zigzag > 0x7F:
        varint.append((zigzag & 0x7F) | 0x80)
        zigzag >>= 7
    varint.append(zigzag)
    old = REGISTRY.entry("history/runs_v0.avsc", RUN_DUE)
    tracemalloc.start()
    try:
        with pytest.raises(CodecError):
            decode_record(_header() + bytes(varint) + b"abc")
        with pytest.raises(CodecError):
            REGISTRY.decode_as(_header() + bytes(varint) + b"abc", old)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1_000_000


def test_absurd_array_count_is_a_codec_error() -> None:
    """A huge array block count runs out of input quickly instead of looping or allocating."""
    prefix = _valid()[: -len(b"\x02\x12lookahead\x00")]
    with pytest.raises(CodecError):
        decode_record(prefix + b"\xfe\xff\xff\xff\xff\xff\xff\xff\x7f" + b"\x02a")


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=64))
def test_arbitrary_bytes_raise_only_codec_error(data: bytes) -> None:
    """Random bytes decode or raise CodecError; no other exception escapes."""
    with contextlib.suppress(CodecError):
        decode_record(data)


_FINGERPRINTS = sorted(e.fingerprint for e in REGISTRY.entries())


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(_FINGERPRINTS), st.binary(max_size=128))
def test_valid_header_with_random_body_raises_only_codec_error(fp: bytes, body: bytes) -> None:
    """A known fingerprint (current or historical) followed by garbage never escapes as another error."""
    with contextlib.suppress(CodecError):
        decode_record(MAGIC + fp + body)


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_mutated_valid_record_raises_only_codec_error(data: st.DataObject) -> None:
    """Flipping bytes inside a valid body decodes to something or raises CodecError."""
    body = bytearray(_valid())
    for _ in range(data.draw(st.integers(1, 4))):
        body[data.draw(st.integers(HEADER_SIZE, len(body) - 1))] = data.draw(st.integers(0, 255))
    with contextlib.suppress(CodecError):
        decode_record(bytes(body))


def test_entry_repr_is_short() -> None:
    """SchemaEntry's repr names the record and source without dumping the schema."""
    entry = REGISTRY.current(RUN_DUE)
    assert isinstance(entry, SchemaEntry)
    assert "fields" not in repr(entry)
