#!/usr/bin/env bash
# test.sh - the test command: setup, the local Slurm cluster, lint, the whole test suite on Slurm
# 22.05, then the Slurm 25.11 leg of the version matrix (the pyslurm backend against a real Slurm).
#
#   scripts/test.sh                     everything above (what CI runs)
#   scripts/test.sh PYTEST ARGS...      only pytest with these arguments, on 22.05
#   scripts/test.sh --slurm-matrix ...  the whole version matrix (scripts/slurm-matrix.sh ...)
#
# HPCTRAIN_TEST_LEGS (default 25.11) names the matrix legs that the whole run adds after the suite;
# empty adds none. A leg builds its Slurm once and caches it under /opt/hpctrain-slurm.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"

if [[ "${1:-}" == --slurm-matrix ]]; then
    shift
    exec scripts/slurm-matrix.sh "$@"
fi

scripts/setup.sh
scripts/local-cluster.sh up
"$PYTHON" -m ruff check hpctrain tests benchmarks scripts
"$PYTHON" -m ruff format --check hpctrain tests benchmarks scripts
# This script started the local cluster, so the tests that take a node down (and bring it back) may
# run; on a cluster shared with others, run pytest without it.
export HPCTRAIN_DISRUPTIVE="${HPCTRAIN_DISRUPTIVE:-1}"
if (($#)); then
    exec "$PYTHON" -m pytest "$@"
fi

suite=0
"$PYTHON" -m pytest || suite=$?
IFS=, read -r -a wanted <<<"${HPCTRAIN_TEST_LEGS-25.11}"
legs=()
for release in "${wanted[@]}"; do
    if scripts/build-slurm.sh --available "$release"; then
        legs+=("$release")
    else
        echo "test.sh: SKIPPED the Slurm ${release} leg: it cannot be built here (see above; docs/compatibility.md)" >&2
    fi
done
((${#legs[@]})) || exit "$suite"
matrix=0
scripts/slurm-matrix.sh --slurm "$(IFS=,; echo "${legs[*]}")" || matrix=$?
# A test run gives the CPU of the legs' clusters back (22.05 is the suite's own cluster).
for release in "${legs[@]}"; do
    [[ "$release" == 22.05 ]] || scripts/local-cluster.sh --slurm "$release" down || true
done
((suite == 0)) || exit "$suite"
exit "$matrix"
