#!/usr/bin/env bash
# test.sh - the test command: setup, the local Slurm cluster, lint, then the whole test suite.
#
#   scripts/test.sh [PYTEST ARGS...]
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"

scripts/setup.sh
scripts/local-cluster.sh up
"$PYTHON" -m ruff check hpctrain tests benchmarks scripts
"$PYTHON" -m ruff format --check hpctrain tests benchmarks scripts
exec "$PYTHON" -m pytest "$@"
