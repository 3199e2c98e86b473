"""The read model: key layout, the batched writer the projector uses, and the queries.

Key layout (one keyspace; the first byte names the record kind; ``~ms`` is the big-endian
u64 ``2**64 - 1 - ms``, so newer sorts first; ``\\0`` separates variable parts, which is
safe because job ids, run ids and teams never contain NUL)::

    J <job_id>                                         JobView
    T <team> \\0 <job_id>                              b""     (jobs of a team, by id)
    R <run_id>                                         RunView
    H <job_id> \\0 <~scheduled_for> \\0 <run_id>       status  (run history, newest first)
    L <run_id> \\0 <be32 attempt> <be32 seq>           LogLine
    C <command_id>                                     CommandAnswer
    K <command_id>                                     KeyClaim (first use of its key)
    D <~at_ms> <be32 partition> <be64 offset>          DeadLetterView (newest first)
    S <team>                                           Counts  (per-team statistics)
    O <topic> \\0 <be32 partition>                     be64 next offset to read

``O`` entries are written in the same atomic write as the records folded from those
offsets: exactly-once into the read model without Kafka-side offset commits.

Queries page with opaque cursors (``v1.`` + base64url of the last key returned) and bound
the rows they examine per page (``MAX_SCAN``), so a filter that matches rarely returns a
short page with a cursor instead of walking millions of keys in one request.
"""

from __future__ import annotations

import base64
import binascii
import struct
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

from tickwheel.projections.fold import Changes, Position, fold
from tickwheel.projections.kv import KV
from tickwheel.projections.views import (
    CommandAnswer,
    Counts,
    DeadLetterView,
    JobView,
    KeyClaim,
    LogLine,
    RunView,
    decode,
    encode,
)
from tickwheel.schemas import mappers
from tickwheel.schemas.codec import CodecError

T = TypeVar("T")

_U64 = struct.Struct(">Q")
_U32 = struct.Struct(">I")
_MAX_U64 = (1 << 64) - 1
_END = b"\xff" * 8  # above every key: all kinds are ASCII letters

MAX_SCAN = 5_000  # rows examined per page at most
PROJECTED_TOPICS = ("job-events", "runs", "outcomes", "logs", "dlq", "audit")
_DECODERS: dict[str, Callable[[bytes], object]] = {
    "job-events": mappers.job_event_from_bytes,
    "runs": mappers.run_event_from_bytes,
    "outcomes": mappers.outcome_from_bytes,
    "logs": mappers.log_chunk_from_bytes,
    "dlq": mappers.dead_letter_from_bytes,
    "audit": mappers.audit_record_from_bytes,
}


class CursorError(ValueError):
    """A cursor that this query did not hand out."""


# ---------------------------------------------------------------------------
# Keys


def _inv(ms: int) -> bytes:
    return _U64.pack(_MAX_U64 - min(max(ms, 0), _MAX_U64))


def job_key(job_id: str) -> bytes:
    return b"J" + job_id.encode()


def team_key(team: str, job_id: str) -> bytes:
    return b"T" + team.encode() + b"\0" + job_id.encode()


def run_key(run_id: str) -> bytes:
    return b"R" + run_id.encode()


def history_prefix(job_id: str) -> bytes:
    return b"H" + job_id.encode() + b"\0"


def history_key(job_id: str, scheduled_for_ms: int, run_id: str) -> bytes:
    return history_prefix(job_id) + _inv(scheduled_for_ms) + b"\0" + run_id.encode()


def log_key(run_id: str, attempt: int, seq: int) -> bytes:
    return b"L" + run_id.encode() + b"\0" + _U32.pack(attempt & 0xFFFFFFFF) + _U32.pack(seq & 0xFFFFFFFF)


def answer_key(command_id: str) -> bytes:
    return b"C" + command_id.encode()


def claim_key(command_id: str) -> bytes:
    return b"K" + command_id.encode()


def dead_letter_key(at_ms: int, partition: int, offset: int) -> bytes:
    return b"D" + _inv(at_ms) + _U32.pack(partition & 0xFFFFFFFF) + _U64.pack(max(offset, 0))


def stats_key(team: str) -> bytes:
    return b"S" + team.encode()


def offset_key(topic: str, partition: int) -> bytes:
    return b"O" + topic.encode() + b"\0" + _U32.pack(partition)


def _next_key(key: bytes) -> bytes:
    """The smallest key after ``key``."""
    return key + b"\0"


