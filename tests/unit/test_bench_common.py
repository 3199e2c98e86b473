"""The benchmark harness's pure parts: statistics, rounds, tables, reports, and the bench CLI."""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench import clients
from bench.common import (
    RAW_LIMIT_LABEL,
    BenchResult,
    MachineInfo,
    Mark,
    Metrics,
    Results,
    Stats,
    Workload,
    append_report,
    bench_argparser,
    format_ratio,
    format_section,
    format_spread,
    format_table,
    parse_cpu_model,
    parse_mem_total_kib,
    parse_proc_stat_cpu,
    ratio,
    run_rounds,
    run_rounds_async,
    schedule,
    should_report,
    throughput,
)
from tickwheel import benchcli
from tickwheel.cli import CliError

MACHINE = MachineInfo(
    cpus=2, cpu_model="Test CPU @ 1GHz", mem_total_kib=2 * 1024 * 1024, python="3.11.9", commit="abc1234"
)
WHEN = datetime(2025, 3, 9, 7, 5, tzinfo=UTC)


# -- statistics and rounds --------------------------------------------------------------


def test_stats_median_min_max_of_odd_and_even_counts() -> None:
    """Stats gives the median (mean of the middle two for even counts), min, max and samples."""
    assert Stats.of([3.0, 1.0, 2.0]) == Stats(2.0, 1.0, 3.0, (3.0, 1.0, 2.0))
    assert Stats.of([4.0, 1.0, 3.0, 2.0]).median == 2.5


def test_stats_of_nothing_is_an_error() -> None:
    """A metric with no samples is a bug in the benchmark, not a zero."""
    with pytest.raises(ValueError, match="no samples"):
        Stats.of([])


@settings(max_examples=100, deadline=None)
@given(st.lists(st.floats(min_value=0, max_value=1e9), min_size=1, max_size=20))
def test_stats_median_lies_between_min_and_max(samples: list[float]) -> None:
    """For any samples, min <= median <= max."""
    stats = Stats.of(samples)
    assert stats.low <= stats.median <= stats.high


def test_schedule_runs_every_case_once_per_round_rotating_the_order() -> None:
    """Rounds interleave the cases and rotate who goes first, so drift hits all cases alike."""
    order = schedule(["a", "b", "c"], 4)
    assert [name for _, name in order] == list("abcbcacababc")
    assert [r for r, _ in order] == [0] * 3 + [1] * 3 + [2] * 3 + [3] * 3
    assert schedule([], 3) == []


def test_run_rounds_collects_each_metric_per_case() -> None:
    """run_rounds calls cases in schedule order and summarises each named metric."""
    calls: list[str] = []
    values = {"a": iter([10.0, 30.0, 20.0]), "b": iter([1.0, 2.0, 3.0])}

    def case(name: str) -> Metrics:
        calls.append(name)
        return {"rate": next(values[name])}

    logged: list[str] = []
    results = run_rounds({"a": lambda: case("a"), "b": lambda: case("b")}, 3, log=logged.append)
    assert calls == ["a", "b", "b", "a", "a", "b"]
    assert results["a"]["rate"] == Stats(20.0, 10.0, 30.0, (10.0, 30.0, 20.0))
    assert results["b"]["rate"].median == 2.0
    assert logged[0] == "round 1/3 a: rate 10.0"


async def test_run_rounds_async_awaits_each_case() -> None:
    """The async variant gives the same statistics for coroutine cases."""

    async def case() -> Metrics:
        return {"rate": 5.0, "lag_ms": 1.0}

    results = await run_rounds_async({"x": case}, 2, log=lambda _: None)
    assert results["x"]["rate"].samples == (5.0, 5.0)
    assert results["x"]["lag_ms"].median == 1.0


