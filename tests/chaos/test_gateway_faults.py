"""Gateway faults: the gateway SIGKILLed and restarted on its port while clients retry creates.

Fault: a real ``tickwheel gateway`` process (the CLI's default embedded read model, so its
projector dies mid-fold too) is SIGKILLed ``2 x scale.zombie_cycles`` times (4 small, 100
large) at random moments and restarted on the same port and home, while six HTTP clients
create one-time noop jobs due a few seconds ahead with ``POST /v1/jobs`` (half with
``?wait=committed``), one Idempotency-Key per logical job and no ``job_id`` in the body, so
the gateway derives the job id from the key. On a connection error, a timeout, a 5xx or a
429 a client sends the *same* request with the *same* key again (short backoff) until a 2xx
or a definitive 4xx. A real processor and worker run throughout; at every other kill the
processor is SIGSTOPped from 1 s before it until the new gateway is up (a few seconds, inside
its session timeout), so requests in flight were appended but not yet answered and their
retries append the same command again.

Checker: :func:`check` finds nothing (nothing lost or duplicated, every run settled, the
restarted gateway's read model equals a fresh fold of the log, replay verify clean); and per
key: exactly one JobAccepted (one answer on ``job-events``) naming the job id derived from
the key, every 2xx answer named that job, no JobRejected, no job without a key, and every
acknowledged job dispatched and settled exactly once. Repeated appends of one command id on
``commands`` are expected (a retry after the append but before the answer was folded): the
test requires some (the held-processor kills make them) and the processor's dedupe by
command id to make them harmless. No attempt may be answered 500.

Key reuse: one key with two bodies is refused 422 before a restart (the process's key
cache) and after one (the read model's key claim, folded from the audit record's request
fingerprint); either way the second body creates no job and changes nothing, the first
body's job stands.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.chaos.checker import check
from tests.chaos.conftest import Scale
from tests.chaos.faults import Fleet, Member, pause, resume, stable_port
from tests.chaos.recorder import CommandOutcome, History, Recorder
from tests.chaos.scenario import (
    deploy,
    now_ms,
    one_time_spec,
    wait_answered,
    wait_dispatched,
    wait_running,
    wait_settled,
)
from tickwheel.gateway.handlers import derived_job_id
from tickwheel.projections.kv import RocksKV
from tickwheel.projections.readmodel import ReadModel
from tickwheel.schemas import mappers
from tickwheel.schemas.model import (
    CommandMeta,
    CreateJob,
    JobAccepted,
    JobChanged,
    JobRejected,
    RunDue,
    RunSettled,
    command_id_for,
    run_id_for,
)

pytestmark = [pytest.mark.broker, pytest.mark.timeout(900)]

PRINCIPAL = "chaos-client"
TOKEN = "chaos-gateway-token-0001"
TEAM = "team-a"
CLIENTS = 6
DUE_AHEAD_MS = 5_000
RETRY_DEADLINE_S = 90.0  # a logical request still unanswered after this is "unknown"
REQUEST_TIMEOUT_S = 15.0
GATEWAY_ENV = {
    "TICKWHEEL_GATEWAY_TOKENS": json.dumps(
        [{"token": TOKEN, "principal": PRINCIPAL, "team": TEAM, "role": "owner"}]
    ),
    # The per-team create rate is not the fault under test (429s would be retried anyway).
    "TICKWHEEL_GATEWAY_CREATES_PER_SECOND": "10000",
    "TICKWHEEL_GATEWAY_CREATE_BURST": "10000",
}


def job_body(name: str, at_ms: int) -> dict[str, Any]:
    return {
        "team": TEAM,
        "name": name,
        "schedule": {"kind": "once", "at_ms": at_ms},
        "executor": {"kind": "noop"},
    }


@dataclass
class LogicalCreate:
    """One job a client wants: its key and body, and what every attempt was answered."""

    key: str
    body: dict[str, Any]
    wait: bool
    statuses: list[int | None] = field(default_factory=list)  # None: no answer (connection, timeout)
    named: set[str] = field(default_factory=set)  # job ids named by 2xx answers
    outcome: CommandOutcome = CommandOutcome.UNKNOWN
    detail: str = ""

    @property
    def command_id(self) -> str:
        return command_id_for(self.key, PRINCIPAL)

    @property
    def job_id(self) -> str:
        return derived_job_id(self.command_id)

    @property
    def run_id(self) -> str:
        return run_id_for(self.job_id, self.body["schedule"]["at_ms"])

    def command(self) -> CreateJob:
        """The command the gateway appends for this request (what the recorder judges)."""
        spec = replace(one_time_spec(self.body["schedule"]["at_ms"]), name=self.body["name"])
        return CreateJob(CommandMeta(self.command_id, self.job_id, now_ms(), PRINCIPAL), spec)


@dataclass
class Api:
    """The gateway's HTTP API as one client sees it."""

    session: aiohttp.ClientSession
    base: str
    accepted: asyncio.Event = field(default_factory=asyncio.Event)  # set by every 2xx answer

    async def create(self, req: LogicalCreate) -> tuple[int | None, dict[str, Any]]:
        query = "?wait=committed" if req.wait else ""
        headers = {"Idempotency-Key": req.key}
        try:
            async with self.session.post(f"{self.base}/v1/jobs{query}", json=req.body, headers=headers) as r:
                if r.status < 300:
                    self.accepted.set()
                return r.status, _json_object(await r.text())
        except (aiohttp.ClientError, TimeoutError) as exc:
            return None, {"error": repr(exc)}

    async def healthy(self) -> bool:
        try:
            async with self.session.get(f"{self.base}/healthz") as r:
                return r.status == 200
        except (aiohttp.ClientError, TimeoutError):
            return False

    async def projection_lag(self) -> int | None:
        try:
            async with self.session.get(f"{self.base}/v1/stats") as r:
                body = _json_object(await r.text())
        except (aiohttp.ClientError, TimeoutError):
            return None
        lag = body.get("projection", {}).get("lag")
        return lag if isinstance(lag, int) else None


