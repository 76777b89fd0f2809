"""Property tests over generated job and site documents and --set overrides (hypothesis).

Each property: the spec is refused with a SpecError/RenderError (exit 2), or its script has exactly
the #SBATCH directives the spec asks for, all read by sbatch (none after a command line), and no
control character. Every example is checked in-process; a sample of the rendered scripts (SAMPLE
per property, the most hostile first) then goes through `bash -n`, `shellcheck -S warning` and a run
under `env -i` with stub srun/scontrol/sbatch, after which no planted command may have run.
"""

from __future__ import annotations

import copy
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest
import yaml
from hypothesis import assume, given
from hypothesis import strategies as st

from hpctrain import spec
from hpctrain.errors import HpctrainError
from hpctrain.scheduler.render import render
from tests.conftest import JOBS, SITES

SAMPLE = 40
MARKER = "MARKER"
PAYLOADS = [
    f"$(touch {MARKER})",
    f"`touch {MARKER}`",
    f"; touch {MARKER}",
    f"x; touch {MARKER} #",
    f"BASH_VERSINFO[$(touch {MARKER})]",
    f"a[$(touch {MARKER})]",
    f"$((a[$(touch {MARKER})]))",
    f"' ; touch {MARKER} ; '",
    f'" ; touch {MARKER} ; "',
    f"\n touch {MARKER}\n",
    f"USR1\ntouch {MARKER}",
    f"${{IFS}}touch${{IFS}}{MARKER}",
    f"\\$(touch {MARKER})",
    f"x\r\ntouch {MARKER}",
    f"--output=/tmp/{MARKER}",
]
ALPHABET = st.characters(codec="utf-8", exclude_categories=("Cs",))
hostile_text = st.one_of(
    st.sampled_from(PAYLOADS),
    st.text(ALPHABET, max_size=12),
    st.text(st.sampled_from("azAZ09_-.:,@%=/[]+ \t\n\r\x00\x1b\x7f$`'\";&|()#*?!\\{}"), max_size=12),
    st.builds(
        lambda a, p: a + p,
        st.sampled_from(["debug", "USR1", "00:10:00", "node1", "x"]),
        st.sampled_from(PAYLOADS),
    ),
)
scalar = st.one_of(
    hostile_text,
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.none(),
)
env_key = st.one_of(
    st.sampled_from(["OMP_NUM_THREADS", "FOO", "SLURM_JOB_ID", "PYTHON", "RUN_DIR", "BASH_ENV", "IFS", "PATH",
                     "HPCTRAIN_RUN_DIR", "MASTER_PORT", "status", "X=1; touch MARKER; Y", "FOO\n"]),
    hostile_text,
)  # fmt: skip

