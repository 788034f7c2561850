# Development tasks. `pip install rust-just` gives `just`; every recipe uses .venv/bin/...

python := "python3"

# List recipes
default:
    @just --list

# Create .venv and install the package with its dev extras
setup:
    {{python}} -m venv .venv
    .venv/bin/pip install -q -e '.[dev]'

# Run the test suite (the same command as the README and .ci/run)
test *args:
    .venv/bin/python -m pytest -q -n 2 {{args}}

# Lint
lint:
    .venv/bin/ruff check .

# Run the demo (embedded nats-server in ./.demo/nats)
demo *args:
    .venv/bin/nats-scheduler demo {{args}}

# Open the scheduler console
tui:
    .venv/bin/astrabox-sched-tui

# Run the 3-node cluster of cluster/ (nats-server.conf's users; data in ./.cluster)
cluster *args:
    .venv/bin/python -m nats_scheduler.natsserver.config cluster {{args}}

# Run the benchmarks (each prints figures and ratios against a same-run reference)
bench:
    .venv/bin/python bench/history.py
    .venv/bin/python bench/capacity.py
    .venv/bin/python bench/takeover.py
    .venv/bin/python bench/pause_visibility.py
    .venv/bin/python bench/tui_action_latency.py