def _json_object(text: str) -> dict[str, Any]:
    """The answer's JSON object; anything else (a proxy's text page) is kept as ``text``."""
    try:
        value = json.loads(text)
    except ValueError:
        return {"text": text[:200]}
    return value if isinstance(value, dict) else {"text": text[:200]}


async def create_until_answered(api: Api, req: LogicalCreate, rng: random.Random) -> None:
    """Send ``req`` until a 2xx or a definitive 4xx; no answer, a 429 or a 5xx is retried
    with the same key and body."""
    deadline = time.monotonic() + RETRY_DEADLINE_S
    while time.monotonic() < deadline:
        status, body = await api.create(req)
        req.statuses.append(status)
        if status is not None and status < 300:
            req.named.add(str(body.get("job_id")))
            req.outcome = CommandOutcome.OK
            return
        if status is not None and status < 500 and status != 429:
            req.outcome, req.detail = CommandOutcome.FAILED, f"{status} {body}"
            return
        req.detail = f"{status} {body}"
        await asyncio.sleep(min(1.0, 0.05 * 2 ** len(req.statuses)) * rng.uniform(0.5, 1.0))


async def client(api: Api, index: int, stop: asyncio.Event, made: list[LogicalCreate]) -> None:
    """Create jobs one after another until ``stop``; each is retried until answered."""
    rng = random.Random(index)
    n = 0
    while not stop.is_set():
        req = LogicalCreate(f"gw-{index}-{n:05d}", job_body("job", now_ms() + DUE_AHEAD_MS), index % 2 == 0)
        made.append(req)
        await create_until_answered(api, req, rng)
        n += 1
        await asyncio.sleep(rng.uniform(0.02, 0.2))


