"""The web UI in headless Chromium, against the real gateway, processor and projections.

Everything runs in this process on the suite's broker: the scheduler processor
(``streams.runtime.Processor``), a worker, and the gateway from its app factory on a free
loopback port with its embedded projector folding the log. Jobs are created through the JSON API;
the browser then signs in, filters, opens a job and pauses it with a click. The state the
page shows comes from the processor's answer as folded by the projections.

Chromium is Debian's (``apt-get install chromium``), driven by Playwright for Python
without ``playwright install``. The tests skip only when no Chromium binary is found.
Screenshots go to ``tmp_path``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from tests.integration.kafka_util import unique
from tickwheel.gateway.app import build_app
from tickwheel.gateway.auth import Role, TokenEntry, TokenTable
from tickwheel.gateway.config import GatewayConfig
from tickwheel.settings import Settings
from tickwheel.streams.runtime import Processor
from tickwheel.topics import create_topics
from tickwheel.workers.config import WorkerConfig
from tickwheel.workers.worker import Worker

pytestmark = pytest.mark.broker

CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
OWNER_TOKEN = "ui-owner-token-0123456789abcdef"
ADMIN_TOKEN = "ui-admin-token-0123456789abcdef"
TEAM = "payments"
ANSWER_TIMEOUT_S = 90.0
UI_TIMEOUT_MS = 30_000
WORKER_ID = "ui-test-worker"
NOOP: dict[str, Any] = {"kind": "noop", "config": {}}
BACKUP: dict[str, Any] = {
    "kind": "process",
    "config": {"argv": ["/bin/sh", "-c", "echo starting backup; echo 42 files copied"]},
}
# Cron expressions in America/New_York, and executors. 02:30 on the second Sunday of March
# is in the spring-forward gap every year, so its next fire always carries a DST flag.
JOBS: dict[str, tuple[str, dict[str, Any]]] = {
    "nightly-invoices": ("30 2 * * *", NOOP),
    "weekly-backup": ("0 4 * * 1", BACKUP),
    "spring-forward": ("30 2 * 3 0#2", NOOP),
    "retired-export": ("15 5 * * *", NOOP),
}


def find_chromium() -> str | None:
    """Debian's chromium (or TICKWHEEL_CHROMIUM), if it is installed."""
    for candidate in (
        os.environ.get("TICKWHEEL_CHROMIUM"),
        "/usr/bin/chromium",
        shutil.which("chromium"),
        shutil.which("chromium-browser"),
    ):
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


@dataclass
class Platform:
    """A running gateway (with projections) and processor on fresh topics."""

    settings: Settings
    base_url: str
    http: aiohttp.ClientSession
    jobs: dict[str, str]  # job name -> job id

    def url(self, path: str) -> str:
        return f"{self.base_url}{path}"


def token_table() -> TokenTable:
    return TokenTable(
        [
            TokenEntry(token=OWNER_TOKEN, principal="olivia", team=TEAM, role=Role.OWNER),
            TokenEntry(token=ADMIN_TOKEN, principal="root", team="ops", role=Role.ADMIN),
        ]
    )


def job_body(name: str, expr: str, executor: dict[str, Any]) -> dict[str, Any]:
    return {
        "team": TEAM,
        "name": name,
        "schedule": {"kind": "cron", "expr": expr, "tz": "America/New_York"},
        "executor": executor,
        "labels": {"owner": "billing"},
    }


async def command(platform: Platform, path: str, key: str, body: dict[str, Any] | None = None) -> Any:
    """POST a command with ?wait=committed; poll its answer if the wait timed out."""
    headers = {"Authorization": f"Bearer {OWNER_TOKEN}", "Idempotency-Key": key}
    async with platform.http.post(
        platform.url(f"{path}?wait=committed"), json=body, headers=headers
    ) as response:
        assert response.status in (200, 201, 202), await response.text()
        answer = await response.json()
    deadline = time.monotonic() + ANSWER_TIMEOUT_S
    while answer["state"] == "pending":
        assert time.monotonic() < deadline, f"no answer to {path} in {ANSWER_TIMEOUT_S} s"
        await asyncio.sleep(0.2)
        async with platform.http.get(
            platform.url(f"/v1/commands/{answer['command_id']}"),
            headers={"Authorization": f"Bearer {OWNER_TOKEN}"},
        ) as response:
            if response.status == 200:
                answer = await response.json()
    assert answer["state"] in ("accepted", "changed"), answer
    return answer


