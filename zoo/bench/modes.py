"""Steps/s and compile time per parallel mode, and the cost of checkpointing, in one process.

    python -m zoo.bench.modes [--devices 8] [--steps 200] [--quick]

The devices are simulated CPU devices: these figures show the modes work and what their overhead is on
one CPU, not a speed-up. Checkpoint cost is steps/s with saves every N steps vs none, same run otherwise; those
steps/s are train()'s steps over its wall_time_s (build, compile and final evals included), not the loop's.
"""
import argparse
import json
import os
import tempfile
import time

BATCH = 64  # every mode's global batch: --devices must divide it


def _compose(overrides):
    from hydra import compose, initialize_config_dir

    from zoo.config import register_configs

    register_configs()
    conf = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir, "conf")
    with initialize_config_dir(config_dir=conf, version_base=None):
        return compose(config_name="train", overrides=overrides)


class _Quiet:
    def log(self, *a, **k):
        pass

    def progress(self, *a, **k):
        pass


def time_mode(base: list, steps: int) -> dict:
    """Compile time of the train chunk and steady steps/s over `steps` steps (after one warm step)."""
    import jax

    from zoo.loop import fit
    from zoo.train import build

    cfg = _compose(base + [f"trainer.max_steps={steps + 1}"])
    run = build(cfg)
    mode, compiled = run.compiled.mode, run.compiled
    state, acc = mode.put_state(run.host_state), compiled.put_sums(compiled.zero_sums)
    t0 = time.perf_counter()
    state, acc = compiled.train(state, acc, *run.feed.args(0, 1))
    jax.block_until_ready(acc)
    compile_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    state, *_ = fit(state, compiled, run.feed, run.eval_sets, cfg.trainer, steps + 1, _Quiet(), start_step=1)
    jax.block_until_ready(state)
    return {"compile_s": compile_s, "steps_per_s": steps / (time.perf_counter() - t0)}


def time_checkpointing(base: list, steps: int, every: int) -> dict:
    from zoo.train import train

    rates = {}
    variants = (("off", ["checkpoint.enabled=false"]), (f"every {every}", [f"trainer.checkpoint_every={every}"]))
    for label, extra in variants:
        with tempfile.TemporaryDirectory() as out:
            results = train(_compose(base + extra + [f"trainer.max_steps={steps}", f"paths.output_dir={out}"]))
            rates[label] = results["steps"] / results["wall_time_s"]
    return rates


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--devices", type=int, default=8)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--checkpoint-every", type=int, default=50)
    parser.add_argument("--quick", action="store_true", help="tiny sizes: checks that every row runs")
    parser.add_argument("--out", default="bench_modes.json")
    args = parser.parse_args(argv)
    for flag, count in (("--steps", args.steps), ("--checkpoint-every", args.checkpoint_every)):
        if count < 1:  # 0 timed nothing (0.0 steps/s); a negative count was refused by the run, in a traceback
            parser.error(f"{flag} must be at least 1, got {count}")
    divisors = [d for d in range(1, BATCH + 1) if BATCH % d == 0]
    if args.devices not in divisors:  # before any row: each mode's run would stop at it mid-table
        parser.error(f"--devices {args.devices} does not split the benchmark's batch of {BATCH} examples; "
                     f"use {', '.join(map(str, divisors[:-1]))} or {divisors[-1]}")
    import jax

    try:
        jax.config.update("jax_num_cpu_devices", args.devices)
    except RuntimeError:
        pass  # JAX already started (e.g. under pytest): its devices are used
    steps = 3 if args.quick else args.steps
    base = ["logger=quiet", "paths.compilation_cache_dir=null", "model.dropout=0.0", f"trainer.batch_size={BATCH}",
            "trainer.eval_every=0", "trainer.log_every=50", "trainer.epochs=1000", "checkpoint.enabled=false",
            "trainer.steps_per_call=1"]  # the first call below compiles the only chunk shape
    if args.quick:
        base += ["model.hidden=[16]"]
    modes = {"none": ["parallel=none"], "pmap": ["parallel=pmap"], "sharded": ["parallel=sharded"],
             "sharded+fsdp": ["parallel=sharded", "parallel.fsdp=true"]}
    rows = {}
    for name, overrides in modes.items():
        rows[name] = time_mode(base + overrides + [f"parallel.cpu_devices={args.devices}"], steps)
        print(f"{name:14s} compile {rows[name]['compile_s']:6.2f} s   {rows[name]['steps_per_s']:8.1f} steps/s",
              flush=True)
    ckpt = time_checkpointing([b for b in base if not b.startswith("checkpoint.")], max(steps, 2),
                              min(args.checkpoint_every, max(steps // 2, 1)))
    off, on = ckpt.values()
    print(f"checkpointing   steps/s off {off:.1f}, {list(ckpt)[1]}: {on:.1f} (ratio {on / off:.2f})")
    result = {"devices": args.devices, "steps": steps, "modes": rows, "checkpointing": ckpt}
    with open(args.out, "w") as f:
        json.dump(result, f, indent=2)
    return result


if __name__ == "__main__":
    main()