@dataclass
class Gateway:
    """The gateway process under fire: started, SIGKILLed and restarted on one port and home."""

    fleet: Fleet
    api: Api
    port: int
    member: Member | None = None
    downtimes_ms: list[int] = field(default_factory=list)

    async def start(self, name: str, timeout_s: float = 60) -> None:
        self.member = self.fleet.gateway(name, self.port, env=GATEWAY_ENV)
        deadline = time.monotonic() + timeout_s
        while not await self.api.healthy():
            assert self.member.alive, self.fleet.logs()
            assert time.monotonic() < deadline, self.fleet.logs()
            await asyncio.sleep(0.1)

    async def kill_and_restart(self, cycle: int, rng: random.Random, *, hold: Member | None) -> None:
        """SIGKILL, wait a moment, start again. With ``hold``, that processor is SIGSTOPped
        from 1 s before the kill until the new gateway is up (well within its 10 s session):
        the requests in flight then were appended but not answered, so their retries append
        again and the processor's dedupe by command id is what keeps one job per key."""
        assert self.member is not None
        if hold is not None:
            pause(hold)
            await asyncio.sleep(1.0)
        killed = time.monotonic()
        self.fleet.kill(self.member)
        await asyncio.sleep(rng.uniform(0.0, 1.0))  # clients meet a closed port meanwhile
        await self.start(f"gateway-{cycle + 1}")
        self.downtimes_ms.append(int((time.monotonic() - killed) * 1000))
        if hold is not None:
            # The retries must reach the new gateway before the answers do: keep holding
            # until it has accepted a mutation (its start fence is open), then a moment
            # for the clients' short backoff, all inside the processor's 10 s session.
            self.api.accepted.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.api.accepted.wait(), 4.0)
            await asyncio.sleep(0.5)
            resume(hold)

    async def wait_caught_up(self, timeout_s: float = 60) -> int | None:
        """Until the read model folded the whole log (lag 0); returns the last lag seen."""
        deadline = time.monotonic() + timeout_s
        lag = await self.api.projection_lag()
        while lag != 0 and time.monotonic() < deadline:
            await asyncio.sleep(0.5)
            lag = await self.api.projection_lag()
        return lag


def read_projection(home: Path, job_ids: Iterable[str]) -> dict[str, str]:
    """Job id -> ``status/vN`` from the stopped gateway's embedded read model (the checker's form)."""
    kv = RocksKV(home / "projections")
    try:
        model = ReadModel(kv)
        views = {job_id: model.job(job_id) for job_id in job_ids}
        return {job_id: f"{v.status}/v{v.version}" for job_id, v in views.items() if v is not None}
    finally:
        kv.close()


def stop(members: Iterable[Member]) -> None:
    for member in members:
        member.proc.terminate()
    for member in members:
        member.proc.wait(timeout=30)


# -- the per-key checker ------------------------------------------------------------------------


def key_problems(history: History, requests: list[LogicalCreate]) -> dict[str, list[str]]:
    """Per idempotency key: one job, one answer, the job every 2xx named, dispatched and settled once."""
    events = [mappers.job_event_from_bytes(r.value) for r in history.records("job-events") if r.value]
    runs = [mappers.run_event_from_bytes(r.value) for r in history.records("runs") if r.value]
    accepted = Counter(e.command_id for e in events if isinstance(e, JobAccepted))
    accepted_jobs = {(e.command_id, e.job_id) for e in events if isinstance(e, JobAccepted)}
    answered = Counter(
        e.command_id for e in events if isinstance(e, JobAccepted | JobChanged | JobRejected) and e.command_id
    )
    rejected = {e.command_id for e in events if isinstance(e, JobRejected)}
    dues = Counter(e.run_id for e in runs if isinstance(e, RunDue))
    settled = Counter(e.run_id for e in events if isinstance(e, RunSettled))
    ours = {r.command_id for r in requests}
    ok = [r for r in requests if r.outcome is CommandOutcome.OK]
    found = {
        "two_jobs_for_one_key": [c for c in ours if accepted[c] > 1],
        "answered_twice": [c for c in ours if answered[c] > 1],
        "rejected": sorted(rejected & ours),
        "ok_not_registered": [r.key for r in ok if (r.command_id, r.job_id) not in accepted_jobs],
        "named_another_job": [f"{r.key}: {r.named}" for r in requests if r.named - {r.job_id}],
        "job_of_no_key": sorted(set(accepted) - ours),
        "not_dispatched_once": [f"{r.key}: {dues[r.run_id]}" for r in ok if dues[r.run_id] != 1],
        "not_settled_once": [f"{r.key}: {settled[r.run_id]}" for r in ok if settled[r.run_id] != 1],
    }
    return {name: items for name, items in found.items() if items}


