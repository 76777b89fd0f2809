#!/usr/bin/env bash
# test.sh - the test command: setup, the local Slurm cluster, lint, the unit tests, the real-Slurm
# integration tests on Slurm 22.05, then the Slurm 25.11 leg of the version matrix (the pyslurm
# backend against a real Slurm), and a table of each phase's wall time at the end.
#
#   scripts/test.sh                     everything above (what CI runs)
#   scripts/test.sh PYTEST ARGS...      only pytest with these arguments, on 22.05
#   scripts/test.sh --slurm-matrix ...  the whole version matrix (scripts/slurm-matrix.sh ...)
#
# HPCTRAIN_TEST_LEGS (default 25.11) names the matrix legs that the whole run adds after the suite;
# empty adds none. A leg builds its Slurm once and caches it under /opt/hpctrain-slurm. The whole
# run builds the legs' Slurm (and pyslurm) in the background from the moment the 22.05 cluster is
# up, at idle CPU priority: the build takes only the CPU that the tests leave, and the leg waits
# for it. HYPOTHESIS_PROFILE (default ci) sets the property tests' examples (tests/conftest.py).
# The phase table's functions run only from the EXIT trap, which shellcheck reads as unreachable.
# shellcheck disable=SC2317
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
PROG="$(basename "$0")"
readonly PYTHON PROG

if [[ "${1:-}" == --slurm-matrix ]]; then
    shift
    exec scripts/slurm-matrix.sh "$@"
fi

log() { printf '%s: %s\n' "$PROG" "$*" >&2; }

# lint: ruff's checks and its format check, both run; non-zero if either fails (set -e does not
# apply inside a function called as `timed lint`).
lint() {
    local rc=0
    "$PYTHON" -m ruff check hpctrain tests benchmarks scripts || rc=$?
    "$PYTHON" -m ruff format --check hpctrain tests benchmarks scripts || rc=$?
    return "$rc"
}