async def job_status(platform: Platform, job_id: str) -> str:
    async with platform.http.get(
        platform.url(f"/v1/jobs/{job_id}"), headers={"Authorization": f"Bearer {OWNER_TOKEN}"}
    ) as response:
        assert response.status == 200
        status: str = (await response.json())["status"]
        return status


@contextlib.asynccontextmanager
async def serve(app: web.Application) -> AsyncIterator[str]:
    """Serve ``app`` on a free 127.0.0.1 port; yield its base URL."""
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        host, port = runner.addresses[0][:2]
        yield f"http://{host}:{port}"
    finally:
        await runner.cleanup()


@pytest.fixture(scope="module")
def chromium() -> str:
    """The Chromium binary; the module skips when there is none."""
    path = find_chromium()
    if path is None:
        pytest.skip("chromium not found (apt-get install chromium, or set TICKWHEEL_CHROMIUM)")
    return path


@pytest.fixture(scope="module")
async def platform(
    chromium: str, bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Platform]:
    """Topics, processor, worker and gateway (embedded projections), with the JOBS created."""
    name = unique("twui")
    settings = Settings(
        bootstrap_servers=bootstrap,
        topic_prefix=f"{name}.",
        partitions=2,
        app_id=name,
        home=tmp_path_factory.mktemp("ui-home"),
    )
    await create_topics(settings)
    stop = asyncio.Event()
    processor = asyncio.create_task(Processor(settings).run(stop))
    worker = Worker(settings, WorkerConfig(worker_id=WORKER_ID, shutdown_grace_ms=1_000, kill_grace_ms=500))
    running = asyncio.create_task(worker.run(stop))
    config = GatewayConfig(read_model="embedded", wait_timeout_ms=20_000, answer_poll_ms=20)
    try:
        async with (
            serve(build_app(settings, config, tokens=token_table())) as base_url,
            aiohttp.ClientSession() as http,
        ):
            platform = Platform(settings, base_url, http, {})
            for job_name, (expr, executor) in JOBS.items():
                body = job_body(job_name, expr, executor)
                created = await command(platform, "/v1/jobs", f"create-{job_name}", body)
                platform.jobs[job_name] = created["job_id"]
            yield platform
    finally:
        stop.set()
        await asyncio.gather(processor, running)


@pytest.fixture(scope="module")
async def browser(chromium: str) -> AsyncIterator[Any]:
    """One headless Chromium for the module."""
    try:
        from playwright.async_api import async_playwright
    except ImportError:
        pytest.fail("playwright is not installed: pip install playwright==1.65.2 (no `playwright install`)")
    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            await launched.close()


@dataclass
class Tab:
    page: Any
    errors: list[str]


@pytest.fixture
async def tab(browser: Any) -> AsyncIterator[Tab]:
    """A fresh page (its own sessionStorage) that records script errors."""
    context = await browser.new_context(viewport={"width": 1280, "height": 900})
    page = await context.new_page()
    page.set_default_timeout(UI_TIMEOUT_MS)
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(f"pageerror: {exc}"))
    page.on("console", lambda msg: errors.append(f"console: {msg.text}") if msg.type == "error" else None)
    try:
        yield Tab(page, errors)
    finally:
        await context.close()


async def sign_in(tab: Tab, platform: Platform, token: str = OWNER_TOKEN) -> None:
    from playwright.async_api import expect

    await tab.page.goto(platform.url("/ui"))
    await tab.page.get_by_label("API token").fill(token)
    await tab.page.get_by_role("button", name="Sign in").click()
    await expect(tab.page.get_by_role("heading", name="Jobs", level=1)).to_be_visible()


