"""The per-partition state store: a local cache of the scheduler changelog.

Three keyspaces (RocksDB column families of the same names)::

    jobs    job_id (UTF-8)          -> job state bytes, exactly the changelog record value
    timers  Timer.key()             -> team  (be64(due_ms) | job_id | 0x00 | kind | run_id)
    meta    b"changelog_offset"     -> be64 offset of the next changelog record to apply

Timer keys sort by due time, so "what is due until T" is a seek plus a range scan of exactly
the due entries: O(due), never O(jobs).

The processor writes the store only after its Kafka transaction commits, as one atomic
:class:`StoreBatch` carrying the changelog offset, so after any crash the store is exactly as
of some committed step and says which. It calls the store from one dedicated thread: the
implementations are safe for use from one thread at a time, not concurrently.
"""

from __future__ import annotations

import bisect
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, cast, runtime_checkable

from rocksdict import (
    BlockBasedOptions,
    Cache,
    ColumnFamily,
    DBCompressionType,
    Options,
    Rdict,
    ReadOptions,
    WriteBatch,
    WriteOptions,
)

from tickwheel.streams.timers import Timer, due_prefix

JOBS_CF = "jobs"
TIMERS_CF = "timers"
META_CF = "meta"
OFFSET_KEY = b"changelog_offset"

_BE64 = struct.Struct(">Q")
# Due times are unsigned 64-bit in the key; this is one past the largest.
_END_MS = 1 << 64
# Greater than every timer key: be64 of at most 0xff..ff, then UTF-8, which has no 0xff byte.
_ABOVE_ALL_KEYS = b"\xff" * 9
# Rows fetched per RocksDB iterator in iter_jobs: no iterator outlives one chunk, so a
# half-consumed generator never pins the database open.
_ITER_CHUNK = 1_024


class StoreClosedError(RuntimeError):
    """The store was used after :meth:`StateStore.close`."""


@dataclass
class StoreBatch:
    """Everything one committed processor step changes, applied atomically.

    ``jobs`` maps a job id to its new state bytes, or to ``None`` to delete the job.
    Timer deletions are applied before additions, so a timer in both sets ends up present.
    ``changelog_offset``, when set, is the offset of the next changelog record to apply.
    """

    jobs: dict[str, bytes | None] = field(default_factory=dict)
    timers_add: set[Timer] = field(default_factory=set)
    timers_del: set[Timer] = field(default_factory=set)
    changelog_offset: int | None = None


@runtime_checkable
class StateStore(Protocol):
    """A partition's job states, timer index and changelog position."""

    def get(self, job_id: str) -> bytes | None:
        """The state bytes of ``job_id``, or ``None``."""
        ...

    def get_many(self, job_ids: Iterable[str]) -> dict[str, bytes]:
        """The state bytes of each present job id; absent ids are omitted. One multi-get."""
        ...

    def apply(self, batch: StoreBatch) -> None:
        """Apply ``batch`` atomically: if it raises, nothing of it is visible."""
        ...

    def due(self, until_ms: int, limit: int) -> list[Timer]:
        """At most ``limit`` timers with ``due_ms <= until_ms``, in key order."""
        ...

    def timers_between(self, from_ms: int, until_ms: int, limit: int) -> list[Timer]:
        """At most ``limit`` timers with ``from_ms <= due_ms < until_ms``, in key order."""
        ...

    def timers_from(self, start_key: bytes, until_ms: int, limit: int) -> list[Timer]:
        """At most ``limit`` timers with ``key >= start_key`` and ``due_ms < until_ms``, in key
        order: resumes a scan in the middle of an instant (the wheel's bounded refill)."""
        ...

    def next_due_ms(self) -> int | None:
        """The earliest due time of any timer, or ``None`` when there is none."""
        ...

    def changelog_offset(self) -> int | None:
        """The offset of the next changelog record to apply, or ``None`` if never set."""
        ...

    def iter_jobs(self) -> Iterator[tuple[str, bytes]]:
        """All ``(job_id, state)`` pairs in job-id byte order. Do not apply while iterating."""
        ...

    def count_jobs(self) -> int:
        """The number of jobs: exact in memory, an estimate in RocksDB."""
        ...

    def count_timers(self) -> int:
        """The number of timers: exact in memory, an estimate in RocksDB."""
        ...

    def clear(self) -> None:
        """Drop every job, timer and the changelog offset (before a rebuild)."""
        ...

    def close(self) -> None:
        """Release the store; later calls raise :class:`StoreClosedError`. Idempotent."""
        ...


