"""``tickwheel preview`` through the real console entry point."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from tickwheel.cli import main
from tickwheel.streams.schedule import offset_ms

NY = ["--tz", "America/New_York"]


def preview_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    """Run ``tickwheel preview --json ARGS`` and return the parsed output."""
    assert main(["preview", "--json", *args]) == 0
    out = capsys.readouterr()
    assert out.err == ""
    parsed: dict[str, Any] = json.loads(out.out)
    return parsed


def preview_error(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    """Run a preview that must fail with exit code 2; return its single stderr line."""
    try:
        code = main(["preview", *args])
    except SystemExit as exc:  # argparse rejects some inputs itself
        code = exc.code  # type: ignore[assignment]
    out = capsys.readouterr()
    assert code == 2
    assert out.out == ""
    lines = out.err.splitlines()
    assert len(lines) == 1, out.err
    assert "Traceback" not in out.err
    return lines[0]


def test_spring_forward_example_in_json(capsys: pytest.CaptureFixture[str]) -> None:
    """30 2 * * * in New York: 03:00 EDT on the gap day, then 02:30."""
    assert preview_json(
        capsys, "--cron", "30 2 * * *", *NY, "--after", "2026-03-07T12:00", "--count", "2"
    ) == {
        "fires": [
            {
                "local": "2026-03-08T03:00:00-04:00",
                "utc": "2026-03-08T07:00:00Z",
                "flags": ["dst_gap_shifted"],
            },
            {"local": "2026-03-09T02:30:00-04:00", "utc": "2026-03-09T06:30:00Z", "flags": []},
        ]
    }


def test_fall_back_example_in_json(capsys: pytest.CaptureFixture[str]) -> None:
    """30 1 * * * in New York: once at 01:30 EDT on the fold day, then 01:30 EST."""
    assert preview_json(
        capsys, "--cron", "30 1 * * *", *NY, "--after", "2026-10-31T12:00", "--count", "2"
    ) == {
        "fires": [
            {
                "local": "2026-11-01T01:30:00-04:00",
                "utc": "2026-11-01T05:30:00Z",
                "flags": ["dst_fold_first"],
            },
            {"local": "2026-11-02T01:30:00-05:00", "utc": "2026-11-02T06:30:00Z", "flags": []},
        ]
    }


def test_wildcard_hour_example_in_json(capsys: pytest.CaptureFixture[str]) -> None:
    """*/30 * * * * in New York fires in both passes of the repeated hour."""
    fires = preview_json(capsys, "--cron", "*/30 * * * *", *NY, "--after", "2026-11-01T00:15", "--count", "6")
    assert fires == {
        "fires": [
            {"local": "2026-11-01T00:30:00-04:00", "utc": "2026-11-01T04:30:00Z", "flags": []},
            {
                "local": "2026-11-01T01:00:00-04:00",
                "utc": "2026-11-01T05:00:00Z",
                "flags": ["dst_fold_first"],
            },
            {
                "local": "2026-11-01T01:30:00-04:00",
                "utc": "2026-11-01T05:30:00Z",
                "flags": ["dst_fold_first"],
            },
            {
                "local": "2026-11-01T01:00:00-05:00",
                "utc": "2026-11-01T06:00:00Z",
                "flags": ["dst_fold_second"],
            },
            {
                "local": "2026-11-01T01:30:00-05:00",
                "utc": "2026-11-01T06:30:00Z",
                "flags": ["dst_fold_second"],
            },
            {"local": "2026-11-01T02:00:00-05:00", "utc": "2026-11-01T07:00:00Z", "flags": []},
        ]
    }


def test_human_output_is_one_line_per_fire(capsys: pytest.CaptureFixture[str]) -> None:
    """Human mode prints local, UTC and flags, one fire per line."""
    assert main(["preview", "--cron", "30 2 * * *", *NY, "--after", "2026-03-07T12:00",
                 "--count", "2"]) == 0  # fmt: skip
    assert capsys.readouterr().out.splitlines() == [
        "2026-03-08T03:00:00-04:00  2026-03-08T07:00:00Z  dst_gap_shifted",
        "2026-03-09T02:30:00-04:00  2026-03-09T06:30:00Z",
    ]


def test_gap_skip_and_fold_both_are_shown(capsys: pytest.CaptureFixture[str]) -> None:
    """--gap skip marks the occurrence skipped; --fold both lists both passes."""
    skipped = preview_json(capsys, "--cron", "30 2 * * *", *NY, "--after", "2026-03-07T12:00",
                           "--count", "1", "--gap", "skip")  # fmt: skip
    assert skipped["fires"][0]["skipped"] is True
    assert skipped["fires"][0]["flags"] == ["dst_gap_skipped"]
    both = preview_json(capsys, "--cron", "30 1 * * *", *NY, "--after", "2026-10-31T12:00",
                        "--count", "2", "--fold", "both")  # fmt: skip
    assert [f["local"] for f in both["fires"]] == [
        "2026-11-01T01:30:00-04:00",
        "2026-11-01T01:30:00-05:00",
    ]


def test_job_offsets_add_fire_utc(capsys: pytest.CaptureFixture[str]) -> None:
    """--job-id with spread and jitter shows the offset fire time of every non-skipped fire."""
    fires = preview_json(capsys, "--cron", "0 0 * * *", "--after", "2026-01-01T00:00:00Z",
                         "--count", "2", "--job-id", "team/nightly", "--spread-seconds", "600",
                         "--jitter-seconds", "2.5")  # fmt: skip
    for fire in fires["fires"]:
        at_ms = int(datetime.fromisoformat(fire["utc"]).timestamp() * 1000)
        delay = offset_ms("team/nightly", at_ms, 600_000, 2_500)
        expected = datetime.fromtimestamp((at_ms + delay) / 1000, UTC)
        assert datetime.fromisoformat(fire["fire_utc"]) == expected


def test_one_time_preview_shows_the_instant_in_the_zone(capsys: pytest.CaptureFixture[str]) -> None:
    """--at fires once; a naive --at is local to --tz and an offset --after is absolute."""
    fires = preview_json(capsys, "--at", "2030-01-01T09:00", "--tz", "Europe/Paris",
                         "--after", "2029-12-31T00:00:00+00:00")  # fmt: skip
    assert fires == {
        "fires": [{"local": "2030-01-01T09:00:00+01:00", "utc": "2030-01-01T08:00:00Z", "flags": []}]
    }
    assert preview_json(capsys, "--at", "2030-01-01T09:00Z", "--after", "2030-01-01T09:00Z") == {"fires": []}


def test_after_defaults_to_now(capsys: pytest.CaptureFixture[str]) -> None:
    """Without --after the first fire is in the future."""
    before = datetime.now(UTC)
    fires = preview_json(capsys, "--cron", "* * * * *", "--count", "1")
    assert datetime.fromisoformat(fires["fires"][0]["utc"]) > before


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--cron", "0 0 * * *", "--tz", "Mars/Olympus"], "tz: unknown time zone 'Mars/Olympus'"),
        (["--cron", "0 0 * *"], "expr: '0 0 * *' has 4 fields; expected 5 or 6"),
        (["--cron", "99 0 * * *"], "expr: malformed cron expression"),
        (["--cron", "0 0 31 2 *"], "expr: '0 0 31 2 *' never fires"),
        (["--cron", "0 0 * * *", "--after", "yesterday"], "after: not an ISO 8601 date-time"),
        (["--cron", "0 0 * * *", "--count", "0"], "count: must be between 1 and 1000"),
        (["--cron", "0 0 * * *", "--count", "1001"], "count: must be between 1 and 1000"),
        (["--cron", "0 0 * * *", "--count", "ten"], "count: not an integer"),
        ([], "cron: give exactly one of --cron EXPR or --at ISO"),
        (["--cron", "0 0 * * *", "--at", "2030-01-01T00:00Z"], "cron: give exactly one"),
        (["--at", "1969-01-01T00:00Z"], "at_ms: -31536000000 is outside"),
        (["--cron", "0 0 * * *", "--spread-seconds", "5"], "job-id: --spread-seconds and"),
        (["--cron", "0 0 * * *", "--job-id", "j", "--jitter-seconds", "-1"], "jitter-seconds:"),
        (["--cron", "0 0 * * *", "--job-id", "j", "--spread-seconds", "nan"], "spread-seconds:"),
        (["--cron", "0 0 * * *", "--gap", "never"], "argument --gap: invalid choice: 'never'"),
        (["--cron"], "argument --cron: expected one argument"),
    ],
)
def test_bad_input_is_one_line_and_exit_code_2(
    capsys: pytest.CaptureFixture[str], args: list[str], expected: str
) -> None:
    """Every invalid input prints one 'tickwheel preview: ...' line and exits with 2."""
    line = preview_error(capsys, *args)
    assert line.startswith("tickwheel preview: ")
    assert expected in line
