"""The srun command lines of a batch job's steps, as argv: the supervisor's attempt loop starts them.

Every word is passed to srun as it is (no shell between): an image, a mount or a path needs no quoting.
The container words (pyxis, Slurm's OCI support, Apptainer) follow each runtime's documented options
(docs/containers.md); the run directory is mounted at its own path, so the ranks and the host's
supervisor share it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from hpctrain.spec import Container

SRUN = "srun"


@dataclass(frozen=True)
class ContainerWords:
    """How a step enters the job's container: `srun` options before the command, a `prefix` before
    the interpreter (apptainer exec ... IMAGE), and the interpreter that runs inside."""

    srun: tuple[str, ...] = ()
    prefix: tuple[str, ...] = ()
    python: str = ""


def container_words(
    container: Container, run_dir: str, gpus: bool, job_id: str, python: str
) -> ContainerWords:
    """The container words of every step of job `job_id`; `python` is the host's interpreter, used
    when the job runs in no container."""
    if not container.enabled:
        return ContainerWords(python=python)
    image = container.image or ""
    if container.runtime == "oci":
        return ContainerWords(srun=(f"--container={image}",), python=container.python)
    mounts = [(run_dir, run_dir, False)] + [(m.source, m.target, m.readonly) for m in container.bind_mounts]
    binds = [f"{source}:{target}{':ro' if readonly else ''}" for source, target, readonly in mounts]
    if container.runtime == "pyxis":
        options = [
            f"--container-image={image}",
            f"--container-mounts={','.join(binds)}",
            "--container-writable" if container.writable else "--container-readonly",
        ]
        if container.workdir:
            options.append(f"--container-workdir={container.workdir}")
        if container.env:
            options.append(f"--container-env={','.join(container.env)}")
        # One unpacked copy per node for the whole job: the container check, every attempt and the
        # warm standby reuse it instead of unpacking the image again. The job id in the name keeps a
        # site's container_scope=global from handing a later job this job's image.
        options.append(f"--container-name=hpctrain-{job_id}")
        return ContainerWords(srun=tuple(options), python=container.python)
    words = ["apptainer", "exec"]
    for bind in binds:
        words += ["--bind", bind]
    if container.workdir:
        words += ["--pwd", container.workdir]
    if container.writable:
        words.append("--writable-tmpfs")
    if gpus:
        words.append("--nv")
    words.append(image)
    return ContainerWords(prefix=tuple(words), python=container.python)


def _python(box: ContainerWords, module_and_args: Sequence[str]) -> list[str]:
    return [*box.srun, *box.prefix, box.python, "-m", *module_and_args]


def container_check_step(nnodes: int, box: ContainerWords) -> list[str]:
    """One task per node: the image starts, its hpctrain matches, the run directory is writable."""
    head = [SRUN, f"--nodes={nnodes}", f"--ntasks={nnodes}", "--ntasks-per-node=1", "--kill-on-bad-exit=1"]
    return head + _python(box, ["hpctrain.runtime.preflight", "--container"])


def preflight_step(log: str, box: ContainerWords) -> list[str]:
    """torchrun's preflight, a step of its own over every task of the allocation."""
    return [SRUN, "--kill-on-bad-exit=1", f"--output={log}", *_python(box, ["hpctrain.runtime.preflight"])]


def rank_step(
    nodes: Sequence[str],
    tasks_per_node: int,
    log: str,
    box: ContainerWords,
    program: Sequence[str],
    kill_on_bad_exit: bool = True,
    mpi: str = "",
) -> list[str]:
    """One task per rank on `nodes`, each running `python -m PROGRAM...`.

    --overlap: the step of a lost node stays "running" in slurmctld (its node never reports back)
    and holds the survivors' CPUs; a new step on them is refused ("Requested nodes are busy")
    without it. Only one training step ever runs, so sharing costs nothing."""
    head = [SRUN, "--overlap", f"--kill-on-bad-exit={int(kill_on_bad_exit)}"]
    if mpi:
        head.append(f"--mpi={mpi}")
    head += [
        f"--nodes={len(nodes)}",
        f"--ntasks={len(nodes) * tasks_per_node}",
        f"--nodelist={','.join(nodes)}",
    ]
    return [*head, f"--output={log}", *_python(box, program)]


def fork_step(
    nodes: Sequence[str],
    tasks_per_node: int,
    cpus: int,
    log: str,
    box: ContainerWords,
    program: Sequence[str],
) -> list[str]:
    """One task per node (all of the node's CPUs) that imports torch and the runtime once, then
    forks the node's ranks (hpctrain.runtime.fork_ranks)."""
    head = [SRUN, "--overlap", "--kill-on-bad-exit=1", f"--nodes={len(nodes)}", f"--ntasks={len(nodes)}"]
    head += [
        "--ntasks-per-node=1",
        f"--cpus-per-task={cpus}",
        f"--nodelist={','.join(nodes)}",
        f"--output={log}",
    ]
    return head + _python(box, ["hpctrain.runtime.fork_ranks", str(tasks_per_node), *program])


def torchrun_step(
    nodes: Sequence[str],
    tasks_per_node: int,
    endpoint: str,
    rdzv_id: str,
    log: str,
    box: ContainerWords,
    program: Sequence[str],
) -> list[str]:
    """One torchrun agent per node; torchrun starts the node's ranks itself."""
    head = [SRUN, "--overlap", "--kill-on-bad-exit=1", f"--nodes={len(nodes)}", f"--ntasks={len(nodes)}"]
    head += ["--ntasks-per-node=1", f"--nodelist={','.join(nodes)}", f"--output={log}"]
    agent = ["torch.distributed.run", f"--nnodes={len(nodes)}", f"--nproc-per-node={tasks_per_node}"]
    agent += [
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint={endpoint}",
        f"--rdzv-id={rdzv_id}",
        "--max-restarts=0",
    ]
    return head + _python(box, [*agent, "-m", *program])


def het_step(box: ContainerWords, program: Sequence[str]) -> list[str]:
    """Servers and workers of a parameter-server hetjob as one step over both components: one rank
    range, servers first. A dead worker must not end the step (the servers drop it)."""
    return [SRUN, "--het-group=0,1", "--kill-on-bad-exit=0", *_python(box, program)]


def standby_step(
    tasks_per_node: int, node: str, log: str, box: ContainerWords, program: Sequence[str]
) -> list[str]:
    """A node's warm standby step: its tasks import torch and the runtime, then wait for the go.
    `node` and `log` may hold the standby_steps placeholder for the node."""
    head = [SRUN, "--overlap", "--kill-on-bad-exit=1", "--nodes=1", f"--ntasks={tasks_per_node}"]
    head += [f"--nodelist={node}", f"--output={log}"]
    return head + _python(box, ["hpctrain.runtime.standby", *program])