def _prefix_end(prefix: bytes) -> bytes:
    """The smallest key after every key starting with ``prefix``."""
    return prefix[:-1] + bytes([prefix[-1] + 1]) if prefix[-1] < 0xFF else prefix + _END


# ---------------------------------------------------------------------------
# Writing: an overlay over the store, committed as one atomic write


class Batch:
    """Pending changes over a store; also the fold's view, so later events see earlier ones.

    A record changed several times in one batch (a run's start, logs and result arrive
    together) is encoded once, at commit; statistics deltas are summed per team and merged
    into the stored counts once, too. The fold never reads statistics, so that is safe.
    """

    def __init__(self, kv: KV) -> None:
        self._kv = kv
        self._raw: dict[bytes, bytes | None] = {}  # index entries, offsets, deletions
        self._records: dict[bytes, object] = {}  # records to encode at commit
        self._read: dict[bytes, object] = {}  # records decoded from the store this batch
        self._stats: dict[str, dict[str, int]] = {}

    def __len__(self) -> int:
        return len(self._raw) + len(self._records) + len(self._stats)

    def _get(self, key: bytes) -> bytes | None:
        if key in self._raw:
            return self._raw[key]
        return self._kv.get(key)

    def _record(self, kind: type[T], key: bytes) -> T | None:
        found = self._records.get(key, self._read.get(key))
        if isinstance(found, kind):
            return found
        raw = self._get(key)
        if raw is None:
            return None
        record = decode(kind, raw)
        self._read[key] = record
        return record

    def _put(self, key: bytes, record: object) -> None:
        self._records[key] = record

    # ViewReader

    def job(self, job_id: str) -> JobView | None:
        return self._record(JobView, job_key(job_id))

    def run(self, run_id: str) -> RunView | None:
        return self._record(RunView, run_key(run_id))

    def has_log(self, run_id: str, attempt: int, seq: int) -> bool:
        key = log_key(run_id, attempt, seq)
        return key in self._records or self._get(key) is not None

    def claim(self, command_id: str) -> KeyClaim | None:
        return self._record(KeyClaim, claim_key(command_id))

    # Applying

    def fold_event(self, event: object, position: Position) -> None:
        """Fold one event read at ``position`` and advance that partition past it."""
        self.apply(fold(self, event, position))
        self.set_position(position.topic, position.partition, position.offset + 1)

    def apply(self, changes: Changes) -> None:
        for job in changes.jobs:
            self._put_job(job)
        for run in changes.runs:
            self._put_run(run)
        for line in changes.logs:
            self._put(log_key(line.run_id, line.attempt, line.seq), line)
        for answer in changes.answers:
            self._put(answer_key(answer.command_id), answer)
        for claim in changes.claims:
            self._put(claim_key(claim.command_id), claim)
        for letter in changes.dead_letters:
            self._put(dead_letter_key(letter.at_ms, letter.partition, letter.offset), letter)
        for team, delta in changes.stats:
            summed = self._stats.setdefault(team, {})
            for name, value in delta.items():
                summed[name] = summed.get(name, 0) + value

    def _put_job(self, job: JobView) -> None:
        old = self.job(job.job_id)
        if old is not None and old.team and old.team != job.team:
            self._raw[team_key(old.team, job.job_id)] = None
        if job.team:
            self._raw[team_key(job.team, job.job_id)] = b""
        self._put(job_key(job.job_id), job)

    def _put_run(self, run: RunView) -> None:
        if run.scheduled_for_ms is not None:
            key = history_key(run.job_id, run.scheduled_for_ms, run.run_id)
            self._raw[key] = run.status.encode()
        self._put(run_key(run.run_id), run)

    def set_position(self, topic: str, partition: int, offset: int) -> None:
        self._raw[offset_key(topic, partition)] = _U64.pack(offset)

    def _merged_stats(self) -> dict[bytes, bytes | None]:
        teams = sorted(self._stats)
        keys = [stats_key(team) for team in teams]
        stored = self._kv.get_many(keys)
        merged: dict[bytes, bytes | None] = {}
        for team, key, raw in zip(teams, keys, stored, strict=True):
            counts = (Counts() if raw is None else decode(Counts, raw)).plus(self._stats[team])
            merged[key] = encode(counts) if counts.values else None
        return merged

    def commit(self) -> None:
        """Write everything pending in one atomic write."""
        writes = {**self._raw, **{k: encode(r) for k, r in self._records.items()}, **self._merged_stats()}
        if writes:
            self._kv.write(writes)
        self._raw, self._records, self._read, self._stats = {}, {}, {}, {}