# Fields of a job spec that generated values replace, as dotted paths.
JOB_FIELDS = [
    "name", "launcher", "array", "dependency", "begin", "comment", "mail_user", "mail_type",
    "resources.time", "resources.mem", "resources.partition", "resources.account", "resources.qos",
    "resources.constraint", "resources.gpu_type", "resources.reservation", "resources.licenses",
    "resources.exclude", "resources.nodelist", "resources.nodes", "resources.gpus_per_node",
    "resources.tasks_per_node", "resources.cpus_per_task", "resources.exclusive",
    "preemption.signal", "preemption.lead_time", "preemption.requeue",
    "train.entrypoint", "train.lr", "train.grad_clip", "train.options.x", "train.parallel",
]  # fmt: skip
SITE_FIELDS = [
    "name", "gres_name", "python", "mpi", "network.gloo_socket_ifname", "network.interconnect",
    "partitions.debug.gpu_type", "partitions.debug.mem_per_node", "partitions.debug.max_time",
    "partitions.debug.node_names", "preemption.signal", "heterogeneous_jobs",
]  # fmt: skip
# Values each field accepts, so that a good share of the examples render and reach the shell checks.
VALID: dict[str, list[Any]] = {
    "name": ["a", "job.1", "x-y_z"], "launcher": ["srun", "fork", "torchrun", "mpi"],
    "array": ["0-3%2", "1,2"],
    "dependency": ["afterok:12", "afterany:1:2"], "begin": ["now+1hour", "2026-01-31T08:00:00"],
    "comment": ["two words", "x"], "mail_user": ["me@example.org"], "mail_type": [["END", "FAIL"], ["ALL"]],
    "resources.time": ["00:10:00", "30", "1:30"], "resources.mem": ["1G", "2000M"],
    "resources.partition": ["debug", "cpu"], "resources.account": ["proj"], "resources.qos": ["high"],
    "resources.constraint": ["a100"], "resources.gpu_type": [None], "resources.reservation": ["maint"],
    "resources.licenses": ["matlab:1"], "resources.exclude": [["node2"], []],
    "resources.nodelist": [["node1"]],
    "resources.nodes": [1, 2], "resources.gpus_per_node": [0, 2], "resources.tasks_per_node": [None, 2],
    "resources.cpus_per_task": [1, 2], "resources.exclusive": [True, False],
    "preemption.signal": ["USR1", "SIGTERM", "USR2"], "preemption.lead_time": [0, 60],
    "preemption.requeue": [True, False], "train.entrypoint": ["m:f"], "train.lr": [0.1],
    "train.grad_clip": [1.0],
    "train.options.x": [{"a": [1, "two"]}], "train.parallel": ["ddp", "fsdp"],
    "gres_name": ["gpu"], "python": ["/usr/bin/python3", "/opt/my python/bin/python"],
    "mpi": ["pmi2", "none"],
    "network.gloo_socket_ifname": ["lo", "eth0"], "network.interconnect": ["ethernet"],
    "partitions.debug.gpu_type": [None], "partitions.debug.mem_per_node": ["8000M"],
    "partitions.debug.max_time": ["02:00:00"], "partitions.debug.node_names": [["node1", "node2"]],
    "heterogeneous_jobs": [True, False],
}  # fmt: skip
hostile_value = st.one_of(
    scalar, st.lists(hostile_text, max_size=3), st.dictionaries(hostile_text, scalar, max_size=2)
)


def edits(fields: list[str]) -> st.SearchStrategy[list[tuple[str, Any]]]:
    """(field, value) edits: each value is one the field accepts, or a hostile one."""

    def one(field: str) -> st.SearchStrategy[tuple[str, Any]]:
        return st.tuples(st.just(field), st.one_of(st.sampled_from(VALID.get(field, [None])), hostile_value))

    return st.lists(st.sampled_from(fields).flatmap(one), max_size=3)


BASE_JOB = yaml.safe_load((JOBS / "digits-ddp.yaml").read_text())
BASE_PS_JOB = yaml.safe_load((JOBS / "digits-ps-async.yaml").read_text())
BASE_SITE = yaml.safe_load((SITES / "local.yaml").read_text())
LOCAL = spec.load_site(SITES / "local.yaml")


def put(data: dict[str, Any], dotted: str, new: Any) -> None:
    *parents, last = dotted.split(".")
    node = data
    for part in parents:
        child = node.get(part)
        if not isinstance(child, dict):
            child = node[part] = {}
        node = child
    node[last] = new


class Outcome(msgspec.Struct):
    script: str | None
    hostile: int
    """How many planted payloads the accepted spec holds (scripts with most are run first)."""


class Sample:
    """Scripts that rendered, kept for the shell checks that are too slow for every example."""

    def __init__(self) -> None:
        self.scripts: dict[str, int] = {}
        self.rendered = 0
        self.refused = 0

    def add(self, outcome: Outcome) -> None:
        if outcome.script is None:
            self.refused += 1
            return
        self.rendered += 1
        self.scripts[outcome.script] = max(self.scripts.get(outcome.script, 0), outcome.hostile)

    def chosen(self) -> list[str]:
        ranked = sorted(self.scripts, key=lambda s: -self.scripts[s])
        return ranked[:SAMPLE]


def sbatch_block(script: str) -> list[str]:
    """The #SBATCH lines sbatch reads: those before the first line that is not a comment or blank."""
    lines = []
    for line in script.splitlines()[1:]:
        if line and not line.startswith("#"):
            break
        if line.startswith("#SBATCH"):
            lines.append(line)
    return lines


