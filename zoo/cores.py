"""The CPU cores this process may run on, counted without importing JAX (a refused command never needs it)."""
import os


def cpu_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