def test_throughput_reports_rate_and_cpu_per_record() -> None:
    """Rate is records over wall time; CPU cost is microseconds per record for client and broker."""
    metrics = throughput(1_000, Mark(10.0, 1.0, 5.0), Mark(12.0, 1.5, 5.2))
    assert metrics == pytest.approx({"rate": 500.0, "client_us": 500.0, "broker_us": 200.0})
    assert "broker_us" not in throughput(10, Mark(0.0, 0.0, None), Mark(1.0, 0.0, None))


def test_proc_stat_cpu_survives_a_command_name_with_spaces_and_parens() -> None:
    """utime+stime are read after the last ')' so odd process names do not shift the fields."""
    stat = "42 (java (x) y) S 1 42 42 0 -1 4194560 100 0 0 0 250 150 0 0 20 0 30"
    assert parse_proc_stat_cpu(stat, 100) == 4.0


# -- formatting -------------------------------------------------------------------------


def test_ratio_and_its_format() -> None:
    """Ratios are value/reference, shown with two decimals; no reference shows n/a."""
    assert ratio(15.0, 30.0) == 0.5
    assert ratio(1.0, 0.0) is None
    assert format_ratio(ratio(15.0, 30.0)) == "0.50x"
    assert format_ratio(None) == "n/a"
    assert format_spread(Stats.of([1200.4, 1500.6])) == "1,200-1,501"


def test_table_is_markdown_with_numbers_right_aligned() -> None:
    """Columns of numbers (including ranges, ratios and n/a) right-align; text left-aligns."""
    table = format_table(["client", "rate", "ratio"], [["aiokafka", "1,200", "0.50x"], ["c", "n/a", "1.00x"]])
    assert table.splitlines() == [
        "| client   |  rate | ratio |",
        "| -------- | ----: | ----: |",
        "| aiokafka | 1,200 | 0.50x |",
        "| c        |   n/a | 1.00x |",
    ]


def test_table_rejects_a_row_of_the_wrong_width() -> None:
    """A row with a missing cell is refused rather than silently shifting columns."""
    with pytest.raises(ValueError, match="one cell per header"):
        format_table(["a", "b"], [["1"]])


# -- machine and report ------------------------------------------------------------------


def test_cpu_model_and_memory_are_parsed_from_proc_text() -> None:
    """The first model name and MemTotal are taken; absent fields give placeholders."""
    cpuinfo = "processor\t: 0\nmodel name\t: Intel(R) Xeon(R)\n\nprocessor\t: 1\nmodel name\t: other\n"
    assert parse_cpu_model(cpuinfo) == "Intel(R) Xeon(R)"
    assert parse_cpu_model("") == "unknown"
    assert parse_mem_total_kib("MemTotal:       24684000 kB\nMemFree: 1 kB\n") == 24_684_000
    assert parse_mem_total_kib("") == 0


def test_section_names_benchmark_date_machine_and_commit() -> None:
    """A report section carries the benchmark, UTC date, nproc, CPU model, memory, load and commit."""
    section = format_section("clients", "| a |\n", MACHINE, WHEN)
    assert "## `clients` — 2025-03-09 07:05 UTC" in section
    assert "2 CPUs (Test CPU @ 1GHz), 2.0 GiB RAM, Python 3.11.9, load average 0.0" in section
    assert "- commit: abc1234" in section
    assert section.endswith("| a |\n")


def test_append_report_keeps_what_was_there(tmp_path: Path) -> None:
    """Appending twice leaves the README's text and both sections, oldest first."""
    readme = tmp_path / "README.md"
    readme.write_text("# Benchmarks\n")
    append_report("one", "first table", readme=readme, when=WHEN, machine=MACHINE)
    append_report("two", "second table", readme=readme, when=WHEN, machine=MACHINE)
    text = readme.read_text()
    assert text.startswith("# Benchmarks\n")
    assert text.index("first table") < text.index("second table")


