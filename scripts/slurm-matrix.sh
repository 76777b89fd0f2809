#!/usr/bin/env bash
# slurm-matrix.sh - run hpctrain's Slurm-facing tests on each Slurm release the local cluster offers.
#
#   scripts/slurm-matrix.sh [--slurm 22.05,24.11,25.11,26.05] [PYTEST ARGS...]
#   scripts/slurm-matrix.sh --prepare --slurm 25.11     only build each release and its venv (no
#                                                       cluster, no tests): what a leg later reuses
#
# For each release (default: all of them): build it when it is not Debian's (scripts/build-slurm.sh,
# cached under /opt), bring its cluster up beside the others (scripts/local-cluster.sh --slurm V up),
# make its venv (25.11: with pyslurm built against it), then run the backend contract tests and the
# integration set below with that release's commands first on PATH. Prints each leg's wall time and
# result; exits non-zero when a leg fails.
#
# The node-loss tests kill a slurmd: they run on the clusters this script owns (not 22.05, which the
# default test command shares) unless HPCTRAIN_DISRUPTIVE=1.
#
# HPCTRAIN_PHASE_LOG, when set, names a file that gets one "NAME<tab>SECONDS<tab>NOTE" line per
# phase ("25.11 build", "pyslurm build", "25.11 tests"): scripts/test.sh prints them as its table.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO="$(pwd)"
readonly REPO
PROG="$(basename "$0")"
readonly PROG
readonly PREFIX_ROOT="${HPCTRAIN_SLURM_PREFIX_ROOT:-/opt/hpctrain-slurm}"
readonly PYSLURM_VERSION="25.11.2"

readonly CONTRACT=(tests/integration/test_backend_contract.py)
readonly INTEGRATION_SET=(
    tests/integration/test_cli_slurm.py::test_submit_status_logs_list
    tests/integration/test_cli_slurm.py::test_submit_wait_returns_job_outcome
    tests/integration/test_cli_slurm.py::test_cancel_running_job
    tests/integration/test_array_jobs.py
    tests/integration/test_sweep_cluster.py::test_twelve_trial_grid_completes_four_at_a_time
    tests/integration/test_ps.py::test_sync_in_graph_hetjob_servers_and_workers_in_separate_components
    tests/integration/test_sweep_cluster.py::test_preempted_trial_is_requeued_alone_and_resumes
    tests/integration/test_restarts.py::test_killed_rank_is_relaunched_in_place_and_completes
    tests/integration/test_doctor.py::test_init_site_agrees_with_local_yaml_and_runs_digits
    tests/integration/test_doctor.py::test_doctor_passes_on_the_shipped_profile
)
readonly LOST_NODE=(
    tests/integration/test_restarts.py::test_lost_batch_node_resumes_on_the_other_node_bitwise
    tests/integration/test_restarts.py::test_lost_batch_node_with_expedited_requeue_runs_again_without_a_poll
)

log() { printf '%s: %s\n' "$PROG" "$*" >&2; }
# phase NAME SECONDS [NOTE]: one line of the phase log, when there is one.
phase() {
    [[ -z "${HPCTRAIN_PHASE_LOG:-}" ]] || printf '%s\t%s\t%s\n' "$1" "$2" "${3:-}" >>"$HPCTRAIN_PHASE_LOG"
}
die() {
    printf '%s: ERROR: %s\n' "$PROG" "$*" >&2
    exit 1
}

# venv_for RELEASE: the Python of the release's venv (made once), as the release's environment
# sees it: this host's Python and packages (torch, hpctrain's dependencies; in a root filesystem
# through a bind mount), plus what the release needs of its own (25.11: pyslurm built against it).
venv_for() {
    local release=$1 host_python venv
    host_python="$(python3 -c 'import sys; print(sys.executable)')"
    case "$release" in
        22.05)
            printf '%s\n' "$host_python"
            return 0
            ;;
        25.11) venv="${PREFIX_ROOT}/${release}/venv" ;;
        *) venv="/opt/hpctrain-venv" ;; # inside the release's root filesystem
    esac
    if ! scripts/local-cluster.sh --slurm "$release" run test -x "${venv}/bin/python"; then
        scripts/local-cluster.sh --slurm "$release" run "$host_python" -m venv --system-site-packages "$venv" >&2
    fi
    if [[ "$release" == 25.11 ]]; then
        if "${venv}/bin/python" -c 'import pyslurm' 2>/dev/null; then
            phase "pyslurm build" 0 "cached in ${venv}"
        else
            local prefix="${PREFIX_ROOT}/${release}" start=$SECONDS
            log "building pyslurm ${PYSLURM_VERSION} against ${prefix}"
            SLURM_INCLUDE_DIR="${prefix}/include" SLURM_LIB_DIR="${prefix}/lib" PYSLURM_BUILD_JOBS=2 \
                nice -n 10 "${venv}/bin/pip" install --no-cache-dir "pyslurm==${PYSLURM_VERSION}" >&2 || {
                phase "pyslurm build" "$((SECONDS - start))" "FAILED"
                die "pip install pyslurm==${PYSLURM_VERSION} failed"
            }
            phase "pyslurm build" "$((SECONDS - start))"
        fi
    fi
    printf '%s\n' "${venv}/bin/python"
}

