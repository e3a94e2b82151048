"""Multi-objective sweeps: the Pareto front of the completed jobs and its text (zoo.sweeps.plots draws it).

A job is on the front when no other job is at least as good in every objective and better in one.
"""
from zoo.sweeps.jobs import jobs_text


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
        return "Pareto front: none, as no job has completed."
    members = "; ".join(_member_text(r, s["objective"]) for r in s["pareto"])
    return f"Pareto front ({jobs_text(len(s['pareto']))}): {members}"


def _member_text(r: dict, names: list) -> str:
    """One member, as the one-objective sweep's best job: its objectives, the test metrics beside them (a front
    chosen on validation reports test there), its overrides and where its run lies."""
    objectives = ", ".join(f"{n}={v:.4g}" for n, v in zip(names, r["objective"]))
    test = ", ".join(f"{k}={v:.4g}" for k, v in r["metrics"].items() if k.startswith("test/") and k not in names)
    return (f"job {r['job']}: {objectives}{f' ({test})' if test else ''} with `{' '.join(r['overrides'])}`, "
            f"run directory {r['run_dir']}")
