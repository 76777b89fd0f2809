"""`hpctrain sweep report`: the ranking metric against each swept parameter, as one PNG (matplotlib, Agg)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def _numeric(values: list[Any]) -> bool:
    return all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)


def plot(summary: Any, out: Path) -> Path:
    """One panel per parameter; every trial with a metric is a point, the best one is ringed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    done = [t for t in summary.trials if t.metric is not None]
    params = list(summary.trials[0].params) if summary.trials else []
    fig, axes = plt.subplots(1, max(1, len(params)), figsize=(4.2 * max(1, len(params)), 3.6), squeeze=False)
    for axis, param in zip(axes[0], params, strict=False):
        values = [t.params[param] for t in done]
        metrics = [t.metric for t in done]
        if _numeric(values):
            xs = values
            positive = [v for v in values if v > 0]
            if positive and len(positive) == len(values) and max(positive) / min(positive) >= 10:
                axis.set_xscale("log")
        else:
            labels = sorted({str(v) for v in values})
            xs = [labels.index(str(v)) for v in values]
            axis.set_xticks(range(len(labels)), labels)
        axis.scatter(xs, metrics, color="tab:blue", alpha=0.8)
        if summary.best is not None:
            best_value = summary.best.params[param]
            best_x = (
                best_value if _numeric(values) else sorted({str(v) for v in values}).index(str(best_value))
            )
            axis.scatter([best_x], [summary.best.metric], s=160, facecolors="none", edgecolors="tab:red")
        axis.set_xlabel(param)
        axis.set_ylabel(summary.metric)
        axis.grid(True, alpha=0.3)
    better = "lower" if summary.mode == "min" else "higher"
    fig.suptitle(
        f"sweep {summary.name}: {len(done)}/{len(summary.trials)} trials with {summary.metric} "
        f"({better} is better; best ringed)",
        fontsize=10,
    )
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out
