"""Parallel modes choose how the same step is compiled and where batches go; nothing else changes."""
import collections
import os
import warnings
from typing import Optional

import jax

from zoo.cores import cpu_cores
from zoo.errors import UserError
from zoo.parallel.distributed import check_num_processes, init_distributed
from zoo.parallel.pmap import PmapMode
from zoo.parallel.sharded import ShardedMode
from zoo.parallel.single import SingleDevice


# the CPU device count this process's JAX was started with by a population launcher or a run's
# parallel.cpu_devices: runs with cpu_devices=null then see one device, as they do alone
_cpu_devices_set = None


def cpu_devices_for_populations(at_least: int = 0) -> int | None:
    """Start this process's JAX with one CPU device per core, or `at_least` (the most parallel.cpu_devices a
    sweep's job asks for), for populations to spread their members over (hydra/launcher=population calls it
    before any JAX work). Runs with parallel.cpu_devices=null still get the one CPU device they get in any
    other process. Returns the device count set, or None if JAX had started already, or the count was chosen
    (XLA_FLAGS, JAX_NUM_CPU_DEVICES, jax_num_cpu_devices): then the devices it has decide."""
    global _cpu_devices_set
    if _cpu_devices_set is None and (
            "xla_force_host_platform_device_count" in os.environ.get("XLA_FLAGS", "")
            or jax.config.jax_num_cpu_devices >= 0):
        return None  # the user (or a test harness) chose the count
    count = max(cpu_cores(), at_least)
    try:
        jax.config.update("jax_num_cpu_devices", count)
    except RuntimeError:
        return None
    _cpu_devices_set = count
    return count


def select_devices(cfg, distributed=None, run_dir=None) -> list:
    """Devices for this run, across all processes; call before any other JAX work.

    `cpu_devices=N` simulates N CPU devices per process (a laptop can try pmap and sharded). `run_dir`: a training
    run's, where its processes hold their distributed.process_id (zoo.parallel.distributed.claim_process_id).
    """
    global _cpu_devices_set
    n = cfg.cpu_devices
    if n is not None:
        count = max(n, _cpu_devices_set or 0)  # not fewer than the population launcher set: this job may run first
        try:
            jax.config.update("jax_num_cpu_devices", count)
            _cpu_devices_set = count
        except RuntimeError:
            pass  # JAX already started in this process; the devices it has decide below
    if distributed is not None:
        init_distributed(distributed, run_dir)
    if jax.process_count() > 1:
        counts = collections.Counter(d.process_index for d in jax.devices())
        if len(set(counts.values())) > 1:  # every process holds an equal share of each global batch
            have = ", ".join(f"process {p} has {c}" for p, c in sorted(counts.items()))
            raise UserError(f"every process of a multi-process run needs the same number of devices ({have}); "
                            "give every process the same parallel.cpu_devices (or the same accelerators).")
        check_num_processes(distributed)
        return sorted(jax.devices(), key=lambda d: (d.process_index, d.id))  # contiguous per process
    if n is None:
        if _cpu_devices_set and jax.default_backend() == "cpu":
            return jax.local_devices()[:1]  # the extra devices are a population's or an earlier run's: one, as alone
        return jax.local_devices()
    if jax.default_backend() != "cpu":
        warnings.warn(f"parallel.cpu_devices={n} is ignored on {jax.default_backend()}; using all local devices.")
        return jax.local_devices()
    devices = jax.local_devices(backend="cpu")
    if len(devices) < n:
        raise UserError(f"parallel.cpu_devices={n} but this process already started JAX with {len(devices)} CPU "
                        f"device(s); lower parallel.cpu_devices or start a fresh process (a multirun's jobs share "
                        f"one: list the largest parallel.cpu_devices first).")
    return devices[:n]


def make_mode(cfg, devices: list):
    if jax.process_count() > 1 and cfg.mode != "sharded":
        raise UserError(f"parallel.mode={cfg.mode} runs in one process; multi-process runs need "
                        "parallel.mode=sharded.")
    if cfg.fsdp and cfg.mode != "sharded":
        raise UserError(f"parallel.fsdp=true shards parameters over a mesh, which parallel.mode={cfg.mode} has "
                        "not; use parallel=sharded or parallel.fsdp=false.")
    if cfg.mode == "none":
        return SingleDevice(devices[:1])
    if cfg.mode == "pmap":
        return PmapMode(devices)
    return ShardedMode(devices, fsdp=cfg.fsdp)


def check_batch_divides(batch_size: int, num_devices: int, train_examples: Optional[int] = None) -> None:
    """`train_examples`: the train split's size, which no size named may exceed (it would be refused next)."""
    if batch_size % num_devices:
        if train_examples is not None and train_examples < num_devices:  # no batch size fits: each named is refused
            n = f"{train_examples} example{'s' * (train_examples != 1)}"
            raise UserError(f"trainer.batch_size={batch_size} does not split evenly across {num_devices} devices, "
                            f"and the train split ({n}) holds fewer than one example per device; run on at most "
                            f"{n.replace('example', 'device')} (parallel.cpu_devices={train_examples} on CPU) or "
                            "train on more examples.")
        lower = batch_size - batch_size % num_devices
        upper = lower + num_devices
        if train_examples is not None and upper > train_examples and lower:
            sizes = f"{lower}"
        else:
            sizes = f"{lower} or {upper}" if lower else f"{num_devices}"
        raise UserError(f"trainer.batch_size={batch_size} does not split evenly across {num_devices} devices; "
                        f"use {sizes}.")


def round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple
