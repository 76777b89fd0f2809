"""The parts of the pyslurm backend that need no pyslurm: version matching and #SBATCH translation."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from hpctrain.backends import pyslurm_backend as pb
from hpctrain.backends.base import BackendError, JobState

SCRIPT = """#!/bin/bash
#SBATCH --job-name=demo
#SBATCH --output=/runs/r1/logs/batch.log
#SBATCH --time=1-00:30:00
#SBATCH --signal=B:USR1@90
#SBATCH --requeue
#SBATCH -N 2 --ntasks-per-node=4   # two options on one line, then a comment
#SBATCH --partition gpu
#SBATCH --gres=gpu:h100:8
#SBATCH --mem=16G
#SBATCH --exclusive
echo start
#SBATCH --this-is-not-read-anymore
"""


def test_versions_compare_by_slurm_release() -> None:
    assert pb.major_minor("slurm-wlm 22.05.8") == (22, 5)
    assert pb.major_minor("18.8.4.1") == (18, 8)  # pyslurm's spelling of 18.08
    assert pb.slurm_release((22, 5)) == "22.05"


@pytest.mark.parametrize(
    ("version", "api", "cluster", "expected"),
    [
        ("25.11.2", True, (25, 11), "matches"),
        ("25.11.2", True, (22, 5), "built for Slurm 25.11"),
        ("18.8.4", False, (18, 8), "old pre-23.2 API"),
    ],
)
def test_available_needs_the_new_api_and_the_same_release(
    monkeypatch: pytest.MonkeyPatch, version: str, api: bool, cluster: tuple[int, int], expected: str
) -> None:
    module = SimpleNamespace(__version__=version, **({"JobSubmitDescription": object} if api else {}))
    monkeypatch.setattr(
        pb, "cluster_slurm_version", lambda: (cluster, f"slurm {pb.slurm_release(cluster)}.1")
    )
    ok, reason = pb.available(module)  # type: ignore[arg-type]
    assert ok is (expected == "matches")
    assert expected in reason


def test_directives_translate_as_sbatch_reads_them() -> None:
    description = SimpleNamespace()
    pb.apply_directives(description, SCRIPT)
    assert vars(description) == {
        "name": "demo",
        "standard_output": "/runs/r1/logs/batch.log",
        "time_limit": 24 * 60 + 30,
        "signal": {"signal": 10, "batch_only": True, "time": 90},
        "is_requeueable": True,
        "nodes": "2",
        "ntasks_per_node": 4,
        "partitions": "gpu",
        "gres_per_node": "gpu:h100:8",
        "memory_per_node": 16 * 1024,
        "resource_sharing": "no",
    }


@pytest.mark.parametrize(
    ("line", "named"),
    [
        ("#SBATCH hetjob", "hetjob"),
        ("#SBATCH --export=ALL,FOO=1", "--export=ALL,FOO=1"),
        ("#SBATCH --hint=nomultithread", "--hint=nomultithread"),
    ],
)
def test_untranslatable_directives_are_refused_not_dropped(line: str, named: str) -> None:
    text = f"#!/bin/bash\n#SBATCH --job-name=x\n{line}\ntrue\n"
    assert any(named in problem for problem in pb.unsupported_directives(text))
    with pytest.raises(BackendError, match="command-line backend"):
        pb.apply_directives(SimpleNamespace(), text)


def test_bad_values_name_the_directive() -> None:
    with pytest.raises(BackendError, match="--signal"):
        pb.apply_directives(SimpleNamespace(), "#!/bin/bash\n#SBATCH --signal=B:NOPE@10\n")


def job(job_id: int, state: str, **extra: object) -> SimpleNamespace:
    fields = {
        "id": job_id, "state": state, "state_reason": "None", "exit_code": 0, "exit_code_signal": 0,
        "allocated_nodes": "node1", "run_time": 75, "array_id": None, "heterogeneous_id": None,
    }  # fmt: skip
    return SimpleNamespace(**{**fields, **extra})


class FakeJobs(dict):  # type: ignore[type-arg]
    """Stands in for pyslurm.Jobs, whose values() yields every loaded job."""


def fake_pyslurm(jobs: list[SimpleNamespace]) -> SimpleNamespace:
    return SimpleNamespace(
        Jobs=SimpleNamespace(load=lambda: FakeJobs({j.id: j for j in jobs})),
        db=SimpleNamespace(JobFilter=dict, Jobs=SimpleNamespace(load=lambda f: [])),
        PyslurmError=RuntimeError,
    )


def test_poll_is_one_load_and_merges_components_under_the_submitted_id() -> None:
    loaded = [
        job(10, "COMPLETED"),
        job(20, "RUNNING", heterogeneous_id=20),
        job(21, "FAILED", heterogeneous_id=20, exit_code=3),
        job(31, "PENDING", array_id=30),
        job(99, "RUNNING"),  # somebody else's job
    ]
    backend = pb.PyslurmBackend(fake_pyslurm(loaded))  # type: ignore[arg-type]
    answer = backend.poll(["10", "20", "30", "77"])
    assert {k: v.state for k, v in answer.items()} == {
        "10": JobState.COMPLETED, "20": JobState.FAILED, "30": JobState.PENDING, "77": JobState.UNKNOWN,
    }  # fmt: skip
    assert answer["20"].exit_code == "3:0"
    assert answer["10"].elapsed == "1:15"
    assert backend.rpc_calls == {"load_jobs": 1, "db_load_jobs": 1}


def test_elapsed_reads_like_squeue() -> None:
    assert [pb.elapsed_text(s) for s in (None, 59, 3600, 90061)] == ["0:00", "0:59", "1:00:00", "1-01:01:01"]
