"""Benchmarks: each ``bench_*.py`` prints its numbers next to a reference measured in the
same run (``python -m bench`` runs them all; not part of ``make test``)."""
