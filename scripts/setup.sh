#!/usr/bin/env bash
# setup.sh - install hpctrain and what its tests need on a fresh Debian machine (root), idempotently.
#
#   scripts/setup.sh        Debian packages (shellcheck; Slurm comes with local-cluster.sh up),
#                           then `pip install -e .[test,watchdog]` with the CPU build of torch pinned.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-python3}"
# A plain `torch` requirement would pull a multi-GB CUDA build; the CPU build is pinned here.
TORCH_PIN="${HPCTRAIN_TORCH:-torch==2.13.0}"

if ! command -v shellcheck >/dev/null 2>&1; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq shellcheck >/dev/null
fi

# Installed means: the console script exists and every test dependency imports (ruff included), and
# setuptools can build a wheel by itself (>= 70.1; the wheel test builds one).
if ! command -v hpctrain >/dev/null 2>&1 \
    || ! "$PYTHON" -c "import hpctrain, torch, sklearn, mpi4py, pytest_timeout, xdist, hypothesis, matplotlib, tensorboard, rich, wandb, optuna, msgspec, yaml, jinja2, cloudpickle" >/dev/null 2>&1 \
    || ! "$PYTHON" -m ruff --version >/dev/null 2>&1 \
    || ! command -v py-spy >/dev/null 2>&1 \
    || ! "$PYTHON" -c "import setuptools.command.bdist_wheel" >/dev/null 2>&1; then
    "$PYTHON" -m pip install -q --disable-pip-version-check "$TORCH_PIN"
    "$PYTHON" -m pip install -q --disable-pip-version-check -e ".[test,watchdog]" "$TORCH_PIN"
fi
# Byte-compile the package: with PYTHONDONTWRITEBYTECODE set, every CLI start would recompile it.
"$PYTHON" -m compileall -q hpctrain >/dev/null
scripts/install-containers.sh  # enroot, pyxis, runc: the container tests (docs/containers.md)
"$PYTHON" -c "import hpctrain, torch; print(f'hpctrain {hpctrain.__version__}, torch {torch.__version__}')"