def expected_directives(resolved: spec.Resolved) -> int:
    """How many #SBATCH lines the spec asks for, counted from the spec itself (not from render)."""
    job, res = resolved.job, resolved.job.resources
    # 7: the comment is always there, carrying the run id (and the job's own comment after it).
    whole = 7 + sum(
        bool(v)
        for v in (res.account, res.qos, job.array, job.dependency, res.reservation, res.licenses, job.begin,
                  job.mail_type, job.mail_user, job.restart.max)
    )  # fmt: skip
    workers = 4 + sum(
        bool(v)
        for v in (res.gpus_per_node, res.mem, res.constraint, res.exclusive, res.exclude, res.nodelist)
    )
    workers += len(job.sbatch)
    ps = resolved.parallel.ps
    if ps is None or not ps.heterogeneous:
        return whole + workers
    servers = 4 + bool(ps.mem or res.mem) + bool(res.exclude)
    if ps.mem and not res.mem:
        workers += 1  # a hetjob's components both carry --mem
    if job.launcher != "torchrun":
        workers += 1  # a hetjob's worker component spells out --ntasks
    return whole + servers + 1 + workers  # + the `hetjob` separator


def check_script(resolved: spec.Resolved, script: str) -> None:
    block = sbatch_block(script)
    everywhere = [line for line in script.splitlines() if line.startswith("#SBATCH")]
    assert block == everywhere, "an #SBATCH line comes after a command: sbatch would ignore it"
    assert len(block) == expected_directives(resolved), block
    assert f"#SBATCH --job-name={resolved.job.name}" in block
    assert block.count("#SBATCH hetjob") == (
        resolved.parallel.ps is not None and resolved.parallel.ps.heterogeneous
    )
    for key, _ in resolved.job.env.items():
        assert re.search(rf"^export {re.escape(key)}='", script, re.M), key
    bad = [c for c in script if (ord(c) < 32 and c not in "\n\t") or ord(c) == 127]
    assert not bad, bad


def outcome(job_text: str, site: spec.Site, tmp: Path, overrides: list[str] | None = None) -> Outcome:
    job_path = tmp / "job.yaml"
    job_path.write_text(job_text, encoding="utf-8", errors="surrogatepass")
    try:
        resolved = spec.resolve(spec.load_job(job_path, overrides), site, "job.yaml", "site.yaml")
        script = render(resolved, tmp / "run")
    except HpctrainError as err:
        assert err.exit_code == 2, err
        assert "\n" not in str(err), str(err)
        return Outcome(None, 0)
    check_script(resolved, script)
    hostile = sum(script.count(p) for p in PAYLOADS) + script.count(MARKER)
    return Outcome(script, hostile)


