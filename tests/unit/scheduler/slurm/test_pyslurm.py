"""The parts of the pyslurm backend that need no pyslurm: version matching and batch-option translation."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from hpctrain import spec
from hpctrain.scheduler.base import BackendError, JobState
from hpctrain.scheduler.render import Directive, batch_options
from hpctrain.scheduler.slurm import pyslurm as pb
from tests.conftest import JOBS, SITES

D = Directive
OPTIONS = [
    [D("job-name", "demo"), D("output", "/runs/r1/logs/batch.log"), D("time", "1-00:30:00"),
     D("signal", "B:USR1@90"), D("requeue"), D("nodes", "2"), D("ntasks-per-node", "4"),
     D("partition", "gpu"), D("gres", "gpu:h100:8"), D("mem", "16G"), D("exclusive"),
     D("exclude", "n3,n4"), D("comment", "two words")],
]  # fmt: skip


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


def test_options_translate_to_description_attributes() -> None:
    description = SimpleNamespace()
    pb.apply_options(description, OPTIONS)
    assert vars(description) == {
        "name": "demo",
        "standard_output": "/runs/r1/logs/batch.log",
        "time_limit": 24 * 60 + 30,
        "signal": {"signal": 10, "batch_only": True, "time": 90},
        "is_requeueable": True,
        "nodes": "2",
        "ntasks_per_node": 4,
        # As sbatch counts them; pyslurm's own default, 1 task, is refused for 2 nodes (25.11).
        "ntasks": 8,
        "partitions": "gpu",
        "gres_per_node": "gpu:h100:8",
        "memory_per_node": 16 * 1024,
        "resource_sharing": "no",
        "excluded_nodes": "n3,n4",
        "comment": "two words",
    }


def test_every_option_render_produces_translates(tmp_path: Path) -> None:
    job = spec.load_job(
        JOBS / "digits-ddp.yaml",
        ["resources.account=a", "resources.qos=q", "array=0-3", "dependency=afterok:1", "begin=now+1hour",
         "comment=hi there", "mail_type=[END,FAIL]", "mail_user=me@example.org", "resources.exclusive=true",
         "resources.exclude=[node2]", "resources.nodelist=[node1]", "resources.nodes=1"],
    )  # fmt: skip
    batch = batch_options(spec.resolve(job, spec.load_site(SITES / "local.yaml")), tmp_path)
    assert pb.unsupported_options(batch) == []
    description = SimpleNamespace()
    pb.apply_options(description, batch)
    assert description.mail_types == "END,FAIL" and description.required_nodes == "node1"
    assert description.time_limit == 15


@pytest.mark.parametrize(
    ("batch", "named"),
    [
        ([[D("job-name", "x"), D("export", "ALL,FOO=1")]], "--export"),
        ([[D("job-name", "x"), D("hint", "nomultithread")]], "--hint"),
    ],
)
def test_untranslatable_options_are_refused_not_dropped(batch: list[list[Directive]], named: str) -> None:
    assert any(named in problem for problem in pb.unsupported_options(batch))
    with pytest.raises(BackendError, match="command-line backend"):
        pb.apply_options(SimpleNamespace(), batch)


@pytest.mark.parametrize(
    ("batch", "refusal"),
    [
        ([[D("job-name", "x")], [D("nodes", "1")]], "heterogeneous"),
        # pyslurm 25.11 has no expedite flag, and read as a boolean "expedite" turned requeue off.
        ([[D("job-name", "x"), D("requeue", "expedite")]], "expedited requeue"),
    ],
)
def test_what_pyslurm_cannot_express_goes_to_sbatch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, batch: list[list[Directive]], refusal: str
) -> None:
    from hpctrain.scheduler.slurm.cli import SlurmCliBackend

    sent = []
    monkeypatch.setattr(SlurmCliBackend, "submit", lambda self, *args: sent.append(args) or "42")
    backend = pb.PyslurmBackend(SimpleNamespace())  # type: ignore[arg-type]
    assert backend.submit(tmp_path / "job.sh", tmp_path, batch) == "42"
    assert sent == [(tmp_path / "job.sh", tmp_path, batch)]
    with pytest.raises(BackendError, match=refusal):
        pb.apply_options(SimpleNamespace(), batch)


def test_plain_requeue_stays_on_pyslurm() -> None:
    description = SimpleNamespace()
    pb.apply_options(description, [[D("requeue")]])
    assert description.is_requeueable is True
    assert pb.sbatch_only([[D("requeue"), D("job-name", "x")]]) is None


def test_bad_values_name_the_option() -> None:
    with pytest.raises(BackendError, match="--signal"):
        pb.apply_options(SimpleNamespace(), [[D("signal", "B:NOPE@10")]])


def test_submit_without_options_is_refused(tmp_path: Path) -> None:
    backend = pb.PyslurmBackend(SimpleNamespace())  # type: ignore[arg-type]
    with pytest.raises(BackendError, match="command-line backend"):
        backend.submit(tmp_path / "job.sh", tmp_path)


@pytest.fixture(autouse=True)
def only_pyslurm(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fake module answers every query: this machine's squeue must not answer the large ones."""
    monkeypatch.setattr(pb.PyslurmBackend, "many_by_squeue", False)


def job(job_id: int, state: str, **extra: object) -> SimpleNamespace:
    fields = {
        "id": job_id, "state": state, "state_reason": "None", "exit_code": 0, "exit_code_signal": 0,
        "allocated_nodes": "node1", "run_time": 75, "array_id": None, "heterogeneous_id": None,
    }  # fmt: skip
    return SimpleNamespace(**{**fields, **extra})


class FakeJobs(dict):  # type: ignore[type-arg]
    """Stands in for pyslurm.Jobs, whose values() yields every loaded job."""


class FakeRPCError(Exception):
    def __init__(self, errno: int) -> None:
        super().__init__(f"slurm error {errno}")
        self.errno = errno


def fake_pyslurm(jobs: list[SimpleNamespace], loads: list[str] | None = None) -> SimpleNamespace:
    """A pyslurm whose controller holds `jobs`; `loads` records each load: "all" or the id asked for."""
    loads = [] if loads is None else loads

    def load_all() -> FakeJobs:
        loads.append("all")
        return FakeJobs({j.id: j for j in jobs})

    def load_one(job_id: int) -> SimpleNamespace:
        # As slurm_load_job: a hetjob's or array's id answers all of its records; pyslurm keeps the first.
        loads.append(str(job_id))
        records = [j for j in jobs if job_id in (j.id, j.array_id, j.heterogeneous_id)]
        if not records:
            raise FakeRPCError(pb.ESLURM_INVALID_JOB_ID)
        return records[0]

    return SimpleNamespace(
        Jobs=SimpleNamespace(load=load_all),
        Job=SimpleNamespace(load=load_one),
        db=SimpleNamespace(JobFilter=dict, Jobs=SimpleNamespace(load=lambda f: [])),
        PyslurmError=RuntimeError,
        RPCError=FakeRPCError,
    )


def test_poll_merges_components_under_the_submitted_id() -> None:
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
    # The hetjob and the array showed one record of several by id: one load of the queue got the rest.
    assert backend.rpc_calls == {"load_job": 4, "load_jobs": 1, "db_load_jobs": 1}


def test_a_poll_of_a_few_jobs_asks_only_for_them_not_the_whole_queue() -> None:
    queue = [job(n, "PENDING", state_reason="JobHeldUser") for n in range(1000, 3000)]
    mine = [job(5, "RUNNING"), job(6, "COMPLETED")]
    loads: list[str] = []
    backend = pb.PyslurmBackend(fake_pyslurm(queue + mine, loads))  # type: ignore[arg-type]
    answer = backend.poll(["5", "6", "7"])
    assert {k: v.state for k, v in answer.items()} == {
        "5": JobState.RUNNING, "6": JobState.COMPLETED, "7": JobState.UNKNOWN,
    }  # fmt: skip
    assert "all" not in loads
    assert sorted(loads) == ["5", "6", "7"]


def test_many_ids_or_known_arrays_take_one_load_of_the_queue() -> None:
    loaded = [job(n, "COMPLETED") for n in range(1, 6)]
    loads: list[str] = []
    backend = pb.PyslurmBackend(fake_pyslurm(loaded, loads))  # type: ignore[arg-type]
    backend.per_id_limit = 3
    assert {i.state for i in backend.poll([str(n) for n in range(1, 6)]).values()} == {JobState.COMPLETED}
    assert loads == ["all"]
    loads.clear()
    backend.poll(["1", "2"], {"2": 4})
    assert sorted(loads) == ["1", "all"]