if (($#)); then
    scripts/setup.sh
    scripts/local-cluster.sh up
    lint
    # This script started the local cluster, so the tests that take a node down (and bring it
    # back) may run; on a cluster shared with others, run pytest without it.
    export HPCTRAIN_DISRUPTIVE="${HPCTRAIN_DISRUPTIVE:-1}"
    exec "$PYTHON" -m pytest "$@"
fi

# ------------------------------------------------------------------ phase table --

RUN_START=$SECONDS
PHASE_LOG="$(mktemp -t hpctrain-phases.XXXXXX)"           # this script's phases and the legs'
BACKGROUND_PHASE_LOG="$(mktemp -t hpctrain-phases-bg.XXXXXX)" # the background build's phases
readonly RUN_START PHASE_LOG BACKGROUND_PHASE_LOG
WANTED_LEGS=()   # HPCTRAIN_TEST_LEGS
LEGS=()          # those that can be built here
UNAVAILABLE=()   # those that cannot
BUILD_PID=""     # the background build, while it runs
BUILD_LOG=""
RUNNING_PHASE="" # the phase under way, and since when: a stopped run still times it
RUNNING_SINCE=0
LEGS_STARTED=0

# record NAME SECONDS [NOTE]: one row of the table.
record() { printf '%s\t%s\t%s\n' "$1" "$2" "${3:-}" >>"$PHASE_LOG"; }

# timed NAME CMD...: CMD, its wall time recorded as phase NAME; CMD's exit status.
timed() {
    local name=$1 start=$SECONDS rc=0
    shift
    RUNNING_PHASE=$name
    RUNNING_SINCE=$start
    "$@" || rc=$?
    RUNNING_PHASE=""
    record "$name" "$((SECONDS - start))" "$( ((rc == 0)) || echo "FAILED (exit ${rc})")"
    return "$rc"
}

# row_of FILE NAME: "SECONDS<tab>NOTE" of the first row named NAME in FILE.
row_of() { awk -F'\t' -v name="$2" '$1 == name { print $2 "\t" $3; exit }' "$1"; }

# print_row NAME WHY_NOT_RUN: the phase's time and note, from the background build's log (first)
# or this script's, else WHY_NOT_RUN.
print_row() {
    local name=$1 why=$2 found time note
    if found="$(row_of "$BACKGROUND_PHASE_LOG" "$name")" && [[ -n "$found" ]]; then
        time="${found%%$'\t'*} s"
        note=${found#*$'\t'}
        [[ "$note" == cached* ]] || note="in the background, beside the 22.05 tests${note:+; ${note}}"
    elif found="$(row_of "$PHASE_LOG" "$name")" && [[ -n "$found" ]]; then
        time="${found%%$'\t'*} s"
        note=${found#*$'\t'}
    else
        time="-"
        note="not run: ${why}"
    fi
    printf '  %-22s %9s%s\n' "$name" "$time" "${note:+  ${note}}"
}

# why_leg_not_run RELEASE: why the leg's phases have no time.
why_leg_not_run() {
    local release
    for release in "${UNAVAILABLE[@]+"${UNAVAILABLE[@]}"}"; do
        if [[ "$release" == "$1" ]]; then
            echo "Slurm $1 cannot be built here (docs/compatibility.md)"
            return 0
        fi
    done
    if ((LEGS_STARTED)); then
        echo "the leg ended or was stopped before it (see its output above)"
    else
        echo "the run ended before it"
    fi
}

print_phases() {
    local total=$((SECONDS - RUN_START)) stopped="the run ended before it" release why
    printf '\n%s: phase wall times (%s, %s cores)\n' "$PROG" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$(nproc)"
    print_row setup "$stopped"
    print_row "cluster up" "$stopped"
    print_row lint "$stopped"
    print_row unit "$stopped"
    print_row integration "$stopped"
    if ((${#WANTED_LEGS[@]} == 0)); then
        for release in "25.11 build" "pyslurm build" "25.11 tests"; do
            print_row "$release" "HPCTRAIN_TEST_LEGS is empty"
        done
    fi
    for release in "${WANTED_LEGS[@]+"${WANTED_LEGS[@]}"}"; do
        why="$(why_leg_not_run "$release")"
        if [[ "$release" == 22.05 ]]; then
            print_row "22.05 build" "nothing to build (this host's Debian packages)"
        else
            print_row "${release} build" "$why"
        fi
        [[ "$release" != 25.11 ]] || print_row "pyslurm build" "$why"
        print_row "${release} tests" "$why"
    done
    if ((${#LEGS[@]})); then
        print_row "waiting for the build" "$stopped"
    fi
    printf '  %-22s %9s  %s\n' total "${total} s" "$((total / 60)) min $((total % 60)) s"
}

# on_exit: stop a background build that an early failure left running, then print the table.
on_exit() {
    local rc=$?
    if [[ -n "$RUNNING_PHASE" ]]; then
        record "$RUNNING_PHASE" "$((SECONDS - RUNNING_SINCE))" "stopped (exit ${rc})"
    fi
    if [[ -n "$BUILD_PID" ]]; then
        kill -- "-${BUILD_PID}" 2>/dev/null || kill "$BUILD_PID" 2>/dev/null || true
        record "waiting for the build" 0 "stopped: the run ended before the legs"
    fi
    print_phases
    rm -f "$PHASE_LOG" "$BACKGROUND_PHASE_LOG"
    exit "$rc"
}
trap on_exit EXIT
# A stopped run (CI's time limit, Ctrl-C) still prints its table, with the signal's exit status.
trap 'exit 143' TERM
trap 'exit 130' INT

# --------------------------------------------------------------- the matrix legs --

choose_legs() {
    local release
    IFS=, read -r -a WANTED_LEGS <<<"${HPCTRAIN_TEST_LEGS-25.11}"
    for release in "${WANTED_LEGS[@]+"${WANTED_LEGS[@]}"}"; do
        if scripts/build-slurm.sh --available "$release"; then
            LEGS+=("$release")
        else
            UNAVAILABLE+=("$release")
            log "SKIPPED the Slurm ${release} leg: it cannot be built here (see above; docs/compatibility.md)"
        fi
    done
}

# start_build: the legs' Slurm and venvs (pyslurm), built in the background at idle CPU and I/O
# priority (plain nice 19 where SCHED_IDLE is refused), so that the tests beside it keep the CPU
# whenever they want it. Its output goes to a file, shown when the leg waits for it.
start_build() {
    ((${#LEGS[@]})) || return 0
    local priority=(nice -n 19)
    if chrt --idle 0 true 2>/dev/null; then priority=(chrt --idle 0); fi
    if ionice -c 3 true 2>/dev/null; then priority+=(ionice -c 3); fi
    BUILD_LOG="$(mktemp -t hpctrain-legs-build.XXXXXX)"
    log "building Slurm for the legs (${LEGS[*]}) in the background: ${BUILD_LOG}"
    # Its own process group (setsid), so that an early exit can stop all of it.
    HPCTRAIN_PHASE_LOG="$BACKGROUND_PHASE_LOG" setsid "${priority[@]}" \
        scripts/slurm-matrix.sh --prepare --slurm "$(IFS=,; echo "${LEGS[*]}")" >"$BUILD_LOG" 2>&1 &
    BUILD_PID=$!
}

# wait_for_build: the background build's end; its output. A failed build is tried again (and
# reported) by the leg itself.
wait_for_build() {
    [[ -n "$BUILD_PID" ]] || return 0
    local start=$SECONDS rc=0
    wait "$BUILD_PID" || rc=$?
    BUILD_PID=""
    record "waiting for the build" "$((SECONDS - start))" \
        "$( ((rc == 0)) && echo "the leg waited this long" || echo "the build FAILED (exit ${rc}); the leg tries again")"
    log "the background build's output (exit ${rc}):"
    cat "$BUILD_LOG" >&2
    rm -f "$BUILD_LOG"
}

# run_legs: the matrix legs on their own clusters, which are stopped afterwards to give their CPU
# back (22.05 is the suite's own cluster).
run_legs() {
    local rc=0 release
    scripts/slurm-matrix.sh --slurm "$(IFS=,; echo "${LEGS[*]}")" || rc=$?
    for release in "${LEGS[@]}"; do
        [[ "$release" == 22.05 ]] || scripts/local-cluster.sh --slurm "$release" down || true
    done
    return "$rc"
}

# -------------------------------------------------------------------- the run --

timed setup scripts/setup.sh
timed "cluster up" scripts/local-cluster.sh up
choose_legs
start_build
timed lint lint
# This script started the local cluster, so the tests that take a node down (and bring it back)
# may run; on a cluster shared with others, run pytest without it.
export HPCTRAIN_DISRUPTIVE="${HPCTRAIN_DISRUPTIVE:-1}"
suite=0
# The unit tests are independent processes' worth of CPU: two workers use both cores of the CI
# machine (the 25.11 build beside them runs at idle priority and catches up during integration).
timed unit "$PYTHON" -m pytest -n 2 --durations=10 tests/unit || suite=$?
timed integration "$PYTHON" -m pytest --durations=25 tests --ignore=tests/unit || suite=$?
matrix=0
if ((${#LEGS[@]})); then
    wait_for_build
    LEGS_STARTED=1
    HPCTRAIN_PHASE_LOG="$PHASE_LOG" run_legs || matrix=$?
fi
((suite == 0)) || exit "$suite"
exit "$matrix"