def shell_checks(sample: Sample, tmp: Path) -> None:
    """bash -n, shellcheck and a stubbed run of the sampled scripts; no planted command may run."""
    scripts = sample.chosen()
    assert sample.rendered, "no example rendered: the generator only makes refused specs"
    stubs = tmp / "bin"
    stubs.mkdir(exist_ok=True)
    for tool, body in {"srun": "exit 0", "scontrol": "echo node1", "sbatch": "echo 1"}.items():
        (stubs / tool).write_text(f"#!/bin/sh\n{body}\n")
        (stubs / tool).chmod(0o755)
    paths = []
    for n, script in enumerate(scripts):
        workdir = tmp / f"s{n}"
        workdir.mkdir()
        # The run directory the script was rendered for is tmp/run; give each its own copy.
        path = workdir / "job.sbatch"
        path.write_text(script.replace(str(tmp / "run"), str(workdir / "run")))
        paths.append(path)
        syntax = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True, check=False)
        assert syntax.returncode == 0, syntax.stderr + script
        subprocess.run(
            ["env", "-i", f"PATH={stubs}:/usr/bin:/bin", "SLURM_JOB_ID=41", "SLURM_JOB_NODELIST=node1",
             "SLURM_ARRAY_TASK_ID=0", "bash", str(path)],
            cwd=workdir, capture_output=True, timeout=60, check=False,
        )  # fmt: skip
        planted = [p for p in tmp.rglob(MARKER)]
        assert not planted, f"a planted command ran: {planted}\n{script}"
    shellcheck = shutil.which("shellcheck")
    if shellcheck is None:
        pytest.fail("shellcheck is not installed (scripts/test.sh installs it)")
    proc = subprocess.run(
        [shellcheck, "--shell=bash", "--severity=warning", *map(str, paths)], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout[-4000:]


def run_property(tmp_path: Path, strategy: st.SearchStrategy[Any], make: Any) -> Sample:
    sample = Sample()

    @given(strategy)
    def prop(drawn: Any) -> None:
        sample.add(make(drawn))

    prop()
    print(f"rendered {sample.rendered}, refused {sample.refused}, shell-checked {len(sample.chosen())}")
    return sample


job_edits = edits(JOB_FIELDS)
# Env and passthrough edits are often absent, so that the other edits are seen on their own too.
env_edits = st.one_of(
    st.just({}),
    st.dictionaries(
        st.one_of(*[st.sampled_from(["OMP_NUM_THREADS", "FOO", "NCCL_DEBUG"])] * 2, env_key),
        st.one_of(st.sampled_from(PAYLOADS), hostile_text, scalar),
        max_size=2,
    ),
)
sbatch_edits = st.one_of(
    st.just({}),
    st.dictionaries(
        st.one_of(
            st.sampled_from(["hint", "nice", "out", "output", "export", "signal", "x\ny", "--hint"]),
            hostile_text,
        ),
        st.one_of(st.sampled_from(["nomultithread", "10"]), hostile_text, st.integers(0, 10), st.booleans()),
        max_size=2,
    ),
)


def dump(data: Any) -> str:
    return yaml.dump(
        data, Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper), allow_unicode=True, sort_keys=False
    )


def test_generated_job_documents(tmp_path: Path) -> None:
    def make(drawn: tuple[bool, list[tuple[str, Any]], dict[Any, Any], dict[Any, Any]]) -> Outcome:
        ps, edits, env, sbatch = drawn
        data = copy.deepcopy(BASE_PS_JOB if ps else BASE_JOB)
        for dotted, new in edits:
            put(data, dotted, new)
        data["env"] = {**data.get("env", {}), **env}
        if sbatch:
            data["sbatch"] = sbatch
        return outcome(dump(data), LOCAL, tmp_path)

    sample = run_property(tmp_path, st.tuples(st.booleans(), job_edits, env_edits, sbatch_edits), make)
    shell_checks(sample, tmp_path)


def test_generated_site_documents(tmp_path: Path) -> None:
    site_edits = edits(SITE_FIELDS)
    maps = st.tuples(env_edits, env_edits, env_edits)
    job_text = (JOBS / "digits-ddp.yaml").read_text()

    def make(drawn: tuple[list[tuple[str, Any]], tuple[dict[Any, Any], ...]]) -> Outcome:
        edits, (env, nccl, ucx) = drawn
        data = copy.deepcopy(BASE_SITE)
        for dotted, new in edits:
            put(data, dotted, new)
        data["env"], data["network"]["nccl_env"], data["network"]["ucx_env"] = env, nccl, ucx
        site_path = tmp_path / "site.yaml"
        site_path.write_text(dump(data), encoding="utf-8", errors="surrogatepass")
        try:
            site = spec.load_site(site_path)
        except HpctrainError as err:
            assert err.exit_code == 2 and "\n" not in str(err), err
            return Outcome(None, 0)
        return outcome(job_text, site, tmp_path)

    sample = run_property(tmp_path, st.tuples(site_edits, maps), make)
    shell_checks(sample, tmp_path)


