"""The scheduler processor against the real broker: exactly-once dispatch, restore, races."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import signal
from pathlib import Path

import pytest

from tests.integration.harness import (
    Deployment,
    check_runs,
    committed_runs,
    create_command,
    now_ms,
    one_time_spec,
    submit,
    wait_for_run_dues,
)
from tests.integration.kafka_util import read_all
from tickwheel.schemas import mappers
from tickwheel.schemas.model import (
    CancelJob,
    CommandMeta,
    CronSchedule,
    ExecutorSpec,
    JobAccepted,
    JobSpec,
    JobState,
    OverlapPolicy,
    RunCancelled,
    RunDue,
    run_id_for,
)
from tickwheel.streams.runtime import Processor

pytestmark = pytest.mark.broker


async def _run_in_process(deployment: Deployment, until: asyncio.Event) -> asyncio.Task[None]:
    processor = Processor(deployment.settings)
    return asyncio.create_task(processor.run(until))


async def test_hot_instant_of_10000_one_time_jobs_dispatches_each_exactly_once(
    bootstrap: str, tmp_path: Path
) -> None:
    """10,000 jobs due at one instant: every run id committed once, none lost, none extra."""
    deployment = await Deployment.create(bootstrap, tmp_path, partitions=3)
    instant = now_ms() + 8_000
    jobs = {f"hot-{i:05d}": one_time_spec(instant) for i in range(10_000)}
    await submit(deployment.settings, (create_command(job_id, spec) for job_id, spec in jobs.items()))
    stop = asyncio.Event()
    task = await _run_in_process(deployment, stop)
    try:
        dues = await wait_for_run_dues(deployment.settings, len(jobs), timeout_s=120)
        await asyncio.sleep(2)  # anything extra would be committed by now
        dues = [e for _, _, e in await committed_runs(deployment.settings) if isinstance(e, RunDue)]
    finally:
        stop.set()
        await task
    check = check_runs(dues, {run_id_for(job_id, instant) for job_id in jobs})
    assert check.lost == set()
    assert check.duplicates == {}
    assert check.unexpected == set()
    assert all(d.not_before_ms == instant for d in dues)


async def test_sigkill_between_produce_and_commit_loses_and_duplicates_nothing(
    bootstrap: str, tmp_path: Path
) -> None:
    """Fault: SIGKILL at failpoint after_produce_before_commit (3rd hit). Checker: each run once."""
    deployment = await Deployment.create(bootstrap, tmp_path, partitions=2, transaction_timeout_ms=5_000)
    instant = now_ms() + 6_000
    jobs = {f"kill-{i:04d}": one_time_spec(instant) for i in range(600)}
    await submit(deployment.settings, (create_command(job_id, spec) for job_id, spec in jobs.items()))
    # Static membership: the restarted processor reclaims the victim's member id at once.
    victim = deployment.start_processor(
        TICKWHEEL_FAILPOINTS="after_produce_before_commit=kill@3", TICKWHEEL_PROCESSOR_INSTANCE_ID="p-1"
    )
    try:
        assert await asyncio.to_thread(victim.wait, 60) == -signal.SIGKILL
        deployment.start_processor(TICKWHEEL_PROCESSOR_INSTANCE_ID="p-1")
        dues = await wait_for_run_dues(deployment.settings, len(jobs), timeout_s=120)
        await asyncio.sleep(2)
        dues = [e for _, _, e in await committed_runs(deployment.settings) if isinstance(e, RunDue)]
    finally:
        deployment.stop_all()
    check = check_runs(dues, {run_id_for(job_id, instant) for job_id in jobs})
    assert (check.lost, check.duplicates, check.unexpected) == (set(), {}, set()), deployment.logs()


async def test_partitions_moving_between_two_processors_lose_and_duplicate_nothing(
    bootstrap: str, tmp_path: Path
) -> None:
    """Fault: a second processor joins, then the first is SIGKILLed while jobs fire every second."""
    deployment = await Deployment.create(bootstrap, tmp_path, partitions=4)
    jobs = {
        f"move-{i:03d}": JobSpec(
            team="t",
            name="every-second",
            schedule=CronSchedule("* * * * * *"),
            executor=ExecutorSpec("noop"),
            overlap=OverlapPolicy.ALLOW,
        )
        for i in range(20)
    }
    await submit(deployment.settings, (create_command(job_id, spec) for job_id, spec in jobs.items()))
    first = deployment.start_processor(home=tmp_path / "p1")
    try:
        await asyncio.sleep(6)
        deployment.start_processor(home=tmp_path / "p2")
        await asyncio.sleep(8)
        first.send_signal(signal.SIGKILL)
        await asyncio.sleep(14)
        window_end = now_ms() - 4_000
        records = await committed_runs(deployment.settings)
        answers = await read_all(bootstrap, deployment.settings.topic("job-events"))
    finally:
        deployment.stop_all()
    dues = [e for _, _, e in records if isinstance(e, RunDue)]
    counts: dict[tuple[str, int], int] = {}
    for due in dues:
        counts[(due.run_id, due.attempt)] = counts.get((due.run_id, due.attempt), 0) + 1
    assert {k: n for k, n in counts.items() if n > 1} == {}, deployment.logs()
    fired = {(d.job_id, d.scheduled_for_ms) for d in dues}
    skipped = {(e.job_id, e.scheduled_for_ms) for _, _, e in records if type(e).__name__ == "RunSkipped"}
    accepted = {
        e.job_id: e.at_ms
        for e in map(mappers.job_event_from_bytes, (r.value for r in answers))
        if isinstance(e, JobAccepted)
    }
    assert set(accepted) == set(jobs)
    for job_id in jobs:
        first_second = -(-accepted[job_id] // 1000) * 1000  # the first occurrence at or after accept
        for second in range(first_second, window_end, 1000):
            assert (job_id, second) in fired | skipped, f"lost {job_id} @ {second}\n{deployment.logs()}"


async def test_deleting_the_local_store_restores_the_same_state(bootstrap: str, tmp_path: Path) -> None:
    """Restart with an empty state dir: the store rebuilt from the changelog equals the old one."""
    deployment = await Deployment.create(bootstrap, tmp_path, partitions=2)
    later = now_ms() + 3_600_000
    jobs = {f"keep-{i:03d}": one_time_spec(later) for i in range(200)}
    await submit(deployment.settings, (create_command(job_id, spec) for job_id, spec in jobs.items()))
    stop = asyncio.Event()
    task = await _run_in_process(deployment, stop)
    await _wait_for_changelog(deployment, len(jobs))
    stop.set()
    await task
    before = _store_contents(deployment)
    shutil.rmtree(deployment.settings.state_dir)
    stop = asyncio.Event()
    task = await _run_in_process(deployment, stop)
    await asyncio.sleep(6)
    stop.set()
    await task
    after = _store_contents(deployment)
    assert set(before) == set(jobs)
    assert after == before


async def test_cancel_racing_the_due_instant_leaves_no_run_due_after_the_cancel(
    bootstrap: str, tmp_path: Path
) -> None:
    """A cancel committed around the instant: no RunDue of that job follows the RunCancelled/ack."""
    deployment = await Deployment.create(bootstrap, tmp_path, partitions=1)
    stop = asyncio.Event()
    task = await _run_in_process(deployment, stop)
    try:
        instant = now_ms() + 4_000
        jobs = {f"race-{i:03d}": one_time_spec(instant) for i in range(100)}
        await submit(deployment.settings, (create_command(job_id, spec) for job_id, spec in jobs.items()))
        await asyncio.sleep(max(0, (instant - now_ms()) / 1000 - 0.05))
        cancels = [CancelJob(CommandMeta(f"cancel-{job_id}", job_id, now_ms(), "test")) for job_id in jobs]
        await submit(deployment.settings, cancels)
        await asyncio.sleep(5)
        records = await committed_runs(deployment.settings)
        events = await read_all(bootstrap, deployment.settings.topic("job-events"))
    finally:
        stop.set()
        await task
    cancelled_at: dict[str, int] = {}
    for record in events:
        event = mappers.job_event_from_bytes(record.value)
        if getattr(event, "change", "") == "cancelled":
            cancelled_at[event.job_id] = record.offset
    assert set(cancelled_at) == set(jobs)
    # Per job, in runs[p] order: every RunDue of a cancelled job is followed by its
    # RunCancelled, and nothing of the job's is dispatched after that.
    violations: list[str] = []
    for job_id in jobs:
        sequence = [e for _, _, e in records if e.job_id == job_id]
        dues = [i for i, e in enumerate(sequence) if isinstance(e, RunDue)]
        cancels = [i for i, e in enumerate(sequence) if isinstance(e, RunCancelled)]
        if dues and (not cancels or max(dues) > min(cancels)):
            violations.append(job_id)
    assert violations == []


async def _wait_for_changelog(deployment: Deployment, expected: int) -> None:
    for _ in range(60):
        records = await read_all(
            deployment.settings.bootstrap_servers, deployment.settings.topic("sched-changelog")
        )
        if len({r.key for r in records}) >= expected:
            return
        await asyncio.sleep(1)
    raise AssertionError("changelog never reached the expected job count")


def _store_contents(deployment: Deployment) -> dict[str, JobState]:
    from tickwheel.streams.store import RocksDBStore

    contents: dict[str, JobState] = {}
    root = Path(deployment.settings.state_dir) / deployment.settings.app_id
    for path in sorted(root.iterdir()):
        store = RocksDBStore(path)
        try:
            for job_id, value in store.iter_jobs():
                contents[job_id] = mappers.state_from_bytes(value)
        finally:
            store.close()
    return contents


async def test_malformed_inputs_go_to_the_dlq_and_processing_continues(
    bootstrap: str, tmp_path: Path
) -> None:
    """Garbage, a record of the wrong family and a key/job-id mismatch: each dead-lettered with a reason."""
    from aiokafka import AIOKafkaProducer

    deployment = await Deployment.create(bootstrap, tmp_path, partitions=1)
    settings = deployment.settings
    good = create_command("good-job", one_time_spec(now_ms() + 3_600_000))
    wrong_family = mappers.to_bytes(good)  # a command where an outcome belongs
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        await producer.send_and_wait(settings.topic("commands"), b"\x00garbage", key=b"bad-1")
        await producer.send_and_wait(settings.topic("outcomes"), wrong_family, key=b"good-job")
        await producer.send_and_wait(settings.topic("commands"), mappers.to_bytes(good), key=b"someone-else")
        await producer.send_and_wait(settings.topic("commands"), mappers.to_bytes(good), key=b"good-job")
    finally:
        await producer.stop()
    stop = asyncio.Event()
    task = await _run_in_process(deployment, stop)
    try:
        for _ in range(30):
            dead = await read_all(bootstrap, settings.topic("dlq"))
            answers = await read_all(bootstrap, settings.topic("job-events"))
            if len(dead) >= 3 and answers:
                break
            await asyncio.sleep(1)
    finally:
        stop.set()
        await task
    letters = [mappers.dead_letter_from_bytes(r.value) for r in dead]
    assert [(d.source_topic, d.offset) for d in letters] == [
        (settings.topic("commands"), 0),
        (settings.topic("outcomes"), 0),
        (settings.topic("commands"), 1),
    ]
    assert all(d.reason.startswith("undecodable input: ") for d in letters)
    assert "does not match job id" in letters[2].reason
    assert letters[0].value == b"\x00garbage"
    assert [type(mappers.job_event_from_bytes(r.value)).__name__ for r in answers] == ["JobAccepted"]


async def test_zombie_stalled_mid_transaction_is_fenced_and_commits_nothing(
    bootstrap: str, tmp_path: Path
) -> None:
    """Fault: the owner stalls 20 s at after_produce_before_commit (session lapses) while a second
    processor takes over. Checker: the zombie's commit is fenced; each run id is committed once."""
    deployment = await Deployment.create(bootstrap, tmp_path, partitions=2, transaction_timeout_ms=60_000)
    instant = now_ms() + 5_000
    jobs = {f"zombie-{i:03d}": one_time_spec(instant) for i in range(300)}
    await submit(deployment.settings, (create_command(job_id, spec) for job_id, spec in jobs.items()))
    zombie = deployment.start_processor(
        home=tmp_path / "zombie", TICKWHEEL_FAILPOINTS="after_produce_before_commit=sleep:20000@2"
    )
    try:
        await asyncio.sleep(9)  # the zombie is now asleep inside its second transaction
        deployment.start_processor(home=tmp_path / "successor")
        dues = await wait_for_run_dues(deployment.settings, len(jobs), timeout_s=90)
        await asyncio.to_thread(_wait_quietly, zombie, 25)
        await asyncio.sleep(2)
        dues = [e for _, _, e in await committed_runs(deployment.settings) if isinstance(e, RunDue)]
    finally:
        deployment.stop_all()
    check = check_runs(dues, {run_id_for(job_id, instant) for job_id in jobs})
    assert (check.lost, check.duplicates, check.unexpected) == (set(), {}, set()), deployment.logs()
    zombie_log = (deployment.home / "processor-0.log").read_text()
    assert "fenced by a newer owner" in zombie_log, zombie_log[-3000:]


def _wait_quietly(proc: object, seconds: float) -> None:
    import subprocess

    assert isinstance(proc, subprocess.Popen)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=seconds)
