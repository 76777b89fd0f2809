"""JobSpec/Site validation: every refusal is one line naming the field and the file."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from hpctrain import spec
from tests.conftest import JOBS, SITES

LOCAL = SITES / "local.yaml"


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "job.yaml"
    path.write_text(text)
    return path


MINIMAL = """
name: t
resources: {nodes: 2, tasks_per_node: 2, time: "00:10:00"}
train: {entrypoint: "m:f", batch_size: 8}
"""


@pytest.mark.parametrize("job", sorted(JOBS.glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_jobs_load(job: Path) -> None:
    loaded = spec.load_job(job)
    assert loaded.name
    assert (loaded.train is None) != (loaded.command is None)
    assert loaded.command is not None or ":" in loaded.train.entrypoint  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("units", "minutes"),
    [("30", 30), ("1:30", 2), ("01:30:00", 90), ("1-0", 1440), ("2-01:00", 2940), ("0-00:00:30", 1)],
)
def test_time_minutes(units: str, minutes: int) -> None:
    assert spec.time_minutes(units) == minutes


@pytest.mark.parametrize(("text", "mb"), [("4000", 4000), ("16G", 16384), ("512M", 512), ("1T", 1048576)])
def test_memory_mb(text: str, mb: int) -> None:
    assert spec.memory_mb(text) == mb


def test_yaml_time_stays_a_string(tmp_path: Path) -> None:
    # YAML 1.1 reads 02:00:00 as the base-60 integer 7200; the spec must see the Slurm time.
    job = spec.load_job(write(tmp_path, MINIMAL.replace('"00:10:00"', "02:00:00")))
    assert job.resources.time == "02:00:00"


def test_overrides_parse_scalars_and_nested_keys(tmp_path: Path) -> None:
    job = spec.load_job(
        write(tmp_path, MINIMAL),
        ["train.steps=500", "resources.nodes=1", "train.parallel.tp=2", "env.FOO=bar baz"],
    )
    assert job.train.steps == 500
    assert job.resources.nodes == 1
    assert job.train.parallel_dims.tp == 2
    assert job.env["FOO"] == "bar baz"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["resources.nodes=x"], "job.yaml: resources.nodes: Expected `int`, got `str`"),
        (["resources.nodez=1"], "job.yaml: resources: unknown field `nodez`; did you mean `nodes`?"),
        (["train.steps=0"], "train.steps: Expected `int` >= 1"),
        (["resources.time=abc"], "resources.time: 'abc' is not a Slurm time"),
        (["name=has space"], "name: expected letters, digits and _.-"),
        (["resources.partition=debug;rm"], "resources.partition: expected letters, digits"),
        (["train.parallel=zero"], "train.parallel: 'zero' is not one of ddp, fsdp, tp, pp, ps"),
        (["train.fp8_recipe=blockwise"], "train.fp8_recipe: 'blockwise' is not one of tensorwise,"),
        (["env.1BAD=x"], "env: '1BAD' is not a valid variable name"),
        (["train.parallel.dp=0"], "train.parallel.dp: must be >= 1 or -1, got 0"),
        (["nonsense"], "--set 'nonsense': expected dotted.key=value"),
    ],
)
def test_bad_specs_name_the_field(tmp_path: Path, overrides: list[str], message: str) -> None:
    with pytest.raises(spec.SpecError) as err:
        spec.load_job(write(tmp_path, MINIMAL), overrides)
    assert message in str(err.value)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["resources.gpus_per_node=8"], "resources.gpus_per_node: 8 GPUs per node asked, partition debug"),
        (["resources.time=03:00:00"], "resources.time: 03:00:00 is over the 02:00:00 limit"),
        (["resources.nodes=3"], "resources.nodes: 3 nodes asked"),
        (["resources.partition=gpu"], "resources.partition: 'gpu' is not a partition of site local"),
        (["resources.mem=64G"], "resources.mem: 64G per node asked"),
        (["resources.cpus_per_task=5"], "2 tasks x 5 CPUs = 10 per node"),
        (
            ["train.parallel.tp=3"],
            "train.parallel: fsdp=1 x tp=3 x pp=1 = 3 does not divide the world size 4",
        ),
        (["train.parallel.tp=4", "train.parallel.dp=1"], "train.parallel.tp: tp=4 must fit inside one node"),
        (
            ["train.parallel.dp=2", "train.parallel.fsdp=1", "train.parallel.tp=1", "train.parallel.pp=1"],
            "dp*fsdp*tp*pp = 2*1*1*1 = 2 but the job has 4 tasks",
        ),
        (["train.batch_size=6"], "train.batch_size: 6 is not divisible by dp*fsdp*grad_accum = 4"),
    ],
)
def test_site_refusals(tmp_path: Path, overrides: list[str], message: str) -> None:
    job = spec.load_job(write(tmp_path, MINIMAL), overrides)
    with pytest.raises(spec.SpecError) as err:
        spec.resolve(job, spec.load_site(LOCAL), "job.yaml")
    assert message in str(err.value)


@pytest.mark.parametrize(
    ("written", "time", "minutes"),
    [("time: 30", "00:30:00", 30), ("time: 90", "01:30:00", 90), ("time: 2880", "2-00:00:00", 2880)],
)
def test_an_int_time_is_minutes_as_sbatch_reads_it(
    tmp_path: Path, written: str, time: str, minutes: int
) -> None:
    job = spec.load_job(write(tmp_path, f"name: t\nresources:\n  {written}\ntrain: {{entrypoint: m:f}}\n"))
    assert job.resources.time == time
    assert spec.time_minutes(job.resources.time) == minutes


def test_an_int_memory_is_megabytes_as_sbatch_reads_it(tmp_path: Path) -> None:
    job = spec.load_job(write(tmp_path, "name: t\nresources: {mem: 1024}\ntrain: {entrypoint: m:f}\n"))
    assert job.resources.mem == "1024M" and spec.memory_mb(job.resources.mem) == 1024
    assert spec.load_job(JOBS / "digits-ps-async.yaml", ["train.parallel.ps.mem=512"]).train.parallel_dims.ps
    site = tmp_path / "site.yaml"
    site.write_text("name: s\npartitions: {cpu: {nodes: 1, mem_per_node: 8000, max_time: 120}}\n")
    partition = spec.load_site(site).partitions["cpu"]
    assert (partition.mem_per_node, partition.max_time) == ("8000M", "02:00:00")


@pytest.mark.parametrize(
    ("written", "message"),
    [
        ("1:30", "resources.time: '1:30' is ambiguous (Slurm reads MM:SS, 1 min 30 s); write 00:01:30"),
        ("30:00", "or 30:00:00 for 30 h 0 min"),
    ],
)
def test_ambiguous_mm_ss_time_is_refused_with_what_to_write(
    tmp_path: Path, written: str, message: str
) -> None:
    with pytest.raises(spec.SpecError) as err:
        spec.load_job(write(tmp_path, MINIMAL), [f"resources.time={written}"])
    assert message in str(err.value) and "\n" not in str(err.value)
    site = tmp_path / "site.yaml"
    site.write_text(f"name: s\npartitions: {{cpu: {{nodes: 1, max_time: '{written}'}}}}\n")
    with pytest.raises(spec.SpecError, match=r"partitions\.cpu\.max_time: .* is ambiguous"):
        spec.load_site(site)


def test_a_recorded_spec_of_an_earlier_version_with_mm_ss_still_loads(tmp_path: Path) -> None:
    """Earlier versions recorded `time: 1:30` as written (Slurm took it as 90 s); their spec.json
    must still load (the supervisor and the runtime read it at every attempt), unchanged."""
    resolved = spec.resolve(spec.load_job(write(tmp_path, MINIMAL)), spec.load_site(LOCAL))
    recorded = spec.dumps(resolved).replace(resolved.job.resources.time.encode(), b"1:30")
    assert b'"1:30"' in recorded
    assert spec.loads(recorded).job.resources.time == "1:30"
    with pytest.raises(spec.SpecError):  # a user's file is still refused
        spec.load_job(write(tmp_path, MINIMAL), ["resources.time=1:30"])


def test_an_int_time_renders_as_minutes(tmp_path: Path) -> None:
    from hpctrain.scheduler.render import render

    job = spec.load_job(write(tmp_path, MINIMAL), ["resources.time=45", "resources.mem=2048"])
    script = render(spec.resolve(job, spec.load_site(LOCAL)), tmp_path / "run")
    assert "#SBATCH --time=00:45:00\n" in script and "#SBATCH --mem=2048M\n" in script


def test_parallel_shorthands_resolve_to_world_size(tmp_path: Path) -> None:
    site = spec.load_site(LOCAL)
    for shorthand, field in [("ddp", "dp"), ("fsdp", "fsdp"), ("pp", "pp")]:
        job = spec.load_job(write(tmp_path, MINIMAL), [f"train.parallel={shorthand}"])
        resolved = spec.resolve(job, site)
        assert getattr(resolved.parallel, field) == 4
    job = spec.load_job(
        write(tmp_path, MINIMAL), ["train.parallel.fsdp=2", "train.parallel.tp=2", "train.parallel.dp=1"]
    )
    resolved = spec.resolve(job, site)
    assert (resolved.parallel.dp, resolved.parallel.fsdp, resolved.parallel.tp) == (1, 2, 2)


def test_resolved_round_trips_through_json(tmp_path: Path) -> None:
    resolved = spec.resolve(spec.load_job(JOBS / "digits-ddp.yaml"), spec.load_site(LOCAL))
    assert spec.loads(spec.dumps(resolved)) == resolved
    assert resolved.preemption.signal == "USR1"


def test_invalid_yaml_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(spec.SpecError) as err:
        spec.load_job(write(tmp_path, "name: [unclosed\n"))
    assert "invalid YAML" in str(err.value)
    assert "\n" not in str(err.value)


def test_missing_file() -> None:
    with pytest.raises(spec.SpecError, match="no such file"):
        spec.load_job("/nonexistent/job.yaml")


def test_site_by_name_and_unknown_site() -> None:
    from hpctrain.site import lookup as sites

    assert spec.load_site(sites.locate("local")).name == "local"
    with pytest.raises(spec.SpecError, match="no site profile of that name"):
        sites.locate("nowhere")
    with pytest.raises(spec.SpecError, match="no such file"):
        spec.load_site(SITES / "nowhere.yaml")


def test_field_docs_cover_every_field() -> None:
    rows = spec.field_docs(spec.JobSpec)
    names = {r.name for r in rows}
    assert {"resources.nodes", "train.parallel.tp", "train.parallel.ps.mode", "preemption.signal"} <= names
    assert all(r.description for r in rows), [r.name for r in rows if not r.description]


class _Parent(msgspec.Struct, kw_only=True):
    inherited: int = 0
    """Declared in the base
    over two lines."""


class _Child(_Parent, kw_only=True):
    plain: str = ""
    """Below its field."""
    undocumented: int = 1
    nested: _Parent | None = None
    """A struct inside."""


def test_field_docs_read_the_string_below_each_field_over_the_bases() -> None:
    rows = {r.name: (r.type, r.description) for r in spec.field_docs(_Child)}
    assert rows["inherited"] == ("int", "Declared in the base over two lines.")
    assert rows["plain"] == ("str", "Below its field.")
    assert rows["undocumented"] == ("int", "")
    assert rows["nested"] == ("_Parent (optional)", "A struct inside.")
    assert rows["nested.inherited"][1] == "Declared in the base over two lines."


def test_field_docs_without_source_are_empty_not_an_error() -> None:
    namespace: dict[str, object] = {"msgspec": msgspec}
    exec("class Sourceless(msgspec.Struct):\n    x: int = 0\n    'no file to read this from'\n", namespace)
    assert spec.field_docs(namespace["Sourceless"]) == [("x", "int", "0", "")]  # type: ignore[arg-type]
