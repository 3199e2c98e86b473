"""Replay against the real broker and the real processor: why, verify, export and ``--in``.

One scenario runs once for the module (about 25 s): the processor in-process, this test
playing the worker (it reads ``runs`` and writes outcomes, key = job id), and a script of
commands. Five jobs: ``pausy`` (every second, overlap=allow, paused a while, resumed,
paused again and cancelled), ``overlappy`` (every 2 s, overlap=skip, its first run held by
the worker, cancelled), ``retry`` (one-time; attempt 1 fails retryably, attempt 2
succeeds), ``doomed`` (one-time; started, then cancelled mid-flight) and ``manual`` (a
far-future one-time job, triggered by hand).

With ``TICKWHEEL_RECORD_REPLAY_FIXTURES=1`` the scenario's export is written to
``tests/fixtures/replay/clean_live.jsonl`` (the checked-in clean fixture was recorded so).
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from tests.integration.harness import Deployment, now_ms, one_time_spec, submit
from tickwheel.client import CommandClient
from tickwheel.replay import Replayer, ReplayResult, Role, Source, Verdict, read_archive, write_archive
from tickwheel.replay.archive import ExportHeader
from tickwheel.replay.cli import main
from tickwheel.replay.live import read_topics, select_window
from tickwheel.replay.log import DEFAULT_ROLES, LogRecord
from tickwheel.schemas import mappers
from tickwheel.schemas.model import (
    CommandMeta,
    CreateJob,
    CronSchedule,
    ExecutorSpec,
    JobChanged,
    JobSpec,
    OverlapPolicy,
    RetryPolicy,
    RunCancelled,
    RunDue,
    RunFailed,
    RunStarted,
    RunSucceeded,
)
from tickwheel.streams.runtime import Processor

pytestmark = pytest.mark.broker

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "replay"
WORKER = "worker-a"


@dataclass
class Scenario:
    deployment: Deployment
    records: list[LogRecord]
    result: ReplayResult
    started_ms: int
    ended_ms: int
    tmp: Path

    def changed(self, job_id: str, change: str) -> JobChanged:
        found = [e.event for e in self.result.history(job_id).answers
                 if isinstance(e.event, JobChanged) and e.event.change == change]
        assert found, f"{job_id} has no JobChanged({change})"
        return found[0]

    def dues(self, job_id: str) -> list[RunDue]:
        return [e.event for e in self.result.history(job_id).runs if isinstance(e.event, RunDue)]


def _cron(expr: str, overlap: OverlapPolicy) -> JobSpec:
    return JobSpec(team="team-a", name=expr, schedule=CronSchedule(expr),
                   executor=ExecutorSpec("noop"), overlap=overlap)


def _plan(job_id: str, due: RunDue) -> list[str]:
    """What the worker does with a dispatch: the script of each job."""
    if job_id == "retry":
        return ["start", "fail"] if due.attempt == 1 else ["start", "succeed"]
    if job_id in ("overlappy", "doomed"):
        return ["start"]  # holds it: never finishes
    return ["start", "succeed"]


async def _worker(settings: Any, stop: asyncio.Event) -> None:
    """Plays the worker: holds each RunDue until its not_before, then, having read ``runs`` up
    to the last stable offset (so a cancel committed before the start is seen), acts on it."""
    topic = settings.topic("runs")
    consumer = AIOKafkaConsumer(bootstrap_servers=settings.bootstrap_servers,
                                isolation_level="read_committed", enable_auto_commit=False)
    producer = AIOKafkaProducer(bootstrap_servers=settings.bootstrap_servers, linger_ms=0)
    await consumer.start()
    await producer.start()
    queue = _RunsQueue(consumer, [TopicPartition(topic, p) for p in range(settings.partitions)])
    try:
        consumer.assign(queue.partitions)
        await consumer.seek_to_beginning(*queue.partitions)
        while not stop.is_set():
            await queue.poll(timeout_ms=50)
            if any(due.not_before_ms <= now_ms() for due in queue.pending):
                await queue.catch_up()
                for due in queue.ready(now_ms()):
                    for step in _plan(due.job_id, due):
                        await producer.send_and_wait(settings.topic("outcomes"),
                                                     mappers.to_bytes(_outcome(step, due)),
                                                     key=due.job_id.encode())
    finally:
        await producer.stop()
        await consumer.stop()


@dataclass
class _RunsQueue:
    consumer: AIOKafkaConsumer
    partitions: list[TopicPartition]
    pending: list[RunDue] = field(default_factory=list)
    cancelled: set[tuple[str, int]] = field(default_factory=set)

    async def poll(self, timeout_ms: int) -> None:
        batch = await self.consumer.getmany(*self.partitions, timeout_ms=timeout_ms)
        for records in batch.values():
            for record in records:
                event = mappers.run_event_from_bytes(record.value)
                if isinstance(event, RunDue):
                    self.pending.append(event)
                elif isinstance(event, RunCancelled):
                    self.cancelled.add((event.run_id, event.attempt))

    async def catch_up(self) -> None:
        end = await self.consumer.end_offsets(self.partitions)
        while [tp for tp in self.partitions if await self.consumer.position(tp) < end[tp]]:
            await self.poll(timeout_ms=200)

    def ready(self, now: int) -> list[RunDue]:
        ready = [due for due in self.pending if due.not_before_ms <= now]
        self.pending = [due for due in self.pending if due.not_before_ms > now]
        return [due for due in ready if (due.run_id, due.attempt) not in self.cancelled]


def _outcome(step: str, due: RunDue) -> Any:
    at = now_ms()
    ids = (due.run_id, due.job_id, due.attempt, WORKER)
    if step == "start":
        return RunStarted(*ids, at + 60_000, at)
    if step == "fail":
        return RunFailed(*ids, at, True, "Flaky", "first attempt fails")
    return RunSucceeded(*ids, at, "ok")


async def _until(check: Callable[[], Any], timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if await check():
            return
        await asyncio.sleep(0.5)
    raise AssertionError("scenario did not reach the expected state in time")


async def _script(deployment: Deployment) -> int:
    settings = deployment.settings
    t0 = now_ms()
    retry_spec = one_time_spec(t0 + 4_000, retry=RetryPolicy(max_attempts=3, backoff_initial_ms=500,
                                                              backoff_max_ms=1_000))
    creates = [
        CreateJob(CommandMeta(f"c-{job}", job, t0, "alice"), spec)
        for job, spec in (
            ("pausy", _cron("* * * * * *", OverlapPolicy.ALLOW)),
            ("overlappy", _cron("*/2 * * * * *", OverlapPolicy.SKIP)),
            ("retry", retry_spec),
            ("doomed", one_time_spec(t0 + 4_000)),
            ("manual", one_time_spec(t0 + 86_400_000)),
        )
    ]
    await submit(settings, creates)
    async with CommandClient(settings, principal="bob") as client:
        await asyncio.sleep(3)
        await client.trigger("manual")
        await client.pause("pausy")
        await asyncio.sleep(4)
        await client.resume("pausy")
        await client.cancel("doomed")
        await asyncio.sleep(3)
        # Paused for good before the cancel, so no look-ahead dispatch of pausy is about to
        # start while the cancel commits (a start inside that window is flagged by verify).
        await client.pause("pausy")
        await asyncio.sleep(2.5)
        await client.cancel("pausy")
        await client.cancel("overlappy")
    return t0


async def _log(settings: Any) -> list[LogRecord]:
    return await read_topics(settings, DEFAULT_ROLES)


@pytest.fixture(scope="module")
async def scenario(bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Scenario:
    tmp = tmp_path_factory.mktemp("replay")
    deployment = await Deployment.create(bootstrap, tmp, partitions=2)
    stop = asyncio.Event()
    processor = asyncio.create_task(Processor(deployment.settings).run(stop))
    worker = asyncio.create_task(_worker(deployment.settings, stop))
    try:
        t0 = await _script(deployment)

        async def settled() -> bool:
            replay = Replayer().replay(await _log(deployment.settings))
            answers = [e.event for job in ("retry", "doomed", "pausy", "overlappy", "manual")
                       if job in replay.histories for e in replay.history(job).answers]
            return sum(1 for a in answers if type(a).__name__ == "RunSettled") >= 4 and sum(
                1 for a in answers if getattr(a, "change", "") == "cancelled") >= 3

        await _until(settled)
        await asyncio.sleep(1.5)  # let the last steps commit
    finally:
        stop.set()
        await asyncio.gather(processor, worker)
    records = await _log(deployment.settings)
    result = Replayer(Source(prefix=deployment.settings.topic_prefix)).replay(records)
    if os.environ.get("TICKWHEEL_RECORD_REPLAY_FIXTURES") == "1":
        FIXTURES.mkdir(parents=True, exist_ok=True)
        end = max(r.timestamp for r in records)
        write_archive(FIXTURES / "clean_live.jsonl", select_window(records, t0, end),
                      ExportHeader(t0, end, None, tuple(r.value for r in DEFAULT_ROLES),
                                   complete_until_ms=end,
                                   extra={"recorded_by": "tests/integration/test_replay_live.py"}))
    return Scenario(deployment, records, result, t0, max(r.timestamp for r in records), tmp)


async def test_why_explains_a_skip_while_paused(scenario: Scenario) -> None:
    """why at the resume: the nearest occurrence was skipped (paused), citing the pause command."""
    # With look-ahead dispatch an occurrence is decided up to 2 s before its time, so the ones
    # decided while paused are those due from 2 s after the pause to 2 s after the resume.
    answer = scenario.result.why("pausy", scenario.changed("pausy", "resumed").at_ms)
    assert (answer.verdict, answer.reason) == (Verdict.SKIPPED, "paused")
    texts = [link.text for link in answer.chain]
    assert any(t.startswith("PauseJob by bob") for t in texts)
    assert any(t.startswith("JobChanged paused") for t in texts)
    skip = [link for link in answer.chain if link.text.startswith("RunSkipped paused")]
    assert skip
    assert skip[0].cite is not None
    assert skip[0].cite.topic == scenario.deployment.settings.topic("runs")


async def test_why_explains_an_overlap_skip(scenario: Scenario) -> None:
    """The occurrence after a held run is skipped by overlap=skip; the held run is still in flight."""
    first = scenario.dues("overlappy")[0]
    answer = scenario.result.why("overlappy", first.scheduled_for_ms + 2_000)
    assert (answer.verdict, answer.reason) == (Verdict.SKIPPED, "overlap")
    assert answer.scheduled_for_ms == first.scheduled_for_ms + 2_000
    held = scenario.result.why("overlappy", first.scheduled_for_ms)
    assert held.verdict is Verdict.CANCELLED  # the held run was cancelled with its job
    assert held.attempts[0].workers == (WORKER,)


async def test_why_explains_a_retried_run(scenario: Scenario) -> None:
    """A one-time run that failed once and succeeded on attempt 2: both attempts, worker, outcomes."""
    due = scenario.dues("retry")[0]
    answer = scenario.result.why("retry", due.scheduled_for_ms)
    assert (answer.verdict, answer.reason) == (Verdict.FIRED, "succeeded")
    assert [(a.attempt, a.trigger, a.outcome) for a in answer.attempts] == [
        (1, "scheduled", "failed"), (2, "retry", "succeeded")]
    assert all(a.workers == (WORKER,) for a in answer.attempts)
    assert "succeeded after 2 attempt(s)" in answer.summary


async def test_why_explains_a_cancelled_job(scenario: Scenario) -> None:
    """A run cancelled mid-flight with its job: verdict cancelled, citing RunCancelled and the ack."""
    due = scenario.dues("doomed")[0]
    answer = scenario.result.why("doomed", due.scheduled_for_ms)
    assert (answer.verdict, answer.reason) == (Verdict.CANCELLED, "cancelled")
    texts = [link.text for link in answer.chain]
    assert any(t.startswith("RunCancelled attempt 1: cancelled") for t in texts)
    assert any(t.startswith("JobChanged cancelled") for t in texts)
    later = scenario.result.why("doomed", due.scheduled_for_ms + 3_600_000)
    assert later.verdict is Verdict.CANCELLED  # a one-time job has that one occurrence only


async def test_why_finds_a_manual_run(scenario: Scenario) -> None:
    """A manual trigger is the nearest 'occurrence' at its time, fired and succeeded."""
    (manual,) = scenario.dues("manual")
    answer = scenario.result.why("manual", manual.scheduled_for_ms)
    assert (answer.verdict, answer.reason, answer.run_id) == (Verdict.FIRED, "succeeded", manual.run_id)
    assert any(link.text.startswith("TriggerJob by bob") for link in answer.chain)


async def test_the_live_log_verifies_clean(scenario: Scenario) -> None:
    """The real processor's log keeps every invariant, and its changelog equals the fold."""
    # The scenario lasts seconds: a grace of 30 s would leave every occurrence unjudged.
    source = Source(prefix=scenario.deployment.settings.topic_prefix, grace_ms=2_000)
    result = Replayer(source).replay(scenario.records)
    report = result.verify(scenario.started_ms - 60_000, scenario.ended_ms)
    assert report.violations == (), [v.message for v in report.violations]
    assert report.checked["states"] == 5
    assert report.checked["occurrences"] >= 10