def appended_again(history: History) -> int:
    """Command records on ``commands`` beyond the first of their command id (retries' appends)."""
    ids = Counter(
        mappers.command_from_bytes(r.value).meta.command_id for r in history.records("commands") if r.value
    )
    return sum(n - 1 for n in ids.values())


def figures(requests: list[LogicalCreate], gateway: Gateway, history: History) -> dict[str, Any]:
    statuses = Counter(str(s) for r in requests for s in r.statuses)
    attempts = sum(len(r.statuses) for r in requests)
    return {
        "logical_requests": len(requests),
        "attempts": attempts,
        "retried_requests": sum(1 for r in requests if len(r.statuses) > 1),
        "statuses": dict(statuses),
        "downtime_ms_max": max(gateway.downtimes_ms, default=0),
        "commands_appended_again": appended_again(history),
    }


# -- the scenario -------------------------------------------------------------------------------


async def test_gateway_sigkilled_while_clients_retry_one_key_creates_each_job_once(
    bootstrap: str, tmp_path: Path, scale: Scale, chaos_report: Callable[..., None]
) -> None:
    """Fault: SIGKILL and restart of the gateway while clients retry creates with one key per job.
    Checker: one job and one answer per key, every acknowledged job dispatched and settled
    once, nothing lost, the restarted gateway's read model = fold(log); a reused key is 422
    within a process and creates nothing after a restart."""
    rng = random.Random(scale.seed + 11)
    kills = 2 * scale.zombie_cycles
    deployment = await deploy(bootstrap, tmp_path, 3)
    fleet = Fleet(deployment)
    recorder = Recorder(deployment.settings, principal=PRINCIPAL)
    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)
    auth = {"Authorization": f"Bearer {TOKEN}"}
    try:
        async with aiohttp.ClientSession(timeout=timeout, headers=auth) as session, recorder.tailing():
            port = stable_port()
            gateway = Gateway(fleet, Api(session, f"http://127.0.0.1:{port}"), port)
            processor, worker = fleet.processor("p"), fleet.worker("w")
            assert await wait_running(processor, 3), fleet.logs()
            await gateway.start("gateway-0")
            reuse = await KeyReuse.within_one_process(gateway.api, rng)
            requests = await under_fire(gateway, processor, kills, rng)
            await reuse.after_restarts(gateway.api)
            everything = [reuse.first, *requests]
            for req in everything:
                recorder.note(req.command(), req.outcome, req.detail)
            pending = await quiesce(gateway, everything, stop_first=[processor, worker])
            fleet.stop_all()
        assert pending == {}, f"{pending}\n{fleet.logs()}"
        projection = read_projection(fleet.home / "gateway", {r.job_id for r in everything})
        history = await recorder.finish(projection)
    finally:
        fleet.stop_all()
    result = check(history, settle=True)
    per_key = key_problems(history, everything)
    extra = figures(requests, gateway, history)
    chaos_report(
        "gateway SIGKILL + client retries",
        kills,
        result,
        kills=fleet.kills,
        reuse_before_restart=reuse.before,
        reuse_after_restart=reuse.after,
        **extra,
    )
    assert result.problems() == {}, result.explain() + "\n" + fleet.logs()
    assert per_key == {}, f"{per_key}\n{extra}\n{fleet.logs()}"
    assert [(r.key, r.outcome, r.detail) for r in everything if r.outcome is not CommandOutcome.OK] == []
    assert "500" not in extra["statuses"], extra
    assert fleet.kills == kills
    # The held-processor kills leave appended-but-unanswered requests whose retries append again.
    assert extra["commands_appended_again"] > 0 or kills < 2, extra
    reuse.assert_refused_or_harmless(history)