def test_generated_overrides(tmp_path: Path) -> None:
    keys = [*JOB_FIELDS, "env.FOO", "env.BAR", "env.SLURM_JOB_ID", "sbatch.hint", "train.parallel.tp",
            "setup", "train.parallel.ps.servers", "nonsense", "a..b", ".x", "train.steps.x",
            "train.parallel.x.y"]  # fmt: skip
    specials = ["0755", "on", "[a, b]", "{a: 1}", ".inf", "'q'", "", "&a [*a]", "!!python/object:os.system x"]

    def one(key: str) -> st.SearchStrategy[str]:
        valid = [
            yaml.safe_dump(v, default_flow_style=True).removesuffix("\n...\n").strip()
            for v in VALID.get(key, [])
        ]
        return st.builds(
            lambda raw: f"{key}={raw}",
            # one_of draws its branches about evenly: a valid value in about half of the draws
            st.one_of(
                *[st.sampled_from(valid or specials)] * 3, st.sampled_from(PAYLOADS + specials), hostile_text
            ),
        )

    item = st.one_of(
        st.sampled_from(keys).flatmap(one), st.builds(lambda k, v: f"{k}={v}", hostile_text, hostile_text)
    )
    job_text = (JOBS / "digits-ddp.yaml").read_text()
    sample = run_property(
        tmp_path,
        st.lists(item, min_size=1, max_size=3),
        lambda items: outcome(job_text, LOCAL, tmp_path, items),
    )
    shell_checks(sample, tmp_path)


def nested(leaves: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.recursive(
        leaves,
        lambda children: st.one_of(
            st.lists(children, max_size=4), st.dictionaries(hostile_text, children, max_size=4)
        ),
        max_leaves=30,
    )


def test_arbitrary_documents_never_crash(tmp_path: Path) -> None:
    """Any bytes, text or nesting as a job or site file: loaded, or a one-line SpecError; nothing else."""
    path = tmp_path / "doc.yaml"

    @given(st.one_of(st.binary(max_size=300), st.text(ALPHABET, max_size=300), nested(scalar).map(dump)))
    def prop(document: bytes | str) -> None:
        path.write_bytes(
            document if isinstance(document, bytes) else document.encode("utf-8", "surrogatepass")
        )
        for load in (spec.load_job, spec.load_site):
            try:
                load(path)
            except HpctrainError as err:
                assert err.exit_code == 2 and "\n" not in str(err), err

    prop()


def test_documents_that_expand_are_refused_before_any_work() -> None:
    from hpctrain.spec import yaml_reader as spec_yaml

    levels = "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"a{n}: &a{n} [{', '.join([f'*a{n - 1}'] * 10)}]\n" for n in range(1, 9)
    )
    with pytest.raises(spec.SpecError, match="expands to more than"):
        spec_yaml.load(levels, "bomb.yaml")
    assert sys.getrecursionlimit() > spec_yaml.MAX_DEPTH * 4


# Issue 23 item 18: a YAML int is read as sbatch reads a bare number, and renders to what Slurm reads back.
@given(st.integers(min_value=1, max_value=10**8))
def test_int_minutes_and_megabytes_render_to_what_the_parsers_read_back(number: int) -> None:
    from hpctrain.spec.slurm_values import spec_memory, spec_time

    resources = msgspec.convert({"time": number, "mem": number}, spec.Resources)
    assert resources.time == spec_time(number) and spec.time_minutes(resources.time) == number
    assert resources.mem == spec_memory(number) and spec.memory_mb(resources.mem) == number
    assert spec.loads(spec.dumps(spec.resolve(*_job_and_site(resources)))).job.resources == resources


@given(st.integers(min_value=0, max_value=10**4), st.integers(min_value=0, max_value=10**4))
def test_every_mm_ss_time_is_refused_as_ambiguous(first: int, second: int) -> None:
    assume(first or second)  # 0:0 is refused as no time at all
    with pytest.raises(msgspec.ValidationError, match=r"is ambiguous .*; write 00:"):
        msgspec.convert({"time": f"{first}:{second}"}, spec.Resources)


def _job_and_site(resources: spec.Resources) -> tuple[spec.JobSpec, spec.Site]:
    """A job asking for `resources` and a site whose one partition has room for any of them."""
    job = spec.JobSpec(name="t", train=spec.Train(entrypoint="m:f"), resources=resources)
    partition = spec.Partition(nodes=1, mem_per_node=resources.mem or 1, max_time="100000-00:00:00")
    return job, spec.Site(name="s", partitions={"cpu": partition})
