#!/usr/bin/env bash
# demo.sh - the main job end to end on the built-in local cluster: install, cluster up, submit the
# data-parallel digits job (2 nodes x 2 ranks), wait for it, then show its status and result.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"

scripts/setup.sh
scripts/local-cluster.sh up
hpctrain render jobs/digits-ddp.yaml --site local | head -n 20
echo "..."
hpctrain submit jobs/digits-ddp.yaml --site local --wait
job_id=$(hpctrain list --json | "$PYTHON" -c "import json, sys; print(json.load(sys.stdin)[0]['job_id'])")
hpctrain status "$job_id"
hpctrain logs "$job_id" --rank 0 --lines 5