# ---------------------------------------------------------------------------
# Batch encoding, shared so both stores accept and reject exactly the same batches


@dataclass(frozen=True, slots=True)
class _Encoded:
    job_puts: list[tuple[bytes, bytes]]
    job_dels: list[bytes]
    timer_adds: list[tuple[bytes, bytes]]  # (key, team)
    timer_dels: list[bytes]
    offset: bytes | None


def _encode(batch: StoreBatch) -> _Encoded:
    """Encode and validate a whole batch before anything is written, so a bad one writes nothing."""
    puts: list[tuple[bytes, bytes]] = []
    dels: list[bytes] = []
    for job_id, value in batch.jobs.items():
        if value is None:
            dels.append(job_id.encode())
        elif isinstance(value, bytes):
            puts.append((job_id.encode(), value))
        else:
            raise TypeError(f"job {job_id!r}: state must be bytes, not {type(value).__name__}")
    return _Encoded(
        job_puts=puts,
        job_dels=dels,
        timer_adds=[(t.key(), t.team.encode()) for t in batch.timers_add],
        timer_dels=[t.key() for t in batch.timers_del],
        offset=None if batch.changelog_offset is None else _encode_offset(batch.changelog_offset),
    )


def _encode_offset(offset: int) -> bytes:
    if offset < 0:
        raise ValueError(f"changelog offset must be >= 0, got {offset}")
    return _BE64.pack(offset)


def _decode_offset(raw: bytes | None) -> int | None:
    return None if raw is None else int(_BE64.unpack(raw)[0])


def _start_key(from_ms: int) -> bytes:
    """The smallest key due at or after ``from_ms`` (clipped to what a be64 can hold)."""
    return due_prefix(min(max(from_ms, 0), _END_MS - 1))


def _end_key(until_ms: int) -> bytes | None:
    """The exclusive upper bound key for ``due_ms < until_ms``; None: no bound."""
    return None if until_ms >= _END_MS else due_prefix(max(until_ms, 0))


def _empty_range(start_key: bytes, end_key: bytes | None, limit: int) -> bool:
    return limit <= 0 or (end_key is not None and start_key >= end_key)


# ---------------------------------------------------------------------------
# In memory


