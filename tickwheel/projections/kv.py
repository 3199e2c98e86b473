"""The read model's byte store: one contract, an in-memory and a RocksDB implementation.

Both are run through the same contract tests (``tests/unit/test_projection_kv.py``). Keys
sort bytewise; ``scan`` walks ``[start, end)`` in key order. ``write`` is atomic: the
projector writes folded records and its consumer offsets in one call, so after any crash
the store is exactly as of some consumed position and says which.

The RocksDB store can be opened as the single writer (the projector) or as a *secondary*
reader in another process (the gateway), which sees the writer's progress after
:meth:`KV.refresh`. RocksDB calls hold the GIL: callers on an event loop run them on one
dedicated thread.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Protocol, cast, runtime_checkable

from rocksdict import AccessType, DBCompressionType, Options, Rdict, WriteBatch, WriteOptions


class KVClosedError(RuntimeError):
    """The store was used after :meth:`KV.close`."""


@runtime_checkable
class KV(Protocol):
    """An ordered byte map with atomic multi-key writes."""

    def get(self, key: bytes) -> bytes | None: ...

    def get_many(self, keys: Sequence[bytes]) -> list[bytes | None]:
        """The value of each key, ``None`` where absent, in the order asked."""
        ...

    def scan(self, start: bytes, end: bytes, limit: int) -> list[tuple[bytes, bytes]]:
        """At most ``limit`` pairs with ``start <= key < end``, in key order."""
        ...

    def write(self, changes: Mapping[bytes, bytes | None]) -> None:
        """Put every key to its value (``None`` deletes) atomically."""
        ...

    def items(self) -> Iterator[tuple[bytes, bytes]]:
        """Every pair in key order (a snapshot for the in-memory store)."""
        ...

    def refresh(self) -> None:
        """A secondary reader catches up with the writer; otherwise nothing."""
        ...

    def close(self) -> None: ...


class MemoryKV:
    """A dict plus a sorted key list: the reference implementation for unit tests.

    A lock makes each call atomic, as RocksDB's are, so a writer thread and a reader thread
    may share one store.
    """

    def __init__(self) -> None:
        self._data: dict[bytes, bytes] = {}
        self._keys: list[bytes] = []
        self._closed = False
        self._lock = threading.Lock()

    def _check(self) -> None:
        if self._closed:
            raise KVClosedError("store is closed")

    def get(self, key: bytes) -> bytes | None:
        with self._lock:
            self._check()
            return self._data.get(key)

    def get_many(self, keys: Sequence[bytes]) -> list[bytes | None]:
        with self._lock:
            self._check()
            return [self._data.get(k) for k in keys]

    def scan(self, start: bytes, end: bytes, limit: int) -> list[tuple[bytes, bytes]]:
        with self._lock:
            self._check()
            lo = bisect.bisect_left(self._keys, start)
            hi = bisect.bisect_left(self._keys, end)
            return [(k, self._data[k]) for k in self._keys[lo : min(hi, lo + max(limit, 0))]]

    def write(self, changes: Mapping[bytes, bytes | None]) -> None:
        _check_types(changes)
        with self._lock:
            self._check()
            for key, value in changes.items():
                self._write_one(key, value)

    def _write_one(self, key: bytes, value: bytes | None) -> None:
        if value is None:
            if self._data.pop(key, None) is not None:
                del self._keys[bisect.bisect_left(self._keys, key)]
            return
        if key not in self._data:
            bisect.insort(self._keys, key)
        self._data[key] = value

    def items(self) -> Iterator[tuple[bytes, bytes]]:
        with self._lock:
            self._check()
            return iter([(k, self._data[k]) for k in self._keys])

    def refresh(self) -> None:
        self._check()

    def close(self) -> None:
        self._closed = True


def _check_types(changes: Mapping[bytes, bytes | None]) -> None:
    """Reject a bad batch before anything of it is written."""
    for key, value in changes.items():
        if not isinstance(key, bytes) or not (value is None or isinstance(value, bytes)):
            raise TypeError(f"keys and values must be bytes, got {type(key)} -> {type(value)}")


def _options() -> Options:
    opts = Options(raw_mode=True)
    opts.create_if_missing(True)
    opts.set_max_background_jobs(2)
    opts.set_keep_log_file_num(3)
    opts.set_compression_type(DBCompressionType.lz4())
    # A secondary must be able to open every file the primary lists.
    opts.set_max_open_files(-1)
    return opts


class RocksKV:
    """The production store: rocksdict in raw mode, one WriteBatch per :meth:`write`.

    Writes skip fsync: the read model is disposable and its offsets travel in the same
    batch, so a write lost with the machine is simply read again from Kafka.
    """

    def __init__(self, path: Path, *, secondary_path: Path | None = None) -> None:
        self.path = path
        self.read_only = secondary_path is not None
        if secondary_path is None:
            path.mkdir(parents=True, exist_ok=True)
            db = Rdict(str(path), _options())
        else:
            secondary_path.mkdir(parents=True, exist_ok=True)
            access = AccessType.secondary(str(secondary_path))
            db = Rdict(str(path), _options(), access_type=access)
        self._db: Rdict | None = db
        self._write_opts = WriteOptions()

    def _open(self) -> Rdict:
        if self._db is None:
            raise KVClosedError(f"store at {self.path} is closed")
        return self._db

    def get(self, key: bytes) -> bytes | None:
        value: bytes | None = self._open().get(key)
        return value

    def get_many(self, keys: Sequence[bytes]) -> list[bytes | None]:
        if not keys:
            return []
        return cast(list[bytes | None], self._open().get(list(keys)))

    def scan(self, start: bytes, end: bytes, limit: int) -> list[tuple[bytes, bytes]]:
        it = self._open().iter()
        found: list[tuple[bytes, bytes]] = []
        try:
            it.seek(start)
            while it.valid() and len(found) < limit:
                key = it.key()
                if key >= end:
                    break
                found.append((key, it.value()))
                it.next()
        finally:
            del it  # an open iterator pins the database
        return found

    def write(self, changes: Mapping[bytes, bytes | None]) -> None:
        db = self._open()
        if self.read_only:
            raise PermissionError(f"store at {self.path} is opened read-only")
        _check_types(changes)
        batch = WriteBatch(raw_mode=True)
        for key, value in changes.items():
            if value is None:
                batch.delete(key)
            else:
                batch.put(key, value)
        db.write(batch, self._write_opts)

    def items(self) -> Iterator[tuple[bytes, bytes]]:
        start = b""
        while True:
            chunk = self.scan(start, b"\xff" * 8, 1_024)
            yield from chunk
            if len(chunk) < 1_024:
                return
            start = chunk[-1][0] + b"\x00"

    def refresh(self) -> None:
        db = self._open()
        if self.read_only:
            db.try_catch_up_with_primary()

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None