# leg RELEASE PYTEST_ARGS...: one release's tests (their output on stderr); prints
# "RELEASE result seconds" on stdout.
leg() {
    local release=$1 python start rc=0 tests tests_start
    shift
    start=$SECONDS
    build "$release" || return 1
    tests_start=$SECONDS
    scripts/local-cluster.sh --slurm "$release" up >&2 || return 1
    python="$(venv_for "$release")" || return 1
    tests=("${CONTRACT[@]}" "${INTEGRATION_SET[@]}")
    if [[ "$release" != 22.05 || "${HPCTRAIN_DISRUPTIVE:-}" == 1 ]]; then
        tests+=("${LOST_NODE[@]}")
    fi
    log "Slurm ${release}: ${#tests[@]} test targets with ${python}"
    # The other releases' clusters belong to this script: taking their nodes down harms no one.
    local disruptive="${HPCTRAIN_DISRUPTIVE:-0}"
    [[ "$release" == 22.05 ]] || disruptive=1
    (
        scripts/local-cluster.sh --slurm "$release" run env PYTHONPATH="$REPO" HPCTRAIN_DISRUPTIVE="$disruptive" \
            "$python" -m pytest -p no:cacheprovider -q -rs "${tests[@]}" "$@" >&2
    ) || rc=$?
    phase "${release} tests" "$((SECONDS - tests_start))" \
        "$( ((rc == 0)) && echo "passed; its cluster up, venv and pytest" || echo "FAILED (pytest exit ${rc})")"
    printf '%s %s %ss\n' "$release" "$( ((rc == 0)) && echo passed || echo "FAILED (pytest exit ${rc})")" \
        "$((SECONDS - start))"
    return "$rc"
}

# build RELEASE: the release's Slurm (scripts/build-slurm.sh, cached under PREFIX_ROOT), timed.
build() {
    local release=$1 start=$SECONDS
    [[ "$release" != 22.05 ]] || return 0 # this host's Debian packages: nothing to build
    if [[ -f "${PREFIX_ROOT}/${release}/.built" ]]; then
        phase "${release} build" 0 "cached in ${PREFIX_ROOT}/${release}"
        return 0
    fi
    scripts/build-slurm.sh "$release" >&2 || {
        phase "${release} build" "$((SECONDS - start))" "FAILED"
        return 1
    }
    phase "${release} build" "$((SECONDS - start))"
}

# prepare RELEASE: what a leg needs before its cluster comes up (its Slurm, its venv), nothing more.
prepare() {
    local release=$1
    build "$release" || return 1
    venv_for "$release" >/dev/null
}

main() {
    local releases="22.05,24.11,25.11,26.05" pytest_args=() only_prepare=0
    while (($#)); do
        case "$1" in
            --prepare)
                only_prepare=1
                shift
                ;;
            --slurm)
                (($# >= 2)) || die "--slurm needs a list such as 25.11 or 22.05,25.11"
                releases=$2
                shift 2
                ;;
            *)
                pytest_args+=("$1")
                shift
                ;;
        esac
    done
    [[ $EUID -eq 0 ]] || die "must run as root (it starts Slurm daemons)"
    local release summary=() failed=0 line
    IFS=, read -r -a wanted <<<"$releases"
    if ((only_prepare)); then
        for release in "${wanted[@]}"; do
            prepare "$release" || failed=1
        done
        return "$failed"
    fi
    for release in "${wanted[@]}"; do
        line="$(leg "$release" "${pytest_args[@]+"${pytest_args[@]}"}")" || failed=1
        summary+=("${line:-${release} FAILED before its tests (see above)}")
    done
    printf '\nSlurm matrix (%s):\n' "$(date -u +%Y-%m-%d)"
    printf '  %s\n' "${summary[@]}"
    return "$failed"
}

# (one line: bash reads a script as it runs, so an edit mid-run must not add commands after main)
main "$@"; exit $?