async def under_fire(
    gateway: Gateway, processor: Member, kills: int, rng: random.Random
) -> list[LogicalCreate]:
    """Clients create jobs while the gateway is SIGKILLed and restarted ``kills`` times (every
    other time with the processor held, so answers are pending); returns every logical request."""
    requests: list[LogicalCreate] = []
    stop_clients = asyncio.Event()
    clients = [asyncio.create_task(client(gateway.api, i, stop_clients, requests)) for i in range(CLIENTS)]
    for cycle in range(kills):
        await asyncio.sleep(rng.uniform(2.0, 4.0))
        await gateway.kill_and_restart(cycle, rng, hold=processor if cycle % 2 else None)
    await asyncio.sleep(2.0)  # the last incarnation serves some requests too
    stop_clients.set()
    await asyncio.gather(*clients)
    return requests


async def quiesce(
    gateway: Gateway, requests: list[LogicalCreate], *, stop_first: list[Member]
) -> dict[str, Any]:
    """Until every acknowledged create is answered, dispatched and settled; then stop
    ``stop_first`` and let the gateway's read model fold the final log. Returns what is not done."""
    settings = gateway.fleet.deployment.settings
    acked = [r for r in requests if r.outcome is CommandOutcome.OK]
    pending: dict[str, Any] = {
        "unanswered": await wait_answered(settings, {r.command_id for r in acked}, 60),
        "not_dispatched": await wait_dispatched(settings, {r.run_id for r in acked}, 60),
        "unsettled": await wait_settled(settings, 60),
    }
    stop(stop_first)
    pending["read_model_lag"] = await gateway.wait_caught_up()
    return {name: value for name, value in pending.items() if value}


@dataclass
class KeyReuse:
    """One key sent with two bodies: refused within a gateway process, harmless after a restart."""

    first: LogicalCreate
    second: LogicalCreate
    before: int | None = None  # the second body's status in the process that saw the first
    after: int | None = None  # the second body's status after restarts
    after_body: dict[str, Any] = field(default_factory=dict)

    @classmethod
    async def within_one_process(cls, api: Api, rng: random.Random) -> KeyReuse:
        at_ms = now_ms() + DUE_AHEAD_MS
        first = LogicalCreate("reuse-key", job_body("reuse-first", at_ms), wait=True)
        await create_until_answered(api, first, rng)
        reuse = cls(first, LogicalCreate("reuse-key", job_body("reuse-second", at_ms + 60_000), wait=True))
        reuse.before, _ = await api.create(reuse.second)
        return reuse

    async def after_restarts(self, api: Api) -> None:
        self.after, self.after_body = await api.create(self.second)

    def assert_refused_or_harmless(self, history: History) -> None:
        """422 within one process and after restarts (the key claim folded from the audit
        log outlives the process): the second body is not appended as a new job and does
        not change the first."""
        assert self.before == 422, self.before
        assert self.after == 422, (self.after, self.after_body)
        events = [mappers.job_event_from_bytes(r.value) for r in history.records("job-events") if r.value]
        ours = self.first.command_id
        specs = [e.spec for e in events if isinstance(e, JobAccepted) and e.command_id == ours]
        assert [s.name for s in specs] == ["reuse-first"], specs