async def test_pausing_a_job_with_a_click_shows_it_paused(
    platform: Platform, tab: Tab, tmp_path: Path
) -> None:
    """Sign in, filter, open a job, click Pause: the page shows the state the processor answered."""
    from playwright.async_api import expect

    page = tab.page
    await sign_in(tab, platform)
    await expect(page.locator("#session")).to_contain_text("olivia")
    await expect(page.locator(".jobs-table tbody tr")).to_have_count(len(JOBS))
    await page.screenshot(path=str(tmp_path / "jobs.png"), full_page=True)
    await page.get_by_label("Name starts with").fill("nightly")
    await page.get_by_role("button", name="Apply filters").click()
    await expect(page.locator(".jobs-table tbody tr")).to_have_count(1)
    await page.get_by_role("link", name="nightly-invoices").click()

    status = page.locator("#job-status")
    await expect(status).to_have_text("active")
    await expect(page.locator(".fires-table tbody tr")).to_have_count(10)
    await expect(page.locator("#spec")).to_contain_text("cron 30 2 * * * in America/New_York")
    await page.get_by_role("button", name="Pause").click()
    await expect(status).to_have_text("paused")
    await expect(page.get_by_role("button", name="Resume")).to_be_enabled()
    await expect(page.get_by_role("button", name="Pause")).to_be_disabled()
    await expect(page.locator(".alert-success")).to_contain_text("Paused")
    await page.screenshot(path=str(tmp_path / "job-paused.png"), full_page=True)

    assert await job_status(platform, platform.jobs["nightly-invoices"]) == "paused"
    assert tab.errors == []


async def test_next_fires_show_dst_flags_from_the_preview(platform: Platform, tab: Tab) -> None:
    """A time in the spring-forward gap is previewed shifted to 03:00 with its DST flag explained."""
    from playwright.async_api import expect

    page = tab.page
    await sign_in(tab, platform)
    await page.goto(platform.url(f"/ui#/jobs/{platform.jobs['spring-forward']}"))
    first = page.locator(".fires-table tbody tr").first
    await expect(first).to_contain_text("03:00:00-04:00")
    await expect(first).to_contain_text("DST gap shifted")
    await expect(first).to_contain_text("fires at the first instant after the gap")
    await page.get_by_label("Show").first.select_option("25")
    await expect(page.locator(".fires-table tbody tr")).to_have_count(25)
    assert tab.errors == []


async def test_triggered_run_shows_its_attempt_worker_and_logs(
    platform: Platform, tab: Tab, tmp_path: Path
) -> None:
    """Trigger now, follow the run: the page follows it until the worker's success and output show."""
    from playwright.async_api import expect

    page = tab.page
    await sign_in(tab, platform)
    await page.goto(platform.url(f"/ui#/jobs/{platform.jobs['weekly-backup']}"))
    await expect(page.locator("#job-status")).to_have_text("active")
    await page.get_by_role("button", name="Trigger now").click()
    await expect(page.locator(".alert-success")).to_contain_text("Triggered")
    await expect(page.locator(".alert-success a")).to_contain_text("Run m-")
    await expect(page.locator(".runs-table tbody tr")).to_have_count(1)
    await expect(page.locator(".timeline .mark")).to_have_count(1)
    await page.screenshot(path=str(tmp_path / "job-runs.png"), full_page=True)
    await page.locator(".runs-table tbody a").first.click()
    await expect(page.locator("#run-status")).to_have_text("succeeded", timeout=60_000)
    attempt = page.locator(".attempts-table tbody tr")
    await expect(attempt).to_have_count(1)
    await expect(attempt).to_contain_text(WORKER_ID)
    await expect(attempt).to_contain_text("succeeded")
    await expect(page.locator("#logs")).to_contain_text("42 files copied")
    await page.screenshot(path=str(tmp_path / "run.png"), full_page=True)
    assert tab.errors == []


