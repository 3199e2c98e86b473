"""``tickwheel replay`` on archives: outputs, exit codes (0 clean, 1 violations, 2 bad input)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tickwheel.replay.archive import read_archive
from tickwheel.replay.cli import main

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "replay"
CLEAN = str(FIXTURES / "clean_live.jsonl")
BAD = str(FIXTURES / "bad_live.jsonl")
DST = str(FIXTURES / "dst_constructed.jsonl")


def _window(path: str) -> tuple[str, str]:
    header, _ = read_archive(Path(path))
    return str((header.from_ms or 0) - 3_600_000), str(header.to_ms)


def test_why_prints_the_verdict_and_the_cited_chain(capsys: pytest.CaptureFixture[str]) -> None:
    """The text answer names the verdict and cites topic[partition]@offset for each event."""
    assert main(["replay", "why", "nightly-ny", "--at", "2026-03-08T07:00:00Z", "--in", DST]) == 0
    out = capsys.readouterr().out
    assert "verdict: FIRED (succeeded)" in out
    assert "occurrence: 2026-03-08T07:00:00Z (local 2026-03-08T03:00:00-04:00)" in out
    assert "tickwheel.runs[0]@" in out
    assert "DST rule: " in out


def test_why_json_is_machine_readable(capsys: pytest.CaptureFixture[str]) -> None:
    """--json: verdict, occurrence, attempts and chain with citations."""
    assert main(["replay", "why", "skipper-ny", "--at", "2026-03-08T07:00:00Z", "--json",
                 "--in", DST]) == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["verdict"], data["reason"]) == ("skipped", "dst_gap")
    assert all({"at_ms", "text", "cite"} <= set(link) for link in data["chain"])


def test_state_prints_each_job_with_its_changelog_check(capsys: pytest.CaptureFixture[str]) -> None:
    """state --at T: one block per job, each agreeing with its changelog record."""
    _, end = _window(CLEAN)
    assert main(["replay", "state", "--at", end, "--in", CLEAN]) == 0
    out = capsys.readouterr().out
    assert out.count("agrees with changelog") == 5
    assert main(["replay", "state", "--at", end, "--job", "retry", "--json", "--in", CLEAN]) == 0
    (job,) = json.loads(capsys.readouterr().out)["jobs"]
    assert (job["job_id"], job["state"]["status"], job["changelog_agrees"]) == ("retry", "completed", True)


def test_verify_exits_0_on_a_clean_log_and_writes_the_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A clean log: exit 0, a one-line summary, the JSON report in --report."""
    start, end = _window(CLEAN)
    report = tmp_path / "report.json"
    assert main(["replay", "verify", "--from", start, "--to", end, "--in", CLEAN, "--grace-ms", "2000",
                 "--report", str(report)]) == 0
    assert capsys.readouterr().out.count("\n") == 1
    assert json.loads(report.read_text())["clean"] is True


def test_verify_exits_1_on_the_bad_log_with_the_violations(capsys: pytest.CaptureFixture[str]) -> None:
    """The known-bad log: exit 1 and a JSON report naming the three broken invariants."""
    start, end = _window(BAD)
    assert main(["replay", "verify", "--from", start, "--to", end, "--in", BAD, "--grace-ms", "2000"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["violation_counts"] == {"duplicate_run_due": 1, "lost_occurrence": 1,
                                        "started_after_cancel": 1}


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["why", "retry", "--at", "noon", "--in", CLEAN], "cannot read time 'noon'"),
        (["why", "retry", "--at", "2026-01-01T12:00:00", "--in", CLEAN], "has no zone"),
        (["why", "nobody", "--at", "0", "--in", CLEAN], "job 'nobody' does not appear in the log"),
        (["state", "--at", "0", "--job", "nobody", "--in", CLEAN], "'nobody'"),
        (["verify", "--from", "0", "--to", "1", "--in", "/nonexistent/x.jsonl"], "cannot read"),
        (["verify", "--from", "0", "--to", "1", "--in", "/tmp/x.csv"], "unknown archive format"),
        (["export", "--from", "0", "--to", "1", "--out", "x.txt"], "unknown archive format"),
    ],
)
def test_bad_input_exits_2_with_one_line_on_stderr(
    argv: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Unparseable time, unknown job, unreadable file, unknown format: exit 2, one stderr line."""
    assert main(["replay", *argv]) == 2
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1
    assert needle in captured.err
    assert captured.out == ""
