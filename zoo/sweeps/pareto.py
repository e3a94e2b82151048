"""Multi-objective sweeps: the Pareto front of the completed jobs, as text and as a plot of the first two aims.

A job is on the front when no other job is at least as good in every objective and better in one.
"""
import os


def first(objective):
    return objective[0] if isinstance(objective, list) else objective


def columns(names: list) -> list:
    return [f"objective_{i + 1}" for i in range(len(names))]


def front(rows: list, directions: list) -> list:
    """The rows (completed, one value per direction) that no other row dominates."""
    signs = [1.0 if d == "minimize" else -1.0 for d in directions]  # after the sign, smaller is better
    costs = [[sign * v for sign, v in zip(signs, r["objective"])] for r in rows]

    def dominates(a, b):
        return all(x <= y for x, y in zip(a, b)) and any(x < y for x, y in zip(a, b))

    return [r for r, c in zip(rows, costs) if not any(dominates(other, c) for other in costs)]


def front_text(s: dict) -> str:
    if not s["pareto"]:
        return "Pareto front: none (no job completed yet)."
    jobs = "; ".join(f"job {r['job']}: " + ", ".join(f"{n}={v:.4g}" for n, v in zip(s["objective"], r["objective"]))
                     + f" with `{' '.join(r['overrides'])}`" for r in s["pareto"])
    return f"Pareto front ({len(s['pareto'])} jobs): {jobs}"


def write_plot(s: dict, path: str) -> None:
    """The first objective against the second; the front is drawn as a line through its members."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    done = [r for r in s["rows"] if r["status"] == "completed"]
    if not done or len(s["objective"]) < 2:
        return
    fig, ax = plt.subplots(figsize=(5, 4))
    ax.scatter([r["objective"][0] for r in done], [r["objective"][1] for r in done], alpha=0.6, label="trial")
    members = sorted(s["pareto"], key=lambda r: r["objective"][0])
    ax.plot([r["objective"][0] for r in members], [r["objective"][1] for r in members], "o-", color="tab:red",
            label=f"Pareto front ({len(members)})")
    ax.set_xlabel(f"{s['objective'][0]} ({s['direction'][0]})")
    ax.set_ylabel(f"{s['objective'][1]} ({s['direction'][1]})")
    ax.legend()
    fig.tight_layout()
    tmp = f"{path}.{os.getpid()}.tmp"
    fig.savefig(tmp, format="png", dpi=100)
    plt.close(fig)
    os.replace(tmp, path)