async def test_cancel_asks_for_confirmation_then_cancels(platform: Platform, tab: Tab) -> None:
    """Cancel job shows an inline confirmation; "Keep it" does nothing, "Yes" cancels for good."""
    from playwright.async_api import expect

    page = tab.page
    await sign_in(tab, platform)
    await page.goto(platform.url(f"/ui#/jobs/{platform.jobs['retired-export']}"))
    status = page.locator("#job-status")
    await expect(status).to_have_text("active")
    await page.get_by_role("button", name="Cancel job").click()
    await page.get_by_role("button", name="Keep it").click()
    await expect(page.get_by_role("alertdialog")).to_have_count(0)
    assert await job_status(platform, platform.jobs["retired-export"]) == "active"
    await page.get_by_role("button", name="Cancel job").click()
    await page.get_by_role("button", name="Yes, cancel job").click()
    await expect(status).to_have_text("cancelled")
    for verb in ("Pause", "Resume", "Trigger now", "Cancel job"):
        await expect(page.get_by_role("button", name=verb, exact=True)).to_be_disabled()
    assert tab.errors == []


async def test_oncall_page_shows_projection_lag_and_stats(
    platform: Platform, tab: Tab, tmp_path: Path
) -> None:
    """The on-call page fills every card from /v1/stats, /v1/dead-letters and /metrics."""
    from playwright.async_api import expect

    page = tab.page
    await sign_in(tab, platform, ADMIN_TOKEN)
    await page.get_by_role("link", name="On-call").click()
    await expect(page.locator("#projection .value")).to_contain_text("records")
    for card in ("#lag", "#backlog", "#failures", "#retries", "#leases", "#gateway"):
        await expect(page.locator(card)).to_be_visible()
    await expect(page.locator("#teams")).to_contain_text(TEAM)
    await expect(page.locator("#dead-letters")).to_contain_text("No dead letters.")
    await page.screenshot(path=str(tmp_path / "oncall.png"), full_page=True)
    assert tab.errors == []


async def test_a_wrong_token_is_refused_at_sign_in(platform: Platform, tab: Tab) -> None:
    """An unknown token keeps the sign-in form up with an error, and stores nothing."""
    from playwright.async_api import expect

    page = tab.page
    await page.goto(platform.url("/ui"))
    await page.get_by_label("API token").fill("not-a-real-token-0123456789")
    await page.get_by_role("button", name="Sign in").click()
    await expect(page.locator("#login-error")).to_contain_text("not accepted")
    assert await page.evaluate("sessionStorage.length") == 0
    # The refused /v1/whoami is logged by Chromium as a failed resource load; nothing else.
    assert [e for e in tab.errors if "401" not in e] == []


async def test_metrics_helpers_read_prometheus_text_and_lag_buckets(platform: Platform, tab: Tab) -> None:
    """metrics.js parses labels with escapes, sums by label, and bounds quantiles by buckets."""
    await tab.page.goto(platform.url("/ui"))
    result = await tab.page.evaluate(
        """async () => {
          const m = await import('/ui/metrics.js');
          const text = [
            '# HELP x_total things',
            '# TYPE x_total counter',
            'x_total{topic="a",note="say \\\\"hi\\\\""} 2',
            'x_total{topic="b"} 3.5 1700000000000',
            'broken{ 1',
            'y +Inf',
          ].join('\\n');
          const samples = m.parseMetrics(text);
          const buckets = [{le_ms: 10, count: 50}, {le_ms: 100, count: 99}, {le_ms: 1000, count: 100}];
          return {
            names: samples.map((s) => s.name),
            note: samples[0].labels.note,
            total: m.sumOf(samples, 'x_total'),
            onlyB: m.sumOf(samples, 'x_total', {topic: 'b'}),
            missing: m.sumOf(samples, 'nope'),
            byTopic: m.byLabel(samples, 'x_total', 'topic'),
            p50: m.bucketQuantile(buckets, 100, 0.5),
            p99: m.bucketQuantile(buckets, 100, 0.99),
            over: m.bucketQuantile(buckets, 200, 0.99),
          };
        }"""
    )
    assert result["names"] == ["x_total", "x_total", "y"]
    assert result["note"] == 'say "hi"'
    assert (result["total"], result["onlyB"], result["missing"]) == (5.5, 3.5, None)
    assert result["byTopic"] == {"a": 2, "b": 3.5}
    assert result["p50"] == {"le_ms": 10, "over": False}
    assert result["p99"] == {"le_ms": 100, "over": False}
    assert result["over"] == {"le_ms": 1000, "over": True}
