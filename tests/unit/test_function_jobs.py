"""Function jobs (hpctrain.submit_function): pickling at submit, the call in the job, Run.result(); the local
backend runs real jobs (torchrun on this machine)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import hpctrain
from hpctrain.errors import FunctionFailed, InputError
from hpctrain.rundir import FunctionOutcome, RunDir, function_call
from hpctrain.rundir.function_call import call_and_record, dump_call, load_call, write_call

LOCAL = {"site": "local", "backend": "local"}


@pytest.mark.usefixtures("hpctrain_home")
def test_a_function_returns_its_value_on_every_rank_of_the_local_backend() -> None:
    offset = 40  # a closure: pickled by value, whatever module defines the test

    def world(extra: int, *, scale: int) -> dict[str, object]:
        return {
            "value": (offset + extra) * scale,
            "rank": os.environ["RANK"],
            "world": os.environ["WORLD_SIZE"],
            "run_dir": os.environ["HPCTRAIN_RUN_DIR"],
        }

    run = hpctrain.submit_function(
        world, (2,), {"scale": 10}, ranks="all", resources={"tasks_per_node": 2}, **LOCAL
    )
    value = run.result(timeout=120)
    assert value == {"value": 420, "rank": "0", "world": "2", "run_dir": str(run.run_dir)}
    root = RunDir(run.run_dir)
    second = function_call.outcomes(root)[1]
    assert isinstance(second, FunctionOutcome) and (second.rank, second.returned) == (1, True)
    assert run.name == "fn-world"


@pytest.mark.usefixtures("hpctrain_home")
def test_an_exception_comes_back_with_its_remote_traceback() -> None:
    def inner_helper(x: int) -> None:
        raise ValueError(f"bad value {x}")

    def fails(x: int) -> None:
        inner_helper(x)

    run = hpctrain.submit_function(fails, (7,), **LOCAL)
    with pytest.raises(FunctionFailed) as caught:
        run.result(timeout=120)
    assert caught.value.summary.startswith("the function raised ValueError: bad value 7 (rank 0 on ")
    text = str(caught.value)
    assert "Remote traceback:" in text
    assert "in inner_helper" in text and "in fails" in text
    assert "call_and_record" not in text  # hpctrain's own frame is left out
    assert run.status().state == "FAILED"


@pytest.mark.usefixtures("hpctrain_home")
def test_an_unpicklable_closure_is_refused_before_anything_is_submitted(hpctrain_home: Path) -> None:
    lock = threading.Lock()

    def holds_a_lock() -> bool:
        return lock.locked()

    with pytest.raises(InputError) as caught:
        hpctrain.submit_function(holds_a_lock, **LOCAL)
    message = str(caught.value)
    assert "holds_a_lock cannot be sent to the job" in message and "_thread.lock" in message
    assert "\n" not in message
    assert not (hpctrain_home / "runs").exists() or not any((hpctrain_home / "runs").iterdir())


@pytest.mark.parametrize(
    ("fn", "ranks", "words"), [(42, 0, "is not callable"), (print, 1, "ranks: 1 is not 0 or 'all'")]
)
def test_dump_call_refuses_what_cannot_be_a_call(fn: object, ranks: object, words: str) -> None:
    with pytest.raises(InputError, match=words):
        dump_call(fn, (), {}, ranks)  # type: ignore[arg-type]


def test_a_function_job_names_no_train_or_command_of_its_own() -> None:
    with pytest.raises(InputError, match="job: command"):
        hpctrain.submit_function(print, job={"command": ["true"]}, **LOCAL)


def test_a_value_that_cannot_be_pickled_is_an_error_with_the_reason(tmp_path: Path) -> None:
    run = RunDir(tmp_path)
    call = load_call(dump_call(threading.Lock, (), {}, 0))
    assert call_and_record(run, call, 0) is False
    with pytest.raises(FunctionFailed, match="cannot be pickled"):
        function_call.result(run)


def test_result_without_an_outcome_says_so(tmp_path: Path) -> None:
    run = RunDir(tmp_path)
    write_call(run, dump_call(print, (), {}, 0))
    assert function_call.is_function_run(run)
    assert function_call.result(run) == (False, "rank 0 has written no outcome")


def test_the_call_module_outside_a_job_says_why_in_one_line(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "HPCTRAIN_RUN_DIR"}
    proc = subprocess.run(
        [sys.executable, "-m", "hpctrain.command.call"], capture_output=True, text=True, env=env, check=False
    )
    assert proc.returncode == 2
    assert (
        proc.stderr.strip() == "hpctrain.command.call: HPCTRAIN_RUN_DIR is not set: run it in an hpctrain job"
    )


def test_ranks_zero_leaves_the_other_ranks_idle(tmp_path: Path) -> None:
    run = RunDir(tmp_path)
    write_call(run, dump_call(os.getpid, (), {}, 0))
    env = {**os.environ, "HPCTRAIN_RUN_DIR": str(tmp_path), "RANK": "1"}
    proc = subprocess.run([sys.executable, "-m", "hpctrain.command.call"], env=env, check=False)
    assert proc.returncode == 0
    assert function_call.outcomes(run) == []
    proc = subprocess.run(
        [sys.executable, "-m", "hpctrain.command.call"], env={**env, "RANK": "0"}, check=False
    )
    assert proc.returncode == 0
    done, value = function_call.result(run)
    assert done and isinstance(value, int) and value != os.getpid()


def test_the_local_script_of_a_command_job_runs_the_wrapper_and_is_shellcheck_clean(tmp_path: Path) -> None:
    from hpctrain import spec
    from hpctrain.scheduler.render import render
    from hpctrain.submission.submit_path import FUNCTION_COMMAND
    from tests.conftest import SITES
    from tests.unit.scheduler.test_render import shellcheck

    job = spec.decode(spec.JobSpec, {"name": "fn", "command": [*FUNCTION_COMMAND, "it's $HOME"]}, "test")
    script = render(
        spec.resolve(job, spec.load_site(SITES / "local.yaml")), tmp_path / "run", template="local.sh.j2"
    )
    # Every rank runs the command wrapper, which reads the command's words from spec.json: no shell
    # word of the user's reaches the script.
    assert script.rstrip().endswith("-m hpctrain.command") and "it's" not in script
    assert "hpctrain.runtime" not in script
    shellcheck(script, tmp_path)


@pytest.mark.usefixtures("hpctrain_home")
def test_the_function_job_example_runs_on_the_local_backend(capsys: pytest.CaptureFixture[str]) -> None:
    from hpctrain.examples import function_job

    assert function_job.main(["--site", "local", "--backend", "local", "--timeout", "120"]) == 0
    out = capsys.readouterr().out
    assert "value: {'mean_of_squares': 7.5, 'ranks': 2," in out
    assert "raised: the function raised ZeroDivisionError" in out


def test_hpctrain_examples_lists_and_prints_the_function_job() -> None:
    from tests.conftest import run_cli

    listed = run_cli("examples")
    assert "function-job             python -m hpctrain.examples.function_job" in listed.stdout
    shown = run_cli("examples", "function-job")
    assert shown.returncode == 0 and "hpctrain.submit_function(" in shown.stdout
