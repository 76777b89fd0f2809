"""Parameter-server figures: staleness of the gradients, and each worker's throughput and wait share."""

from __future__ import annotations

from pathlib import Path

from hpctrain.report.columns import Points, by_step, by_time, column, seconds
from hpctrain.report.plotting import colormap, empty_panel, mark_events, save, sheet, time_scale
from hpctrain.report.series import RunSeries, finite
from hpctrain.rundir import TrainLine

# Workers drawn as lines of their own; more are summarised by the slowest and fastest few.
MAX_WORKER_LINES = 12


def _wait_share(lines: list[TrainLine], start: float | None, divisor: float) -> Points:
    """wait ÷ (compute + wait) of each worker line: the time a worker waits for the servers."""
    import numpy as np

    compute, wait = column(lines, "compute_s"), column(lines, "wait_s")
    with np.errstate(all="ignore"):
        share = wait / (compute + wait)
        share[(compute < 0) | (wait < 0)] = np.nan
    return Points.of(seconds(lines, start, divisor), share)


def _shown_workers(series: RunSeries) -> list[int]:
    """Every worker, or the slowest and fastest by mean samples/s when there are too many to tell apart."""
    workers = sorted(series.workers)
    if len(workers) <= MAX_WORKER_LINES:
        return workers

    def mean_rate(worker: int) -> float:
        rates = [r for r in (finite(t.samples_per_s) for t in series.workers[worker]) if r is not None]
        return sum(rates) / len(rates) if rates else 0.0

    ranked = sorted(workers, key=mean_rate)
    half = MAX_WORKER_LINES // 2
    return sorted(ranked[:half] + ranked[-half:])


def ps_figure(series: RunSeries, path: Path, title: str) -> Path | None:
    """Staleness (mean and max per log interval) against the server's version; each worker's samples/s
    and wait share against wall time, with dropped workers marked."""
    mean = by_step(series.train, "staleness_mean")
    worst = by_step(series.train, "staleness_max")
    if not mean and not worst and not series.workers:
        return None
    start = series.start_time
    last = [finite(t.time) for lines in series.workers.values() for t in lines[-1:]]
    span = max((t - start for t in last if t is not None and start is not None), default=0.0)
    divisor, time_label = time_scale(span)
    shown = _shown_workers(series)
    with sheet(15, 4.4, 1, 3) as drawing:
        stale, rate, share = drawing.axes[0]
        if mean or worst:
            for points, label, style in ((mean, "mean", "-"), (worst, "max", ":")):
                stale.plot(points.x, points.y, style, color="tab:red", label=f"staleness {label}")
            stale.set_xlabel("server version (updates applied)")
            stale.set_ylabel("versions behind")
            stale.set_title("staleness of the gradients the server applied")
            mark_events(stale, series, "step")
        else:
            empty_panel(stale, "no staleness recorded (synchronous, or not a parameter server)")
        colours = colormap("tab10" if len(shown) <= 10 else "tab20")
        for n, worker in enumerate(shown):
            lines = series.workers[worker]
            colour = colours(n % colours.N)
            points = by_time(lines, "samples_per_s", start, divisor)
            rate.plot(points.x, points.y, color=colour, label=f"worker {worker}")
            points = _wait_share(lines, start, divisor)
            share.plot(points.x, points.y, color=colour, label=f"worker {worker}")
        more = (
            f" ({len(shown)} of {len(series.workers)}: slowest and fastest)"
            if len(shown) < len(series.workers)
            else ""
        )
        rate.set_title("samples/s of each worker" + more)
        rate.set_ylabel("samples/s")
        rate.set_ylim(bottom=0)
        share.set_title("share of each worker's time waiting for the servers")
        share.set_ylabel("wait ÷ (compute + wait)")
        share.set_ylim(0, 1)
        for axis in (rate, share):
            axis.set_xlabel(time_label)
            mark_events(axis, series, "time", start, divisor)
            if not series.workers:
                empty_panel(axis, "no worker metrics files (metrics/worker-N.jsonl)")
        drawing.legend([stale, rate, share], columns=6)
        drawing.fig.suptitle(f"{title}: parameter server")
        return save(drawing.fig, path)
