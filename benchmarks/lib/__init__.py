"""Helpers the benchmark scripts share (not scripts themselves: ``tests/test_benchmarks_quick.py`` runs
every ``benchmarks/*.py`` with ``--quick``, and this folder is outside that glob)."""