class MemoryStore:
    """A dict-and-sorted-list store for unit tests; timer order is byte order, as in RocksDB."""

    def __init__(self) -> None:
        self._jobs: dict[str, bytes] = {}
        self._timer_keys: list[bytes] = []  # sorted
        self._timer_set: dict[bytes, bytes] = {}  # key -> team
        self._offset: int | None = None
        self._closed = False

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosedError("store is closed")

    def get(self, job_id: str) -> bytes | None:
        """The state bytes of ``job_id``, or ``None``."""
        self._check_open()
        return self._jobs.get(job_id)

    def get_many(self, job_ids: Iterable[str]) -> dict[str, bytes]:
        """The state bytes of each present job id; absent ids are omitted."""
        self._check_open()
        return {j: self._jobs[j] for j in job_ids if j in self._jobs}

    def apply(self, batch: StoreBatch) -> None:
        """Apply ``batch`` atomically: everything is encoded before the first change."""
        self._check_open()
        enc = _encode(batch)
        for key, value in enc.job_puts:
            self._jobs[key.decode()] = value
        for key in enc.job_dels:
            self._jobs.pop(key.decode(), None)
        for key in enc.timer_dels:
            self._del_timer(key)
        for key, team in enc.timer_adds:
            self._add_timer(key, team)
        if batch.changelog_offset is not None:
            self._offset = batch.changelog_offset

    def _add_timer(self, key: bytes, team: bytes) -> None:
        if key not in self._timer_set:
            self._timer_set[key] = team
            bisect.insort(self._timer_keys, key)
        else:
            self._timer_set[key] = team

    def _del_timer(self, key: bytes) -> None:
        if key in self._timer_set:
            del self._timer_set[key]
            del self._timer_keys[bisect.bisect_left(self._timer_keys, key)]

    def due(self, until_ms: int, limit: int) -> list[Timer]:
        """At most ``limit`` timers with ``due_ms <= until_ms``, in key order."""
        return self.timers_between(0, until_ms + 1, limit)

    def timers_between(self, from_ms: int, until_ms: int, limit: int) -> list[Timer]:
        """At most ``limit`` timers with ``from_ms <= due_ms < until_ms``, in key order."""
        if from_ms >= until_ms or from_ms >= _END_MS:
            self._check_open()
            return []
        return self.timers_from(_start_key(from_ms), until_ms, limit)

    def timers_from(self, start_key: bytes, until_ms: int, limit: int) -> list[Timer]:
        """At most ``limit`` timers with ``key >= start_key`` and ``due_ms < until_ms``."""
        self._check_open()
        end_key = _end_key(until_ms)
        if _empty_range(start_key, end_key, limit):
            return []
        keys = self._timer_keys
        lo = bisect.bisect_left(keys, start_key)
        hi = len(keys) if end_key is None else bisect.bisect_left(keys, end_key)
        return [Timer.from_key(k, self._timer_set[k]) for k in keys[lo : min(hi, lo + limit)]]

    def next_due_ms(self) -> int | None:
        """The earliest due time of any timer, or ``None``."""
        self._check_open()
        return Timer.from_key(self._timer_keys[0]).due_ms if self._timer_keys else None

    def changelog_offset(self) -> int | None:
        """The offset of the next changelog record to apply, or ``None``."""
        self._check_open()
        return self._offset

    def iter_jobs(self) -> Iterator[tuple[str, bytes]]:
        """All ``(job_id, state)`` pairs in job-id byte order (a snapshot)."""
        self._check_open()
        return iter(sorted(self._jobs.items()))

    def count_jobs(self) -> int:
        """The exact number of jobs."""
        self._check_open()
        return len(self._jobs)

    def count_timers(self) -> int:
        """The exact number of timers."""
        self._check_open()
        return len(self._timer_keys)

    def clear(self) -> None:
        """Drop everything."""
        self._check_open()
        self._jobs.clear()
        self._timer_keys.clear()
        self._timer_set.clear()
        self._offset = None

    def close(self) -> None:
        """Release the store; later calls raise :class:`StoreClosedError`."""
        self._closed = True


# ---------------------------------------------------------------------------
# RocksDB


def _db_options() -> Options:
    opts = Options(raw_mode=True)
    opts.create_if_missing(True)
    opts.create_missing_column_families(True)
    # Partitions share small machines: two background threads per store is plenty.
    opts.set_max_background_jobs(2)
    opts.set_keep_log_file_num(3)
    # With three column families a quiet one (meta) would pin old WAL files forever;
    # a cap forces its memtable to flush.
    opts.set_max_total_wal_size(64 << 20)
    return opts


def _table(cache: Cache, *, bloom: bool) -> BlockBasedOptions:
    table = BlockBasedOptions()
    table.set_block_cache(cache)
    table.set_cache_index_and_filter_blocks(True)
    table.set_pin_l0_filter_and_index_blocks_in_cache(True)
    if bloom:
        table.set_bloom_filter(10, False)  # full (not block-based) filter, ~1% false positives
    return table


def _jobs_options(cache: Cache) -> Options:
    opts = Options(raw_mode=True)
    # Point lookups by job id, many of them misses (new jobs): a bloom filter skips the reads.
    opts.set_block_based_table_factory(_table(cache, bloom=True))
    opts.set_compression_type(DBCompressionType.lz4())
    opts.set_write_buffer_size(32 << 20)
    return opts


