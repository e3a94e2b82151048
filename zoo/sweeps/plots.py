"""summary.png: the objective against each swept parameter, or a multi-objective sweep's Pareto front."""
import math
import re

from zoo.files import replacing


def natural(text: str) -> list:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", text)]


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: str) -> None:
    with replacing(path) as staging:
        fig.savefig(staging, format="png", dpi=100)
    _pyplot().close(fig)


def write_plot(s: dict, path: str) -> None:
    """Objective against each swept parameter; a log axis where positive values span a factor of 20 or more,
    unless the search drew them from a linear interval (s["linear"])."""
    if isinstance(s["objective"], list):
        return write_pareto_plot(s, path)
    plt = _pyplot()
    done = [r for r in s["rows"] if r["status"] == "completed"]
    if not s["params"] or not done:
        return
    n = len(s["params"])
    cols, rows = min(n, 3), math.ceil(n / 3)
    fig, axes = plt.subplots(rows, cols, figsize=(4 * cols, 3.2 * rows), squeeze=False, sharey=True)
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    for ax, key in zip(axes.flat, s["params"]):
        values = [r["params"].get(key, "") for r in done]
        try:
            xs = [float(v) for v in values]
            if min(xs) > 0 and max(xs) / min(xs) >= 20 and key.lstrip("+~") not in s.get("linear", ()):
                ax.set_xscale("log")
        except ValueError:  # categorical: one tick per choice
            labels = sorted(set(values), key=natural)
            xs = [labels.index(v) for v in values]
            ax.set_xticks(range(len(labels)), labels, rotation=30, ha="right", fontsize=8)
            ax.set_xlim(-0.5, len(labels) - 0.5)
        ax.scatter(xs, [r["objective"] for r in done], alpha=0.8)
        ax.scatter(xs[0], done[0]["objective"], marker="*", s=200, color="tab:red", label="best")
        ax.set_xlabel(key)
    for row in axes:
        row[0].set_ylabel(f"{s['objective']} ({s['direction']})")
    axes[0][0].legend()
    counts = {st: sum(r["status"] == st for r in s["rows"]) for st in ("failed", "pruned", "stopped")}
    stopped = f", {counts['stopped']} stopped" if counts["stopped"] else ""
    fig.suptitle(f"{len(done)} completed, {counts['pruned']} pruned{stopped}, {counts['failed']} failed", fontsize=9)
    fig.tight_layout()
    _save(fig, path)


def write_pareto_plot(s: dict, path: str) -> None:
    """The first objective against the second; the front is drawn as a line through its members."""
    done = [r for r in s["rows"] if r["status"] == "completed"]
    if not done or len(s["objective"]) < 2:
        return
    fig, ax = _pyplot().subplots(figsize=(5, 4))
    ax.scatter([r["objective"][0] for r in done], [r["objective"][1] for r in done], alpha=0.6, label="trial")
    members = sorted(s["pareto"], key=lambda r: r["objective"][0])
    ax.plot([r["objective"][0] for r in members], [r["objective"][1] for r in members], "o-", color="tab:red",
            label=f"Pareto front ({len(members)})")
    ax.set_xlabel(f"{s['objective'][0]} ({s['direction'][0]})")
    ax.set_ylabel(f"{s['objective'][1]} ({s['direction'][1]})")
    ax.legend()
    fig.tight_layout()
    _save(fig, path)
