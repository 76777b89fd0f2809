"""fork_ranks: the ranks it forks get srun's variables, and the node's task ends as an srun step does."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from hpctrain.runtime.fork_ranks import rank_variables

REPO = Path(__file__).resolve().parents[3]

RANK = """
import json, os, signal, sys, time
from pathlib import Path
out = Path(os.environ["OUT"])
got = []
signal.signal(signal.SIGUSR1, lambda signum, frame: got.append(signum))
keys = ("SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS", "SLURM_STEP_NUM_TASKS", "SLURM_GTIDS")
record = {k: os.environ.get(k) for k in keys}
record |= {"pid": os.getpid(), "ppid": os.getppid(), "argv": sys.argv[1:]}
(out / f"rank-{os.environ['SLURM_PROCID']}.json").write_text(json.dumps(record))
action = os.environ.get("ACTION_" + os.environ["SLURM_LOCALID"], "")
if action.startswith("exit"):
    sys.exit(int(action[4:]))
deadline = time.monotonic() + (60 if action == "wait" else 0)
while time.monotonic() < deadline and not got:
    time.sleep(0.02)
if got:
    (out / f"signal-{os.environ['SLURM_PROCID']}").write_text(str(got[0]))
"""


@given(nodes=st.integers(1, 16), per_node=st.integers(1, 8))
def test_the_ranks_of_every_node_are_srun_s_block_distribution(nodes: int, per_node: int) -> None:
    seen = []
    for node in range(nodes):
        env = {"SLURM_NODEID": str(node), "SLURM_STEP_NUM_NODES": str(nodes)}
        for local in range(per_node):
            variables = rank_variables(env, per_node, local)
            rank = int(variables["SLURM_PROCID"])
            assert rank // per_node == node and rank % per_node == local
            assert variables["SLURM_LOCALID"] == str(local)
            assert variables["SLURM_NTASKS"] == variables["SLURM_STEP_NUM_TASKS"] == str(nodes * per_node)
            assert str(rank) in variables["SLURM_GTIDS"].split(",")
            seen.append(rank)
    assert sorted(seen) == list(range(nodes * per_node))


def launch(tmp_path: Path, per_node: int, env: dict[str, str], rank: str = RANK) -> subprocess.Popen[bytes]:
    (tmp_path / "rank_module.py").write_text(rank)
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    child_env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "HPCTRAIN_"))} | {
        "PYTHONPATH": f"{tmp_path}{os.pathsep}{REPO}",
        "OUT": str(out),
        "SLURM_NODEID": "1",
        "SLURM_STEP_NUM_NODES": "2",
        **env,
    }
    return subprocess.Popen(
        [sys.executable, "-m", "hpctrain.runtime.fork_ranks", str(per_node), "rank_module", "--flag", "x"],
        env=child_env,
    )


def records(tmp_path: Path, count: int, timeout: float = 20) -> list[dict[str, object]]:
    deadline = time.monotonic() + timeout
    while len(list((tmp_path / "out").glob("rank-*.json"))) < count and time.monotonic() < deadline:
        time.sleep(0.05)
    return [json.loads(p.read_text()) for p in sorted((tmp_path / "out").glob("rank-*.json"))]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is gone for our purpose
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_each_forked_rank_runs_the_module_with_its_own_slurm_variables(tmp_path: Path) -> None:
    proc = launch(tmp_path, 3, {})
    assert proc.wait(timeout=30) == 0
    ranks = records(tmp_path, 3)
    assert [r["SLURM_PROCID"] for r in ranks] == ["3", "4", "5"]  # node 1 of 2, 3 per node
    assert [r["SLURM_LOCALID"] for r in ranks] == ["0", "1", "2"]
    assert {r["SLURM_NTASKS"] for r in ranks} == {"6"} and {r["SLURM_GTIDS"] for r in ranks} == {"3,4,5"}
    assert {r["ppid"] for r in ranks} == {proc.pid} and len({r["pid"] for r in ranks}) == 3
    assert {tuple(r["argv"]) for r in ranks} == {("--flag", "x")}  # type: ignore[arg-type]


def test_the_first_rank_that_fails_ends_the_others_and_gives_the_task_its_status(tmp_path: Path) -> None:
    proc = launch(tmp_path, 3, {"ACTION_0": "wait", "ACTION_1": "exit7", "ACTION_2": "wait"})
    assert proc.wait(timeout=30) == 7
    ranks = records(tmp_path, 3)
    assert not any(alive(int(r["pid"])) for r in ranks)  # type: ignore[call-overload]


def test_a_rank_killed_by_a_signal_ends_the_task_as_the_shell_reports_it(tmp_path: Path) -> None:
    proc = launch(tmp_path, 2, {"ACTION_0": "wait", "ACTION_1": "wait"})
    ranks = records(tmp_path, 2)
    os.kill(int(ranks[1]["pid"]), signal.SIGKILL)  # type: ignore[call-overload]
    assert proc.wait(timeout=30) == 128 + signal.SIGKILL
    assert not alive(int(ranks[0]["pid"]))  # type: ignore[call-overload]


def test_a_signal_to_the_task_reaches_every_rank(tmp_path: Path) -> None:
    proc = launch(tmp_path, 2, {"ACTION_0": "wait", "ACTION_1": "wait"})
    records(tmp_path, 2)
    proc.send_signal(signal.SIGUSR1)
    assert proc.wait(timeout=30) == 0
    assert sorted(p.name for p in (tmp_path / "out").glob("signal-*")) == ["signal-2", "signal-3"]


def test_no_rank_outlives_a_task_killed_outright(tmp_path: Path) -> None:
    proc = launch(tmp_path, 2, {"ACTION_0": "wait", "ACTION_1": "wait"})
    ranks = records(tmp_path, 2)
    proc.kill()
    proc.wait(timeout=10)
    deadline = time.monotonic() + 10
    while any(alive(int(r["pid"])) for r in ranks) and time.monotonic() < deadline:  # type: ignore[call-overload]
        time.sleep(0.05)
    assert not any(alive(int(r["pid"])) for r in ranks)  # type: ignore[call-overload]


def test_a_wrong_command_line_is_a_usage_error(tmp_path: Path) -> None:
    for argv in (["x"], ["0", "m"], ["two", "m"]):
        proc = subprocess.run(
            [sys.executable, "-m", "hpctrain.runtime.fork_ranks", *argv], capture_output=True, text=True
        )
        assert proc.returncode == 2 and proc.stderr.startswith("usage:"), argv


JOB_RANK = """
import json, os, sys
from pathlib import Path
from hpctrain.runtime import startup_times
seen = {"torch": "torch" in sys.modules, "marks": sorted(startup_times._marks),
        "started_at": os.environ.get(startup_times.STARTED_AT)}
