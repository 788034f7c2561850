"""Benchmarks and the soak: scripts run from the repository root.

``python -m bench.soak`` (and ``python bench/<name>.py``) find this repository's test harness
(``tests.harness``) because the repository root is on ``sys.path``: ``-m`` puts the working
directory there, the scripts add it themselves.
"""
