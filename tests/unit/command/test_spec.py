"""The command job's spec: one-line errors for every malformed command, resume, progress and workdir."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hpctrain import spec
from hpctrain.errors import SpecError
from hpctrain.submission.submit_path import load_and_resolve, load_job

JOBS = Path(__file__).resolve().parents[3] / "jobs"


def job(**fields: Any) -> dict[str, Any]:
    return {"name": "cmd", **fields}


def refusal(data: dict[str, Any]) -> str:
    with pytest.raises(SpecError) as caught:
        load_job(data)
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_a_command_is_a_string_or_a_list_of_words(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    loaded, _ = load_job(job(command="python train.py --batch_size=4 'a b'"))
    assert loaded.command_words == ["python", "train.py", "--batch_size=4", "a b"]
    assert loaded.workdir == str(tmp_path) and loaded.snapshot
    listed, _ = load_job(job(command=["python", "-m", "mypkg.train"], code={"snapshot": False}))
    assert listed.command_words == ["python", "-m", "mypkg.train"] and not listed.snapshot


def test_a_job_file_runs_its_command_in_its_own_folder_by_default(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    path = tmp_path / "job.yaml"
    path.write_text("name: cmd\ncommand: python train.py\n")
    assert spec.load_job(path).workdir == str(tmp_path)
    path.write_text("name: cmd\ncommand: python train.py\nworkdir: sub\n")
    assert spec.load_job(path).workdir == str(tmp_path / "sub")


@pytest.mark.parametrize(
    ("data", "words"),
    [
        (job(), "names neither"),
        (job(command="x", train={"entrypoint": "m:f"}), "not both"),
        (job(command=""), "command: empty"),
        (job(command=[]), "command: empty"),
        (job(command="python 'unclosed"), "command:"),
        (job(command="x", resume={"if_exists": "ckpt"}), "resume: Object missing required field `args`"),
        (job(command="x", resume={"if_exists": "ckpt", "args": []}), "resume.args: give the arguments"),
        (job(command="x", progress={"pattern": "("}), "progress.pattern: not a regular expression"),
        (job(command="x", progress={"pattern": "loss (?P<loss>\\S+)"}), "pattern has no group named step"),
        (job(command="x", progress={"preset": "nope"}), "progress.preset: unknown preset 'nope'"),
        (job(command="x", progress={"pattern": "(?P<step>\\d+)", "preset": "step-loss"}), "either pattern"),
        (job(train={"entrypoint": "m:f"}, resume={"if_exists": "a", "args": ["--r"]}), "only command jobs"),
    ],
)
def test_malformed_command_jobs_get_one_line(data: dict[str, Any], words: str) -> None:
    assert words in refusal(data)


def test_a_program_or_script_that_does_not_exist_is_refused_at_submit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("print('hi')\n")
    load_and_resolve(job(command="python train.py --x 1"), "local", None)
    load_and_resolve(job(command="python -m json.tool"), "local", None)
    for command, words in [
        ("python missing.py", "script missing.py does not exist in"),
        ("python -u -W ignore missing.py", "script missing.py does not exist"),
        ("python -m no_such_module_here", "module no_such_module_here is not found"),
        ("no-such-program-hpctrain --x", "no-such-program-hpctrain is not found on PATH"),
        ("./train.py", "./train.py is not an executable file"),
    ]:
        with pytest.raises(SpecError, match="command: ") as caught:
            load_and_resolve(job(command=command), "local", None)
        assert words in str(caught.value), caught.value
    with pytest.raises(SpecError, match="launcher: fork runs hpctrain's runtime"):
        load_and_resolve(job(command="python train.py", launcher="fork"), "local", None)


def test_a_command_job_built_in_python_round_trips_through_spec_json(tmp_path: Path) -> None:
    built = spec.JobSpec(name="cmd", command="python train.py", workdir=str(tmp_path))
    resolved = spec.resolve(
        built, spec.load_site(Path(__file__).resolve().parents[3] / "site-configs/local.yaml")
    )
    again = spec.loads(spec.dumps(resolved))
    assert again.job.command_words == ["python", "train.py"] and again.world_size == 1
    assert again.parallel.dp == 1


@given(
    command=st.one_of(st.text(max_size=30), st.lists(st.text(max_size=10), max_size=4), st.integers()),
    resume=st.one_of(
        st.none(), st.dictionaries(st.sampled_from(["if_exists", "args", "other"]), st.text(max_size=5))
    ),
    pattern=st.one_of(st.none(), st.text(max_size=20)),
)
def test_any_bad_command_resume_or_progress_is_refused_with_one_line(
    command: Any, resume: Any, pattern: str | None
) -> None:
    data = job(command=command)
    if resume is not None:
        data["resume"] = resume
    if pattern is not None:
        data["progress"] = {"pattern": pattern}
    try:
        loaded, _ = load_job(data)
    except SpecError as err:
        assert "\n" not in str(err) and str(err).startswith("<python job cmd>:")
        return
    assert loaded.command_words and all(isinstance(word, str) for word in loaded.command_words)
    msgspec.json.encode(loaded)


def test_the_shipped_command_example_resolves_and_its_module_exists() -> None:
    resolved = load_and_resolve(JOBS / "ddp-script.yaml", "local", None)
    assert resolved.job.command_words[:3] == ["python", "-m", "hpctrain.examples.ddp_script"]
    assert resolved.job.resume is not None and resolved.job.progress is not None