@dataclass(frozen=True, slots=True)
class RawRecord:
    """A consumed record: where it was read and its value bytes."""

    position: Position
    value: bytes | None


class Projector:
    """Folds consumed records into a store, one atomic write per :meth:`apply`."""

    def __init__(self, kv: KV) -> None:
        self.kv = kv
        self.undecodable = 0
        self.folded = 0

    def apply(
        self, records: Iterable[RawRecord], positions: Mapping[tuple[str, int], int] | None = None
    ) -> int:
        """Fold ``records`` (in order) and store the positions after them; returns how many.

        ``positions`` may move a partition further than its last record (past the commit
        markers of transactions), never backwards.
        """
        batch = Batch(self.kv)
        count = 0
        for record in records:
            event = self._decode(record)
            if event is None:
                where = record.position
                batch.set_position(where.topic, where.partition, where.offset + 1)
                continue
            batch.fold_event(event, record.position)
            count += 1
        for (topic, partition), offset in (positions or {}).items():
            batch.set_position(topic, partition, offset)
        batch.commit()
        self.folded += count
        return count

    def _decode(self, record: RawRecord) -> object | None:
        decoder = _DECODERS.get(record.position.topic)
        if decoder is None or record.value is None:
            self.undecodable += 1
            return None
        try:
            return decoder(record.value)
        except CodecError:
            # The processor dead-letters malformed input; a read model only skips it.
            self.undecodable += 1
            return None


# ---------------------------------------------------------------------------
# Reading


@dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    """One page of a listing; ``next_cursor`` is None when nothing follows."""

    items: tuple[T, ...]
    next_cursor: str | None


@dataclass(frozen=True, slots=True)
class JobFilter:
    team: str | None = None
    status: str | None = None
    pool: str | None = None
    name_prefix: str | None = None
    exclude_status: frozenset[str] = frozenset()

    def matches(self, job: JobView) -> bool:
        spec = job.spec
        return spec is not None and (
            (self.team is None or spec.team == self.team)
            and (self.status is None or job.status == self.status)
            and job.status not in self.exclude_status
            and (self.pool is None or spec.pool == self.pool)
            and (self.name_prefix is None or spec.name.startswith(self.name_prefix))
        )


def encode_cursor(key: bytes) -> str:
    return "v1." + base64.urlsafe_b64encode(key).decode().rstrip("=")


def decode_cursor(cursor: str, start: bytes, end: bytes) -> bytes:
    """The key a cursor names; it must lie inside the query's own range."""
    if not cursor.startswith("v1.") or len(cursor) > 2_048:
        raise CursorError("malformed cursor")
    text = cursor[3:]
    try:
        key = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        raise CursorError("malformed cursor") from None
    if not start <= key < end:
        raise CursorError("cursor does not belong to this query")
    return key