def _timers_options(cache: Cache) -> Options:
    opts = Options(raw_mode=True)
    # Only range scans across due times read this family, so no prefix extractor (it would
    # force total-order seeks anyway) and no bloom filter (scans cannot use one).
    opts.set_block_based_table_factory(_table(cache, bloom=False))
    opts.set_compression_type(DBCompressionType.lz4())
    opts.set_write_buffer_size(16 << 20)
    # Fired timers are deleted right behind the scan position, queue style: compact files
    # dense with tombstones early so scans do not wade through them.
    opts.add_compact_on_deletion_collector_factory(10_000, 5_000, 0.5)
    return opts


def _meta_options() -> Options:
    return Options(raw_mode=True)


@dataclass(frozen=True, slots=True)
class _Handles:
    """Every reference into an open database; dropping them all is what lets it close."""

    db: Rdict
    jobs: Rdict
    timers: Rdict
    meta: Rdict
    jobs_cf: ColumnFamily
    timers_cf: ColumnFamily
    meta_cf: ColumnFamily

    @classmethod
    def of(cls, db: Rdict) -> _Handles:
        return cls(
            db=db,
            jobs=db.get_column_family(JOBS_CF),
            timers=db.get_column_family(TIMERS_CF),
            meta=db.get_column_family(META_CF),
            jobs_cf=db.get_column_family_handle(JOBS_CF),
            timers_cf=db.get_column_family_handle(TIMERS_CF),
            meta_cf=db.get_column_family_handle(META_CF),
        )


