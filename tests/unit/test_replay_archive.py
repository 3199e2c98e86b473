"""Archives (Avro container and JSON lines), the export slice, topic roles and time parsing."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from tickwheel.replay.archive import ArchiveError, ExportHeader, read_archive, write_archive
from tickwheel.replay.live import select_window
from tickwheel.replay.log import LogRecord, Role, role_of
from tickwheel.replay.progress import Progress, wanted
from tickwheel.replay.synth import SyntheticProcessor
from tickwheel.replay.times import TimeError, iso, parse_time
from tickwheel.schemas.model import (
    CancelJob,
    CommandMeta,
    CreateJob,
    CronSchedule,
    ExecutorSpec,
    JobSpec,
    OneTime,
)

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z
MINUTE = 60_000


def _records() -> list[LogRecord]:
    proc = SyntheticProcessor(now=T0, partitions=3)
    spec = JobSpec(team="t", name="n", schedule=CronSchedule("* * * * *"), executor=ExecutorSpec("noop"))
    proc.command(CreateJob(CommandMeta("c1", "j1", T0, "alice"), spec), T0 + 1)
    proc.advance(T0 + 3 * MINUTE)
    return [*proc.records, LogRecord("tickwheel.dlq", 0, 0, T0 + 5, None, None)]


@pytest.mark.parametrize("name", ["incident.avro", "incident.jsonl", "incident.ndjson"])
def test_an_archive_round_trips_records_and_header(tmp_path: Path, name: str) -> None:
    """Every envelope field, tombstones and unkeyed records included, comes back equal."""
    records = _records()
    header = ExportHeader(T0, T0 + MINUTE, "j1", ("runs",), T0 + MINUTE, {"why": "test"})
    assert write_archive(tmp_path / name, records, header) == len(records)
    assert read_archive(tmp_path / name) == (header, records)


def test_json_lines_carry_a_note_naming_the_event_for_readers(tmp_path: Path) -> None:
    """Each JSON line says what it holds; reading ignores the note."""
    write_archive(tmp_path / "x.jsonl", _records(), ExportHeader())
    lines = [json.loads(line) for line in (tmp_path / "x.jsonl").read_text().splitlines()]
    assert lines[0]["tickwheel_export"] == 1
    assert {"CreateJob on commands", "JobAccepted on job-events", "RunDue on runs",
            "JobState on sched-changelog"} <= {line.get("note") for line in lines[1:]}


def test_unknown_formats_and_unreadable_files_raise_archive_errors(tmp_path: Path) -> None:
    """A wrong extension, a missing file, a broken line, a non-Avro file: ArchiveError naming it."""
    with pytest.raises(ArchiveError, match="unknown archive format"):
        write_archive(tmp_path / "x.csv", [], ExportHeader())
    with pytest.raises(ArchiveError, match="cannot read"):
        read_archive(tmp_path / "missing.jsonl")
    (tmp_path / "broken.jsonl").write_text('{"tickwheel_export": 1}\n{"topic": "x"}\n')
    with pytest.raises(ArchiveError, match=r"broken.jsonl:2: not an export line"):
        read_archive(tmp_path / "broken.jsonl")
    (tmp_path / "fake.avro").write_bytes(b"not avro at all")
    with pytest.raises(ArchiveError, match="not a Tickwheel Avro export"):
        read_archive(tmp_path / "fake.avro")


def test_an_export_slice_keeps_the_history_of_jobs_in_the_window_or_live_at_its_start() -> None:
    """Jobs touched in the window or live at its start keep their history; finished ones go."""
    proc = SyntheticProcessor(now=T0)
    cron = JobSpec(team="t", name="n", schedule=CronSchedule("0 * * * *"), executor=ExecutorSpec("noop"))
    once = JobSpec(team="t", name="n", schedule=OneTime(T0 + 10 * MINUTE), executor=ExecutorSpec("noop"))
    proc.command(CreateJob(CommandMeta("c1", "quiet", T0, "a"), cron), T0 + 1)  # live, silent
    proc.command(CreateJob(CommandMeta("c2", "gone", T0, "a"), cron), T0 + 2)
    proc.command(CancelJob(CommandMeta("c3", "gone", T0, "a")), T0 + 3)
    proc.command(CreateJob(CommandMeta("c4", "busy", T0, "a"), once), T0 + 4)
    proc.advance(T0 + 20 * MINUTE)
    window = select_window(proc.records, T0 + 5 * MINUTE, T0 + 15 * MINUTE)
    assert {r.key for r in window} == {b"quiet", b"busy"}
    assert min(r.timestamp for r in window if r.key == b"busy") < T0 + 5 * MINUTE  # its history
    assert max(r.timestamp for r in window) <= T0 + 15 * MINUTE


def test_topic_roles_come_from_the_prefix_or_the_contract_suffix() -> None:
    """'tw-1.sched-changelog' is the changelog by suffix; with a prefix only exact names count."""
    assert role_of("tw-1.sched-changelog") is Role.CHANGELOG
    assert role_of("tw-1.runs") is Role.RUNS
    assert role_of("tw-1.reruns") is None
    assert role_of("x.runs", prefix="tw-1.") is None
    assert role_of("tw-1.job-events", prefix="tw-1.") is Role.JOB_EVENTS


def test_times_are_iso_8601_with_a_zone_or_epoch_milliseconds() -> None:
    """Zulu, offsets and epoch ms are read; a zone-less wall time and garbage are refused."""
    assert parse_time("2026-01-01T00:00:00Z") == T0
    assert parse_time("2025-12-31T19:00:00-05:00") == T0
    assert parse_time(str(T0)) == T0
    with pytest.raises(TimeError, match="no zone"):
        parse_time("2026-01-01T00:00:00")
    with pytest.raises(TimeError, match="cannot read time"):
        parse_time("yesterday")
    assert iso(T0) == "2026-01-01T00:00:00Z"
    assert iso(T0 + 5, "America/New_York") == "2025-12-31T19:00:00.005-05:00"


def test_the_progress_bar_redraws_at_most_every_fifth_of_a_second() -> None:
    """Counts every record, draws on a settable clock, and ends its line on close."""
    now = [0.0]
    out = io.StringIO()
    bar = Progress(200, stream=out, clock=lambda: now[0])
    bar.advance(50)
    bar.advance(50)  # same instant: not redrawn
    now[0] = 0.3
    bar.advance(100)
    bar.close()
    frames = out.getvalue().split("\r")[1:]
    assert len(frames) == 3
    assert frames[0].startswith("reading [")
    assert "25%" in frames[0]
    assert frames[-1].endswith("100% 200/200 records\n")


def test_a_bar_is_drawn_only_when_forced_or_on_a_terminal() -> None:
    """--progress forces it; otherwise only a TTY gets one."""
    assert wanted(False, io.StringIO()) is False
    assert wanted(True, io.StringIO()) is True
