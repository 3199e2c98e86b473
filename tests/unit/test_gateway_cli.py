"""The jobs CLI against a gateway on a test server (fake log, in-memory read model)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence

import pytest

from tests.unit.test_gateway_fakes import TOKENS, Harness, harness
from tests.unit.test_projection_events import chunk, due, started, succeeded
from tickwheel import cli, jobs_cli
from tickwheel.gateway.auth import Role


@pytest.fixture(autouse=True)
def only_jobs(monkeypatch: pytest.MonkeyPatch) -> None:
    """The console entry point with just the jobs subcommand, the owner token, no retry pauses."""
    monkeypatch.setattr(cli, "_COMMAND_MODULES", ("tickwheel.jobs_cli",))
    monkeypatch.setattr(jobs_cli, "RETRY_PAUSE_S", 0.0)
    monkeypatch.setenv("TICKWHEEL_TOKEN", TOKENS["pay-owner"][0])


async def run(h: Harness | None, *argv: str, url: str | None = None) -> int:
    """Run ``tickwheel jobs ...`` on a thread while the test server answers on the loop."""
    target = url or str(h.client.make_url("")) if h is not None else url
    args: Sequence[str] = ["jobs", *argv[:1], *argv[1:], "--url", target or ""]
    return await asyncio.to_thread(cli.main, list(args))


CREATE = (
    "create",
    "--team",
    "payments",
    "--name",
    "nightly",
    "--cron",
    "0 3 * * *",
    "--tz",
    "Europe/Berlin",
    "--executor",
    "http",
    "--config",
    '{"url": "http://127.0.0.1:9"}',
    "--label",
    "tier=gold",
)


async def test_create_list_get_and_preview(capsys: pytest.CaptureFixture[str]) -> None:
    """create (json), list (table), get (next fires) and preview (DST flags) round-trip through the API."""
    async with harness() as h:
        assert await run(h, *CREATE, "--job-id", "nightly-1", "--json") == 0
        created = json.loads(capsys.readouterr().out)
        assert (created["state"], created["job_id"]) == ("accepted", "nightly-1")
        assert h.sink.commands[0].spec.labels == {"tier": "gold"}
        assert await run(h, "list") == 0
        out = capsys.readouterr().out
        assert out.splitlines()[0].split() == ["JOB", "TEAM", "NAME", "STATUS", "VERSION", "SCHEDULE"]
        assert "nightly-1" in out
        assert await run(h, "get", "nightly-1") == 0
        assert "next fires:" in capsys.readouterr().out
        assert (
            await run(h, "preview", "--cron", "30 2 * * *", "--tz", "America/New_York", "--count", "80") == 0
        )
        assert "dst_gap_shifted" in capsys.readouterr().out


async def test_changes_runs_and_logs(capsys: pytest.CaptureFixture[str]) -> None:
    """pause/trigger/update print the answer; runs is a table; logs print the run's output."""
    async with harness() as h:
        assert await run(h, *CREATE, "--job-id", "j1") == 0
        assert "accepted" in capsys.readouterr().out
        assert await run(h, "pause", "j1") == 0
        assert "status paused" in capsys.readouterr().out
        assert await run(h, "update", "j1", "--name", "renamed") == 0
        assert "update: job j1 accepted (version 2" in capsys.readouterr().out
        assert h.sink.commands[-1].spec.name == "renamed"
        assert h.sink.commands[-1].spec.labels == {"tier": "gold"}  # untouched fields kept
        h.feeder.feed(
            due("r-1", "j1"),
            started("r-1", "j1"),
            chunk("r-1", "j1", data="line one\n"),
            succeeded("r-1", "j1"),
        )
        assert await run(h, "runs", "j1") == 0
        assert "succeeded" in capsys.readouterr().out
        assert await run(h, "logs", "r-1") == 0
        assert capsys.readouterr().out == "line one\n"
        assert await run(h, "trigger", "j1", "--no-wait") == 0
        assert "run m-" in capsys.readouterr().out  # the fake log answers at once


async def test_server_refusals_exit_1_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    """A 4xx from the gateway exits 1 with its problem detail on one stderr line."""
    async with harness() as h:
        assert await run(h, "get", "missing-job") == 1
        err = capsys.readouterr().err
        assert err.count("\n") == 1
        assert err.startswith("tickwheel jobs: 404")
        assert "(field job_id)" in err
        assert await run(h, *CREATE[:-2], "--cron", "61 * * * *") == 1
        assert "schedule.expr" in capsys.readouterr().err
        assert await run(h, *CREATE, "--job-id", "v") == 0
        capsys.readouterr()
        assert await run(h, "update", "v", "--version", "0", "--name", "x") == 1
        assert "If-Match" in capsys.readouterr().err


async def test_viewer_token_cannot_change(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a viewer token a change exits 1 with the gateway's 403."""
    async with harness() as h:
        assert await run(h, *CREATE, "--job-id", "j1") == 0
        monkeypatch.setenv("TICKWHEEL_TOKEN", next(t for t, _p, _t, r in TOKENS.values() if r is Role.VIEWER))
        assert await run(h, "pause", "j1") == 1
        assert "403" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv",
    [
        ("create", "--team", "payments", "--name", "x", "--at", "2026-01-01T00:00:00", "--executor", "http"),
        ("create", "--team", "payments", "--name", "x", "--at", "tomorrow", "--executor", "http"),
        ("create", "--team", "payments", "--cron", "0 3 * * *", "--at", "5", "--executor", "http"),
        ("create", "--team", "payments", "--name", "x", "--cron", "0 3 * * *", "--config", "{nope"),
        ("create", "--team", "payments", "--name", "x"),
        ("create", "--label", "novalue", "--team", "payments"),
        ("preview",),
        ("list", "--limit", "ten"),
    ],
)
async def test_bad_cli_input_exits_2(argv: tuple[str, ...], capsys: pytest.CaptureFixture[str]) -> None:
    """Input the CLI itself can tell is wrong exits 2 before any request."""
    async with harness() as h:
        with pytest.raises(SystemExit) if argv[-1] == "ten" else _no_raise():
            assert await run(h, *argv) == 2
        assert h.sink.commands == []
        assert capsys.readouterr().err.strip()


class _no_raise:  # noqa: N801 - used like pytest.raises
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> bool:
        return False


async def test_missing_token_and_unreachable_gateway(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """No token is bad input (2); an unreachable gateway is an operational failure (1)."""
    assert await run(None, "get", "j", url="http://127.0.0.1:9") == 1
    assert "cannot reach the gateway" in capsys.readouterr().err
    assert await run(None, "get", "j", url="ftp://example") == 2
    monkeypatch.delenv("TICKWHEEL_TOKEN")
    assert await run(None, "get", "j", url="http://127.0.0.1:9") == 2
    assert "TICKWHEEL_TOKEN" in capsys.readouterr().err


def test_table_aligns_columns() -> None:
    """The people-facing table pads columns to their widest cell."""
    text = jobs_cli.table([("a", None), ("longer", 2)], ("X", "Y"))
    assert text.splitlines() == ["X       Y", "a       -", "longer  2"]