class RocksDBStore:
    """The production store: RocksDB via rocksdict, raw bytes, one WriteBatch per apply.

    Writes go to the WAL without fsync unless ``sync``: the store is a cache of the
    changelog, and a write lost with the machine is replayed from Kafka on restart.
    """

    def __init__(self, path: Path, *, sync: bool = False, block_cache_bytes: int = 32 << 20) -> None:
        self._path = path
        self._cache = Cache(block_cache_bytes)
        self._write_opts = WriteOptions()
        self._write_opts.sync = sync
        # No live timer key is below this: scans start here instead of at the beginning,
        # so the tombstones of fired timers are walked once, not on every tick.
        self._floor = b""
        path.mkdir(parents=True, exist_ok=True)
        db = Rdict(str(path), _db_options(), column_families=self._cf_options())
        self._h: _Handles | None = _Handles.of(db)

    def _cf_options(self) -> dict[str, Options]:
        return {
            JOBS_CF: _jobs_options(self._cache),
            TIMERS_CF: _timers_options(self._cache),
            META_CF: _meta_options(),
        }

    def _open(self) -> _Handles:
        if self._h is None:
            raise StoreClosedError(f"store at {self._path} is closed")
        return self._h

    def get(self, job_id: str) -> bytes | None:
        """The state bytes of ``job_id``, or ``None``."""
        value: bytes | None = self._open().jobs.get(job_id.encode())
        return value

    def compact_timers(self) -> None:
        """Merge the timer index into one sorted run (blocking): a bulk load leaves many
        overlapping files, and every seek pays for each until background compaction ends."""
        self._open().timers.compact_range(None, None)

    def get_many(self, job_ids: Iterable[str]) -> dict[str, bytes]:
        """The state bytes of each present job id, fetched with one RocksDB multi-get."""
        h = self._open()
        ids = list(job_ids)
        if not ids:
            return {}
        values = cast("list[bytes | None]", h.jobs[[j.encode() for j in ids]])
        return {j: v for j, v in zip(ids, values, strict=True) if v is not None}

    def apply(self, batch: StoreBatch) -> None:
        """Apply ``batch`` as one RocksDB WriteBatch, the changelog offset included."""
        h = self._open()
        enc = _encode(batch)
        wb = WriteBatch(raw_mode=True)
        for key, value in enc.job_puts:
            wb.put(key, value, h.jobs_cf)
        for key in enc.job_dels:
            wb.delete(key, h.jobs_cf)
        for key in enc.timer_dels:
            wb.delete(key, h.timers_cf)
        for key, team in enc.timer_adds:
            wb.put(key, team, h.timers_cf)
        if enc.offset is not None:
            wb.put(OFFSET_KEY, enc.offset, h.meta_cf)
        h.db.write(wb, self._write_opts)
        if enc.timer_adds:
            self._floor = min(self._floor, *(key for key, _ in enc.timer_adds))

    def due(self, until_ms: int, limit: int) -> list[Timer]:
        """At most ``limit`` timers with ``due_ms <= until_ms``, in key order."""
        return self.timers_between(0, until_ms + 1, limit)

    def timers_between(self, from_ms: int, until_ms: int, limit: int) -> list[Timer]:
        """At most ``limit`` timers with ``from_ms <= due_ms < until_ms``, in key order."""
        if from_ms >= until_ms or from_ms >= _END_MS:
            self._open()
            return []
        return self.timers_from(_start_key(from_ms), until_ms, limit)

    def timers_from(self, start_key: bytes, until_ms: int, limit: int) -> list[Timer]:
        """At most ``limit`` timers with ``key >= start_key`` and ``due_ms < until_ms``: a seek,
        then a scan bounded by ``until_ms`` that reads only the entries it returns."""
        h = self._open()
        end_key = _end_key(until_ms)
        from_floor = start_key <= self._floor
        start_key = max(start_key, self._floor)
        if _empty_range(start_key, end_key, limit):
            return []
        read_opts = ReadOptions()
        if end_key is not None:
            read_opts.set_iterate_upper_bound(end_key)
        it = h.timers.iter(read_opts)
        it.seek(start_key)
        entries: list[tuple[bytes, bytes]] = []
        while len(entries) < limit and it.valid():
            entries.append((it.key(), it.value()))
            it.next()
        if from_floor:
            self._floor = entries[0][0] if entries else (end_key or _ABOVE_ALL_KEYS)
        return [Timer.from_key(k, v) for k, v in entries]

    def next_due_ms(self) -> int | None:
        """The earliest due time of any timer, or ``None``."""
        first = self.timers_between(0, _END_MS, 1)
        return first[0].due_ms if first else None

    def changelog_offset(self) -> int | None:
        """The offset of the next changelog record to apply, or ``None``."""
        return _decode_offset(self._open().meta.get(OFFSET_KEY))

    def iter_jobs(self) -> Iterator[tuple[str, bytes]]:
        """All ``(job_id, state)`` pairs in job-id byte order, read in chunks."""
        start = b""
        while True:
            chunk = self._jobs_from(start, _ITER_CHUNK)
            for key, value in chunk:
                yield key.decode(), value
            if len(chunk) < _ITER_CHUNK:
                return
            start = chunk[-1][0] + b"\x00"  # the smallest key after the last one read

    def _jobs_from(self, start: bytes, limit: int) -> list[tuple[bytes, bytes]]:
        it = self._open().jobs.iter()
        it.seek(start)
        rows: list[tuple[bytes, bytes]] = []
        while len(rows) < limit and it.valid():
            rows.append((it.key(), it.value()))
            it.next()
        return rows

    def count_jobs(self) -> int:
        """RocksDB's estimate (``rocksdb.estimate-num-keys``): exact for fresh inserts,
        over-counts overwrites and deletes until compaction."""
        return self._estimate(self._open().jobs)

    def count_timers(self) -> int:
        """RocksDB's estimate of the number of timers, like :meth:`count_jobs`."""
        return self._estimate(self._open().timers)

    @staticmethod
    def _estimate(family: Rdict) -> int:
        return max(family.property_int_value("rocksdb.estimate-num-keys") or 0, 0)

    def clear(self) -> None:
        """Drop and recreate the column families: O(1), and the estimates restart at zero.

        ``meta`` goes first: a crash part-way leaves a store with no changelog offset, which
        the restore treats as missing and clears again, never as valid but half empty.
        """
        db = self._open().db
        self._h = None  # drop our references to the families before dropping them
        self._floor = b""
        options = self._cf_options()
        try:
            for name in (META_CF, JOBS_CF, TIMERS_CF):
                db.drop_column_family(name)
                db.create_column_family(name, options[name])
        finally:
            self._h = _Handles.of(db)

    def close(self) -> None:
        """Flush nothing extra (the WAL has it) and release the database. Idempotent."""
        if self._h is None:
            return
        db = self._h.db
        self._h = None
        db.close()
