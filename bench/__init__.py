"""Tickwheel benchmarks: each module has ``main(argv)`` and is run as ``tickwheel bench <name>``.

``bench.common`` is the shared harness (broker, rounds, tables, reports, the raw produce
limit); see ``bench/README.md`` for how to write a benchmark and for the recorded results.
"""