def test_an_array_whose_steps_pyslurm_cannot_file_takes_the_whole_queue() -> None:
    """pyslurm 25.11's Job.load raises KeyError for a running array whose steps are another element's."""
    loaded = [job(51, "RUNNING", array_id=50, array_task_id=1), job(50, "PENDING", array_id=50)]
    module = fake_pyslurm(loaded)

    def steps_of_another_element(job_id: int) -> None:
        raise KeyError(job_id)

    module.Job.load = steps_of_another_element
    backend = pb.PyslurmBackend(module)  # type: ignore[arg-type]
    assert backend.poll(["50"])["50"].state is JobState.RUNNING
    assert backend.rpc_calls == {"load_job": 1, "load_jobs": 1}


def test_a_failed_load_by_id_is_an_error_not_an_unknown_job() -> None:
    module = fake_pyslurm([])
    module.PyslurmError = FakeRPCError

    def refused(job_id: int) -> None:
        raise FakeRPCError(1007)  # "Protocol authentication error"

    module.Job.load = refused
    with pytest.raises(BackendError, match="load_job failed"):
        pb.PyslurmBackend(module).poll(["5"])  # type: ignore[arg-type]


def test_elapsed_reads_like_squeue() -> None:
    assert [pb.elapsed_text(s) for s in (None, 59, 3600, 90061)] == ["0:00", "0:59", "1:00:00", "1-01:01:01"]


def test_array_element_zero_keeps_its_index() -> None:
    """pyslurm 25.11 reads array_task_id 0 as None (zero is its "no value"), like the pending record's."""
    loaded = [
        job(41, "COMPLETED", array_id=40, array_task_id=None, array_tasks_waiting=None),  # element 0
        job(42, "COMPLETED", array_id=40, array_task_id=1),
        job(40, "PENDING", array_id=40, array_task_id=None, array_tasks_waiting="2-3"),
    ]
    backend = pb.PyslurmBackend(fake_pyslurm(loaded))  # type: ignore[arg-type]
    answer = backend.poll(["40"], {"40": 4})["40"]
    assert answer.elements == {
        "0": JobState.COMPLETED, "1": JobState.COMPLETED, "[2-3]": JobState.PENDING,
    }  # fmt: skip
    assert answer.state is JobState.PENDING


@pytest.mark.parametrize(
    ("options", "ntasks"),
    [([D("nodes", "2")], 2), ([D("nodes", "2-4"), D("ntasks-per-node", "3")], 6), ([D("ntasks", "5")], 5)],
)
def test_task_count_is_sbatchs_not_pyslurms_default_of_one(options: list[Directive], ntasks: int) -> None:
    description = SimpleNamespace()
    pb.apply_options(description, [options])
    assert description.ntasks == ntasks


def test_a_poll_of_many_jobs_asks_squeue_for_the_users_jobs_not_pyslurm_for_the_whole_queue(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pyslurm can load only every job slurmctld holds (10,000 held: 2.6x squeue's time); squeue --me
    is one RPC that slurmctld filters to the user's jobs."""
    monkeypatch.setattr(pb.PyslurmBackend, "many_by_squeue", True)
    bindir, calls = tmp_path / "bin", tmp_path / "calls"
    bindir.mkdir()
    rows = "".join(f"{n}|COMPLETED|None|node1|0:01|debug|1|||(null)\\n" for n in range(1, 61))
    (bindir / "squeue").write_text(f'#!/bin/sh\necho "$@" >> {calls}\nprintf "{rows}"\n')
    (bindir / "squeue").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    loads: list[str] = []
    backend = pb.PyslurmBackend(fake_pyslurm([], loads))  # type: ignore[arg-type]
    wanted = [str(n) for n in range(1, 61)]
    found = backend.poll(wanted)
    assert {found[n].state for n in wanted} == {JobState.COMPLETED}
    assert loads == [] and calls.read_text().split()[0] == "--me"
    assert dict(backend.rpc_calls) == {"load_jobs": 1}
