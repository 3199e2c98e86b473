"""The read-model byte store contract, run against the in-memory and the RocksDB store."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tickwheel.projections.kv import KV, KVClosedError, MemoryKV, RocksKV


@pytest.fixture(params=["memory", "rocksdb"])
def kv(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[KV]:
    """Each contract test runs once per implementation."""
    store: KV = MemoryKV() if request.param == "memory" else RocksKV(tmp_path / "db")
    yield store
    store.close()


def test_put_get_and_delete(kv: KV) -> None:
    """A written value reads back; writing None deletes it."""
    kv.write({b"a": b"1", b"b": b"2"})
    assert (kv.get(b"a"), kv.get(b"zz")) == (b"1", None)
    kv.write({b"a": None})
    assert kv.get(b"a") is None
    assert kv.get_many([b"b", b"a", b"c"]) == [b"2", None, None]


def test_scan_is_ordered_bounded_and_limited(kv: KV) -> None:
    """scan returns [start, end) in byte order, at most limit rows."""
    kv.write({bytes([c]): bytes([c]) for c in b"edcba"})
    kv.write({b"b\x00": b"x"})
    assert [k for k, _ in kv.scan(b"b", b"d", 10)] == [b"b", b"b\x00", b"c"]
    assert [k for k, _ in kv.scan(b"", b"\xff", 2)] == [b"a", b"b"]
    assert kv.scan(b"x", b"z", 5) == []


def test_bad_batch_writes_nothing(kv: KV) -> None:
    """A batch with one bad entry is rejected whole: nothing of it becomes visible."""
    with pytest.raises(TypeError):
        kv.write({b"ok": b"1", b"bad": "text"})  # type: ignore[dict-item]
    assert kv.get(b"ok") is None


def test_items_lists_everything_in_order(kv: KV) -> None:
    """items() yields every pair in key order."""
    kv.write({b"k%04d" % i: b"v" for i in range(1_500)})
    keys = [k for k, _ in kv.items()]
    assert keys == sorted(keys)
    assert len(keys) == 1_500


def test_closed_store_refuses_use(kv: KV) -> None:
    """After close, every call raises KVClosedError."""
    kv.close()
    with pytest.raises(KVClosedError):
        kv.get(b"a")


def test_secondary_reader_sees_writes_after_refresh(tmp_path: Path) -> None:
    """A secondary (the gateway's view) catches up with the writer on refresh and cannot write."""
    writer = RocksKV(tmp_path / "db")
    reader = RocksKV(tmp_path / "db", secondary_path=tmp_path / "secondary")
    try:
        writer.write({b"a": b"1"})
        reader.refresh()
        assert reader.get(b"a") == b"1"
        with pytest.raises(PermissionError):
            reader.write({b"b": b"2"})
    finally:
        reader.close()
        writer.close()


def test_rocksdb_store_survives_reopen(tmp_path: Path) -> None:
    """What was written is there after the store is closed and opened again."""
    first = RocksKV(tmp_path / "db")
    first.write({b"a": b"1"})
    first.close()
    second = RocksKV(tmp_path / "db")
    try:
        assert second.get(b"a") == b"1"
    finally:
        second.close()
