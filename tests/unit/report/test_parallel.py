"""report.parallel: jobs shared by weight, drawn in forked children, results in order, errors raised."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hpctrain.report.parallel import DrawerDied, FigureFailed, Job, cores, draw_all, shares


def job(name: str, weight: float = 1.0) -> Job:
    return Job(name, lambda: Path(name), weight)


@given(st.lists(st.floats(0.1, 10.0), min_size=1, max_size=12), st.integers(1, 6))
def test_every_job_goes_to_one_share_and_the_first_share_is_the_lightest(
    weights: list[float], workers: int
) -> None:
    jobs = [job(str(i), w) for i, w in enumerate(weights)]
    split = shares(jobs, workers)
    assert len(split) == workers
    assert sorted(i for share in split for i in share) == list(range(len(jobs)))
    loads = [sum(weights[i] for i in share) for share in split]
    assert loads[0] == min(loads)
    assert all(share == sorted(share) for share in split)


def test_the_heaviest_jobs_are_spread_over_the_workers() -> None:
    jobs = [job("a", 7), job("b", 6.5), job("c", 5.5), job("d", 4), job("e", 0.5)]
    assert shares(jobs, 2) == [[0, 3, 4], [1, 2]]  # 11.5 then 12


def test_cores_is_this_process_share_of_the_machine() -> None:
    assert cores() == len(os.sched_getaffinity(0))


@pytest.mark.parametrize("workers", [1, 3])
def test_results_come_back_in_job_order_from_this_process_or_forked_ones(workers: int) -> None:
    jobs = [Job(str(i), lambda i=i: Path(f"{i}-{os.getpid()}"), 1.0 + i) for i in range(5)]
    results = draw_all(jobs, workers)
    assert [p.name.split("-")[0] for p in results if p is not None] == ["0", "1", "2", "3", "4"]
    drawn_by = {p.name.split("-")[1] for p in results if p is not None}
    assert len(drawn_by) == workers and (str(os.getpid()) in drawn_by)


def test_a_figure_that_draws_nothing_gives_none() -> None:
    assert draw_all([Job("a", lambda: None), job("b")], 2) == [None, Path("b")]


def test_an_exception_in_a_child_is_raised_here_as_itself() -> None:
    def fails() -> Path:
        raise ValueError("no such column")

    with pytest.raises(ValueError, match="no such column"):
        draw_all([job("a"), Job("b", fails, 5.0)], 2)


def test_an_exception_that_does_not_pickle_comes_back_as_its_type_and_message() -> None:
    class Local(Exception):  # a local class cannot be pickled
        pass

    def fails() -> Path:
        raise Local("drawn\n  badly")

    with pytest.raises(FigureFailed, match=r"^Local: drawn badly$"):
        draw_all([job("a"), Job("b", fails, 5.0)], 2)


def test_a_child_that_dies_is_named_with_its_figures() -> None:
    def dies() -> Path:
        os._exit(3)

    with pytest.raises(DrawerDied, match=r"figures b ended \(exit 3\)"):
        draw_all([job("a"), Job("b", dies, 5.0)], 2)
