"""Kafka client benchmark: aiokafka against confluent-kafka on one private broker, one run.

Measures, with ~200-byte records on a one-partition topic (the processor writes each
partition through its own transactional producer, so one partition per producer is the
shape that matters):

* produce rate, plain (acks=all, idempotent) and transactional (commits of ~1,000 records);
* for aiokafka, ``send`` per record against the batch API (``create_batch``/``send_batch``),
  each at the default ``max_batch_size`` (16 KiB) and at one large enough for a whole
  transaction, since the processor may use either;
* read_committed consume rate of both clients over the same transactional topic.

The aiokafka transactional batch row is the raw transactional produce limit
(``bench.common.raw_txn_produce``) that later benchmarks compare themselves with.
Run: ``tickwheel bench clients [--quick] [--json]``; default 5 rounds of 50,000 records.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from aiokafka import AIOKafkaConsumer, TopicPartition
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer
from confluent_kafka import TopicPartition as ConfluentTopicPartition

from bench.common import (
    AIOKAFKA_DEFAULT_BATCH,
    LARGE_BATCH,
    RAW_LIMIT_LABEL,
    RECORD_SIZE,
    TXN_SIZE,
    BenchBroker,
    BenchError,
    BenchResult,
    Mark,
    Metrics,
    Results,
    Workload,
    aiokafka_produce,
    bench_argparser,
    bench_broker,
    create_topic,
    emit,
    format_ratio,
    format_spread,
    format_table,
    format_us,
    ratio,
    raw_txn_produce,
    results_json,
    run_rounds,
    say,
    throughput,
    unique_name,
    verify_end_offset,
)
from tickwheel.localbroker import BrokerError

Client = Literal["aiokafka", "confluent-kafka"]
STALL_S = 30.0  # a consumer that reads nothing for this long has failed, not slowed down


@dataclass(frozen=True, slots=True)
class Case:
    """One row of the table: which client, what it does, and how it is configured."""

    label: str
    client: Client
    mode: Literal["plain", "txn", "read_committed"]
    api: str
    config: str


def _kib(size: int) -> str:
    return f"max_batch_size {size // 1024} KiB"


CASES = (
    Case("aiokafka plain send", "aiokafka", "plain", "send", _kib(AIOKAFKA_DEFAULT_BATCH) + " (default)"),
    Case("aiokafka plain send large", "aiokafka", "plain", "send", _kib(LARGE_BATCH)),
    Case("aiokafka txn send", "aiokafka", "txn", "send", _kib(AIOKAFKA_DEFAULT_BATCH) + " (default)"),
    Case("aiokafka txn send large", "aiokafka", "txn", "send", _kib(LARGE_BATCH)),
    Case("aiokafka txn batch", "aiokafka", "txn", "send_batch", _kib(AIOKAFKA_DEFAULT_BATCH) + " (default)"),
    Case(RAW_LIMIT_LABEL, "aiokafka", "txn", "send_batch", _kib(LARGE_BATCH)),
    Case("confluent plain", "confluent-kafka", "plain", "produce", "defaults (linger.ms 5)"),
    Case("confluent txn", "confluent-kafka", "txn", "produce", "defaults (linger.ms 5)"),
    Case("confluent txn linger 0", "confluent-kafka", "txn", "produce", "linger.ms 0"),
    Case("aiokafka consume", "aiokafka", "read_committed", "getmany", "defaults"),
    Case("confluent consume", "confluent-kafka", "read_committed", "consume(10000)", "defaults"),
)


# -- the measured operations ------------------------------------------------------------


def _aiokafka_case(
    broker: BenchBroker, work: Workload, *, transactional: bool, api: Literal["send", "batch"], batch: int
) -> Callable[[], Metrics]:
    async def once() -> Metrics:
        topic = await create_topic(broker.bootstrap, unique_name("clients"))
        return await aiokafka_produce(
            broker.bootstrap, topic, work, transactional=transactional, api=api,
            max_batch_size=batch, broker_pid=broker.pid,
        )

    return lambda: asyncio.run(once())


def _produce_one(producer: Producer, topic: str, key: bytes, value: bytes) -> None:
    while True:
        try:
            producer.produce(topic, value, key, partition=0)
        except BufferError:  # local queue full: let librdkafka drain it, then retry
            producer.poll(0.01)
        else:
            return


def confluent_produce(
    broker: BenchBroker, work: Workload, *, transactional: bool, linger_ms: int | None = None
) -> Metrics:
    """Write ``work`` with confluent-kafka (idempotent, acks=all); verify; metrics.

    ``linger_ms`` overrides librdkafka's 5 ms default: a transaction commits (and so
    flushes) every 1,000 records anyway, and lingering only delays each commit.
    """
    topic = asyncio.run(create_topic(broker.bootstrap, unique_name("clients")))
    config: dict[str, Any] = {
        "bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "acks": "all",
    }
    if linger_ms is not None:
        config["linger.ms"] = linger_ms
    if transactional:
        config["transactional.id"] = f"bench.{uuid.uuid4().hex}"
    producer = Producer(config)
    if transactional:
        producer.init_transactions(30)
    producer.list_topics(topic, timeout=30)  # connected with metadata, as aiokafka's start() leaves it
    value, chunks = work.value(), list(work.chunks())
    start = Mark.now(broker.pid)
    for chunk in chunks:
        if transactional:
            producer.begin_transaction()
        for key in chunk:
            _produce_one(producer, topic, key, value)
        if transactional:
            producer.commit_transaction(60)
        else:
            producer.poll(0)
    if producer.flush(60) != 0:
        raise BenchError("confluent-kafka could not deliver every record within 60 s")
    end = Mark.now(broker.pid)
    asyncio.run(verify_end_offset(broker.bootstrap, topic, work.expected_end(transactional=transactional)))
    return throughput(work.records, start, end)


async def aiokafka_consume(broker: BenchBroker, topic: str, records: int) -> Metrics:
    """Read ``records`` committed records from the start of partition 0 with aiokafka.

    Timed from assign (connections up, metadata known) to the last record, for both clients.
    """
    consumer = AIOKafkaConsumer(
        bootstrap_servers=broker.bootstrap, isolation_level="read_committed", enable_auto_commit=False
    )
    await consumer.start()
    try:
        tp = TopicPartition(topic, 0)
        start = Mark.now(broker.pid)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        seen, last_progress = 0, time.monotonic()
        while seen < records:
            batch = await consumer.getmany(timeout_ms=500)
            got = sum(len(found) for found in batch.values())
            seen, last_progress = seen + got, time.monotonic() if got else last_progress
            if time.monotonic() - last_progress > STALL_S:
                raise BenchError(f"aiokafka read {seen} of {records} records, then nothing for {STALL_S} s")
        end = Mark.now(broker.pid)
    finally:
        await consumer.stop()
    _check_count("aiokafka", seen, records)
    return throughput(records, start, end)


def confluent_consume(broker: BenchBroker, topic: str, records: int) -> Metrics:
    """Read ``records`` committed records from the start of partition 0 with confluent-kafka."""
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": unique_name("consume"),  # required, although assign() joins no group
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.list_topics(topic, timeout=30)  # connected with metadata, as aiokafka's start() leaves it
        start = Mark.now(broker.pid)
        consumer.assign([ConfluentTopicPartition(topic, 0, OFFSET_BEGINNING)])
        seen, last_progress = 0, time.monotonic()
        while seen < records:
            messages = consumer.consume(num_messages=10_000, timeout=0.5)
            errors = [m.error() for m in messages if m.error() is not None]
            if errors:
                raise BenchError(f"confluent-kafka consume failed: {errors[0]}")
            seen, last_progress = seen + len(messages), time.monotonic() if messages else last_progress
            if time.monotonic() - last_progress > STALL_S:
                raise BenchError(f"confluent-kafka read {seen} of {records}, then nothing for {STALL_S} s")
        end = Mark.now(broker.pid)
    finally:
        consumer.close()
    _check_count("confluent-kafka", seen, records)
    return throughput(records, start, end)


def _check_count(client: str, seen: int, records: int) -> None:
    # More than written means aborted or duplicate records leaked through read_committed.
    if seen != records:
        raise BenchError(f"{client} read {seen} committed records, expected exactly {records}")


def _prepare_consume_topic(broker: BenchBroker, work: Workload) -> str:
    """One transactional topic both consumers read in every round (markers included)."""

    async def fill() -> str:
        topic = await create_topic(broker.bootstrap, unique_name("consume"))
        await aiokafka_produce(
            broker.bootstrap, topic, work, transactional=True, api="batch", max_batch_size=LARGE_BATCH
        )
        return topic

    return asyncio.run(fill())


def build_cases(broker: BenchBroker, work: Workload) -> dict[str, Callable[[], Metrics]]:
    topic = _prepare_consume_topic(broker, work)
    aio, small = _aiokafka_case, AIOKAFKA_DEFAULT_BATCH
    cases = {
        "aiokafka plain send": aio(broker, work, transactional=False, api="send", batch=small),
        "aiokafka plain send large": aio(broker, work, transactional=False, api="send", batch=LARGE_BATCH),
        "aiokafka txn send": aio(broker, work, transactional=True, api="send", batch=small),
        "aiokafka txn send large": aio(broker, work, transactional=True, api="send", batch=LARGE_BATCH),
        "aiokafka txn batch": aio(broker, work, transactional=True, api="batch", batch=small),
        RAW_LIMIT_LABEL: lambda: asyncio.run(raw_txn_produce(broker.bootstrap, work, broker.pid)),
        "confluent plain": lambda: confluent_produce(broker, work, transactional=False),
        "confluent txn": lambda: confluent_produce(broker, work, transactional=True),
        "confluent txn linger 0": lambda: confluent_produce(broker, work, transactional=True, linger_ms=0),
        "aiokafka consume": lambda: asyncio.run(aiokafka_consume(broker, topic, work.records)),
        "confluent consume": lambda: confluent_consume(broker, topic, work.records),
    }
    assert list(cases) == [case.label for case in CASES], "the table and the cases must agree"
    return cases


# -- the table ------------------------------------------------------------------------

HEADERS = (
    "client", "mode", "API", "config", "records/s (median)", "min-max",
    "client CPU µs/rec", "broker CPU µs/rec", "x raw txn limit",
)


def table_rows(results: Results) -> list[list[str]]:
    """One row per case, in the order of ``CASES``, rates relative to the raw txn limit."""
    limit = results[RAW_LIMIT_LABEL]["rate"].median
    rows: list[list[str]] = []
    for case in CASES:
        metrics = results[case.label]
        rate, broker = metrics["rate"], metrics.get("broker_us")
        rows.append([
            case.client, case.mode, case.api, case.config, f"{rate.median:,.0f}", format_spread(rate),
            format_us(metrics["client_us"].median), format_us(broker.median if broker else None),
            format_ratio(ratio(rate.median, limit)),
        ])
    return rows


def _median_ratio(results: Results, a: str, b: str) -> str:
    return format_ratio(ratio(results[a]["rate"].median, results[b]["rate"].median))


def summary(results: Results) -> tuple[str, ...]:
    """The comparisons the processor's design depends on, as ratios of medians."""
    r = results
    return (
        f"confluent-kafka txn / best aiokafka txn (raw limit): "
        f"{_median_ratio(r, 'confluent txn', RAW_LIMIT_LABEL)} at defaults, "
        f"{_median_ratio(r, 'confluent txn linger 0', RAW_LIMIT_LABEL)} with linger.ms 0",
        f"aiokafka txn, batch API / send, at {LARGE_BATCH // 1024} KiB: "
        f"{_median_ratio(r, RAW_LIMIT_LABEL, 'aiokafka txn send large')}; at 16 KiB: "
        f"{_median_ratio(r, 'aiokafka txn batch', 'aiokafka txn send')}",
        f"aiokafka txn send, {LARGE_BATCH // 1024} KiB / 16 KiB max_batch_size: "
        f"{_median_ratio(r, 'aiokafka txn send large', 'aiokafka txn send')}",
        f"aiokafka txn send / plain send, default batch: "
        f"{_median_ratio(r, 'aiokafka txn send', 'aiokafka plain send')}",
        f"read_committed consume, confluent-kafka / aiokafka: "
        f"{_median_ratio(r, 'confluent consume', 'aiokafka consume')}",
    )


def render(results: Results, work: Workload, rounds: int) -> BenchResult:
    return BenchResult(
        name="clients",
        title="Kafka client produce and read_committed consume rates, one partition, same broker and run",
        params={
            "rounds": rounds, "records/round": f"{work.records:,}", "record": f"{work.record_size} B",
            "txn": f"{work.txn_size:,} records",
        },
        table=format_table(HEADERS, table_rows(results)),
        notes=summary(results),
        data={
            "raw_txn_limit": results[RAW_LIMIT_LABEL]["rate"].median,
            "results": results_json(results),
        },
    )


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = bench_argparser("clients", __doc__.splitlines()[0] if __doc__ else "clients")
    parser.add_argument("--records", type=int, help="records per round (default 50,000; 10,000 with --quick)")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    rounds = args.rounds or (2 if args.quick else 5)
    work = Workload(records=args.records or (10_000 if args.quick else 50_000), txn_size=TXN_SIZE,
                    record_size=RECORD_SIZE)
    try:
        with bench_broker(args.bootstrap) as broker:
            results = run_rounds(build_cases(broker, work), rounds)
    except (BenchError, BrokerError) as exc:
        say(f"tickwheel bench clients: {exc}")
        return 1
    emit(render(results, work, rounds), args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
