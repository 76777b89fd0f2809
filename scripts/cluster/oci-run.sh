#!/usr/bin/env bash
# cluster/oci-run.sh NODE BUNDLE ID - oci.conf's RunTimeRun on the local cluster: runc run, after adding
# to the bundle's config.json the node name that Slurm 22.05 leaves out of a container's environment
# (SLURMD_NODENAME: the runtime names its node by it; srun would otherwise pass on the batch node's).
# The other task variables (SLURM_PROCID...) are missing too: under Slurm 22.05 a container step runs
# one task per node, so the ranks come from torchrun (launcher: torchrun).
set -euo pipefail
node=$1 bundle=$2 id=$3
config="$bundle/config.json"
jq --arg node "$node" '.process.env = [.process.env[] | select(startswith("SLURMD_NODENAME=") | not)]
    + ["SLURMD_NODENAME=" + $node]' "$config" >"$config.tmp"
mv -f "$config.tmp" "$config"
exec runc --root=/run/hpctrain-oci run --bundle "$bundle" "$id"