class ReadModel:
    """Typed queries over a read-model store (in memory or RocksDB, writer or secondary)."""

    def __init__(self, kv: KV, *, max_scan: int = MAX_SCAN) -> None:
        self.kv = kv
        self.max_scan = max_scan

    def refresh(self) -> None:
        self.kv.refresh()

    def job(self, job_id: str) -> JobView | None:
        """The job, or None if unknown (or known only from run facts so far)."""
        raw = self.kv.get(job_key(job_id))
        job = None if raw is None else decode(JobView, raw)
        return job if job is not None and job.spec is not None else None

    def jobs(self, where: JobFilter, cursor: str | None, limit: int) -> Page[JobView]:
        """Jobs in id order; by the team index when a team is given."""
        prefix = b"J" if where.team is None else team_key(where.team, "")
        start, end = prefix, _prefix_end(prefix)
        if where.team is None:
            return self._page(start, end, cursor, limit, lambda _k, v: _matching(where, v))
        return self._page(start, end, cursor, limit, lambda k, _v: self._indexed(where, k, prefix))

    def _indexed(self, where: JobFilter, key: bytes, prefix: bytes) -> JobView | None:
        job = self.job(key[len(prefix) :].decode())
        return job if job is not None and where.matches(job) else None

    def runs(
        self,
        job_id: str,
        cursor: str | None,
        limit: int,
        *,
        status: str | None = None,
        from_ms: int | None = None,
        to_ms: int | None = None,
    ) -> Page[RunView]:
        """A job's runs, newest scheduled first, optionally by status and ``[from, to)``."""
        prefix = history_prefix(job_id)
        start = prefix if to_ms is None else prefix + _inv(to_ms - 1)
        end = _prefix_end(prefix) if from_ms is None else prefix + _inv(from_ms) + b"\x01"

        def accept(key: bytes, value: bytes) -> RunView | None:
            if status is not None and value.decode() != status:
                return None
            return self.run(key.rsplit(b"\0", 1)[1].decode())

        return self._page(start, end, cursor, limit, accept)

    def run(self, run_id: str) -> RunView | None:
        raw = self.kv.get(run_key(run_id))
        return None if raw is None else decode(RunView, raw)

    def logs(self, run_id: str, cursor: str | None, limit: int, attempt: int | None = None) -> Page[LogLine]:
        """A run's log chunks in (attempt, seq) order."""
        prefix = b"L" + run_id.encode() + b"\0"
        if attempt is not None:
            prefix += _U32.pack(attempt & 0xFFFFFFFF)
        return self._page(prefix, _prefix_end(prefix), cursor, limit, lambda _k, v: decode(LogLine, v))

    def answer(self, command_id: str) -> CommandAnswer | None:
        raw = self.kv.get(answer_key(command_id))
        return None if raw is None else decode(CommandAnswer, raw)

    def answers(self, command_ids: list[str]) -> dict[str, CommandAnswer]:
        """The answers present among ``command_ids``, with one multi-get."""
        raws = self.kv.get_many([answer_key(c) for c in command_ids])
        return {c: decode(CommandAnswer, r) for c, r in zip(command_ids, raws, strict=True) if r is not None}

    def claim(self, command_id: str) -> KeyClaim | None:
        """The first request that used the idempotency key behind ``command_id``, if folded."""
        raw = self.kv.get(claim_key(command_id))
        return None if raw is None else decode(KeyClaim, raw)

    def stats(self, team: str) -> Counts:
        raw = self.kv.get(stats_key(team))
        return Counts() if raw is None else decode(Counts, raw)

    def all_stats(self) -> dict[str, Counts]:
        """Every team's counts (the keyspace holds one entry per team)."""
        rows = self.kv.scan(b"S", b"T", self.max_scan)
        return {k[1:].decode(): decode(Counts, v) for k, v in rows}

    def live_jobs(self, team: str) -> int:
        """Active or paused jobs of ``team``: what a per-team quota counts."""
        counts = self.stats(team)
        return counts.get("jobs.active") + counts.get("jobs.paused")

    def dead_letters(self, team: str | None, cursor: str | None, limit: int) -> Page[DeadLetterView]:
        """Dead letters newest first; with ``team``, only those of that team's jobs."""

        def accept(_key: bytes, value: bytes) -> DeadLetterView | None:
            letter = decode(DeadLetterView, value)
            if team is None:
                return letter
            job = self.job(letter.job_id) if letter.job_id else None
            return letter if job is not None and job.team == team else None

        return self._page(b"D", b"E", cursor, limit, accept)

    def positions(self) -> dict[tuple[str, int], int]:
        """The next offset to read per (logical topic, partition)."""
        rows = self.kv.scan(b"O", b"P", self.max_scan)
        found: dict[tuple[str, int], int] = {}
        for key, value in rows:
            topic, partition = key[1:-5], key[-4:]  # fixed-width tail: be32 may hold NULs
            found[(topic.decode(), _U32.unpack(partition)[0])] = _U64.unpack(value)[0]
        return found

    def _page(
        self,
        start: bytes,
        end: bytes,
        cursor: str | None,
        limit: int,
        accept: Callable[[bytes, bytes], T | None],
    ) -> Page[T]:
        """Up to ``limit`` accepted rows of ``[start, end)`` after the cursor, scanning at most
        ``max_scan`` rows; the cursor names the last row examined."""
        if cursor is not None:
            start = _next_key(decode_cursor(cursor, start, end))
        items: list[T] = []
        scanned = 0
        last: bytes | None = None
        while len(items) < limit and scanned < self.max_scan:
            rows = self.kv.scan(start, end, min(self.max_scan - scanned, max(limit - len(items), 64)))
            for key, value in rows:
                scanned += 1
                last = key
                item = accept(key, value)
                if item is not None:
                    items.append(item)
                    if len(items) == limit:
                        break
            if not rows or last is None or len(items) == limit:
                break
            start = _next_key(last)
        more = last is not None and bool(self.kv.scan(_next_key(last), end, 1))
        return Page(tuple(items), encode_cursor(last) if more and last is not None else None)


def _matching(where: JobFilter, value: bytes) -> JobView | None:
    job = decode(JobView, value)
    return job if where.matches(job) else None
