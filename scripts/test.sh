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
# This script started the local cluster, so the tests that take a node down (and bring it back) may
# run; on a cluster shared with others, run pytest without it.
export HPCTRAIN_DISRUPTIVE="${HPCTRAIN_DISRUPTIVE:-1}"
exec "$PYTHON" -m pytest "$@"