@pytest.mark.parametrize("suffix", [".jsonl", ".avro"])
async def test_export_then_in_gives_the_same_answers(
    scenario: Scenario, suffix: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """CLI export to a file, then every subcommand with --in answers exactly as on live topics."""
    _env(monkeypatch, scenario)
    out = scenario.tmp / f"incident{suffix}"
    start, end = str(scenario.started_ms), str(scenario.ended_ms)
    assert await _main(["replay", "export", "--from", start, "--to", end, "--out", str(out)]) == 0
    capsys.readouterr()
    questions = [["why", job, "--at", str(at), "--json"] for job, at in _questions(scenario)]
    questions += [["state", "--at", str(scenario.ended_ms), "--json"],
                  ["state", "--at", str(scenario.started_ms + 5_000), "--job", "pausy", "--json"],
                  ["verify", "--from", start, "--to", end]]
    for question in questions:
        live = await _answer(question, capsys)
        archived = await _answer([*question, "--in", str(out)], capsys)
        assert archived == live, question
    header, records = read_archive(out)
    assert header.from_ms == scenario.started_ms
    assert {r.topic for r in records} >= {scenario.deployment.settings.topic(r.value) for r in
                                          (Role.RUNS, Role.OUTCOMES, Role.JOB_EVENTS)}


async def test_cli_rejects_an_unknown_job_with_exit_2(
    scenario: Scenario, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """why for a job the log never saw: exit 2 and one line on stderr."""
    _env(monkeypatch, scenario)
    assert await _main(["replay", "why", "nobody", "--at", str(scenario.ended_ms)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "nobody" in err


def _questions(scenario: Scenario) -> list[tuple[str, int]]:
    paused, resumed = scenario.changed("pausy", "paused"), scenario.changed("pausy", "resumed")
    overlap = scenario.dues("overlappy")[0].scheduled_for_ms
    return [("pausy", resumed.at_ms), ("pausy", paused.at_ms), ("pausy", scenario.ended_ms + 60_000),
            ("overlappy", overlap + 2_000), ("retry", scenario.dues("retry")[0].scheduled_for_ms),
            ("doomed", scenario.started_ms), ("manual", scenario.started_ms + 3_000)]


async def _main(argv: list[str]) -> int:
    # The CLI runs its own event loop (asyncio.run), so it gets a thread of its own here.
    return await asyncio.to_thread(main, argv)


async def _answer(argv: list[str], capsys: pytest.CaptureFixture[str]) -> Any:
    code = await _main(["replay", *argv])
    out = capsys.readouterr().out
    return code, json.loads(out)


def _env(monkeypatch: pytest.MonkeyPatch, scenario: Scenario) -> None:
    settings = scenario.deployment.settings
    monkeypatch.setenv("TICKWHEEL_BOOTSTRAP_SERVERS", settings.bootstrap_servers)
    monkeypatch.setenv("TICKWHEEL_TOPIC_PREFIX", settings.topic_prefix)
    monkeypatch.setenv("TICKWHEEL_PARTITIONS", str(settings.partitions))