print("rank", os.environ["SLURM_PROCID"], "says hello")
Path(os.environ["OUT"], "rank-" + os.environ["SLURM_PROCID"] + ".json").write_text(json.dumps(seen))
"""


def test_a_job_s_node_task_imports_torch_once_for_its_ranks_and_clears_its_node_s_slots(
    tmp_path: Path,
) -> None:
    from hpctrain import spec
    from hpctrain.rundir import RunDir, slots

    run = RunDir(tmp_path / "run")
    run.root.mkdir()
    jobs, sites = REPO / "jobs", REPO / "site-configs"
    resolved = spec.resolve(
        spec.load_job(jobs / "digits-ddp.yaml", []), spec.load_site(sites / "local.yaml"), "digits", "local"
    )
    run.spec.write_bytes(spec.dumps(resolved))
    shm = tmp_path / "shm"
    shm.mkdir()
    env = {"HPCTRAIN_RUN_DIR": str(run.root), "HPCTRAIN_HEARTBEAT_DIR": str(shm), "SLURM_JOB_ID": "77"}
    env |= {"HPCTRAIN_ATTEMPT": "2", "SLURMD_NODENAME": "nodeX"}
    slot = slots.slot_path(run.root, "77", 2, "nodeX")
    slot.write_bytes(b"x")
    slots.stack_file(slot, 3).write_text("stacks")
    before = time.time()
    proc = launch(tmp_path, 2, env, JOB_RANK)
    assert proc.wait(timeout=120) == 0
    ranks = records(tmp_path, 2)
    assert all(r["torch"] for r in ranks)  # imported by the node's task, before the fork
    assert all({"interpreter", "torch", "runtime_imports"} <= set(r["marks"]) for r in ranks)  # type: ignore[arg-type]
    assert all(before - 5 < float(r["started_at"]) <= before + 60 for r in ranks)  # type: ignore[arg-type]
    assert "rank 3 says hello" in run.rank_log(3).read_text()  # each rank's own log
    assert not list(shm.iterdir())  # the node's slot and stack files are gone with its ranks