def test_result_renders_as_markdown_and_json() -> None:
    """A result shows title, parameters, table and notes; JSON adds machine, date and data."""
    result = BenchResult("x", "Title", {"rounds": 5}, "| t |", ("note one",), {"limit": 3.0})
    assert result.markdown() == "Title (rounds=5)\n\n| t |\n\n- note one\n"
    decoded = json.loads(result.as_json(MACHINE, WHEN))
    assert decoded["limit"] == 3.0
    assert decoded["machine"]["cpus"] == 2
    assert decoded["when"] == "2025-03-09T07:05:00+00:00"


@pytest.mark.parametrize(
    ("argv", "expected"),
    [([], True), (["--quick"], False), (["--quick", "--report"], True), (["--no-report"], False)],
)
def test_reports_are_appended_unless_quick_or_refused(argv: list[str], expected: bool) -> None:
    """Full runs append to the README by default; quick smoke runs do not unless asked."""
    assert should_report(bench_argparser("x", "x").parse_args(argv)) is expected


def test_workload_counts_transactions_and_markers() -> None:
    """Each transaction adds one commit marker to the partition's end offset."""
    work = Workload(records=2_500, txn_size=1_000)
    assert work.transactions == 3
    assert work.expected_end(transactional=True) == 2_503
    assert work.expected_end(transactional=False) == 2_500
    assert [len(c) for c in work.chunks()] == [1_000, 1_000, 500]
    assert len(set(work.keys())) == 2_500
    assert len(work.value()) == 200


# -- the clients table -------------------------------------------------------------------


def _fake_results(limit: float) -> Results:
    rates = {case.label: 1_000.0 for case in clients.CASES} | {RAW_LIMIT_LABEL: limit}
    return {
        label: {"rate": Stats.of([rate]), "client_us": Stats.of([2.0]), "broker_us": Stats.of([3.0])}
        for label, rate in rates.items()
    }


def test_clients_table_has_one_row_per_case_relative_to_the_raw_limit() -> None:
    """Every case is a row, in declared order, with its ratio to the same run's raw limit."""
    rows = clients.table_rows(_fake_results(limit=4_000.0))
    assert len(rows) == len(clients.CASES)
    assert rows[0][-1] == "0.25x"
    limit_row = [case.label for case in clients.CASES].index(RAW_LIMIT_LABEL)
    assert rows[limit_row][-1] == "1.00x"
    notes = clients.summary(_fake_results(limit=4_000.0))
    assert any("confluent-kafka txn / best aiokafka txn" in note for note in notes)


# -- tickwheel bench -----------------------------------------------------------------------


def test_benchmarks_are_listed_from_the_folder_with_dashes(tmp_path: Path) -> None:
    """Modules become names with dashes; the harness and private modules are not benchmarks."""
    for name in ("__init__", "common", "_helpers", "clients", "hot_instant"):
        (tmp_path / f"{name}.py").write_text("")
    assert benchcli.available(tmp_path) == ["clients", "hot-instant"]
    assert benchcli.module_name("hot-instant", ["hot-instant"]) == "bench.hot_instant"
    assert benchcli.module_name("hot_instant", ["hot-instant"]) == "bench.hot_instant"


def _bench_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tickwheel")
    benchcli.register(parser.add_subparsers(dest="command", required=True))
    return parser


def test_unknown_benchmark_exits_2_naming_the_choices() -> None:
    """An unknown name is bad input: exit code 2 and a message listing what exists."""
    args = _bench_parser().parse_args(["bench", "no-such-bench"])
    with pytest.raises(CliError, match=r"unknown benchmark 'no-such-bench' \(available: .*clients") as err:
        args.func(args)
    assert err.value.code == 2


def test_options_reach_the_benchmark_wherever_they_stand() -> None:
    """--json/--quick before or after the name, and the benchmark's own options, all pass through."""
    parser = _bench_parser()
    after = parser.parse_args(["bench", "clients", "--quick", "--records", "5"])
    before = parser.parse_args(["bench", "--json", "clients", "--rounds", "3"])
    assert benchcli.bench_argv(after) == ["--quick", "--records", "5"]
    assert benchcli.bench_argv(before) == ["--json", "--rounds", "3"]
