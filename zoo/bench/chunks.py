"""trainer.steps_per_call=K through the real loop (zoo.loop.fit) against the naive one-step-per-call JAX loop."""
import os
import time

import jax
from omegaconf import OmegaConf

from zoo.bench.reference import DROPOUT, naive_loop
from zoo.bench.steps import LOGGING, reference_for
from zoo.bench.util import compose_cfg, interleave, median, ratios, row
from zoo.loop import fit
from zoo.run_logger import RunLogger
from zoo.train import build


def chunk_overrides(kind: str, sizes) -> list:
    if kind == "linear":  # batch 32 on diabetes
        return ["model=linear", "dataset=diabetes", "trainer.batch_size=32", "trainer.eval_every=0", *LOGGING]
    return ["model=mlp", f"model.hidden=[{','.join(map(str, sizes.chunk_mlp_hidden))}]", "dataset=digits",
            f"model.dropout={DROPOUT}", "trainer.eval_every=0", *LOGGING]  # conf/trainer/default.yaml batch size


def chunk_benchmarks(kind: str, sizes, where) -> list:
    out_dir = os.path.join(where.work, f"chunks_{kind}")
    cfg = compose_cfg(chunk_overrides(kind, sizes), where.data_dir, out_dir, where.cache_dir)
    run = build(cfg)
    compiled, mode, stream = run.compiled, run.compiled.mode, run.stream
    n = sizes.chunk_steps[kind]
    logger = RunLogger(out_dir, cfg.logger, n)
    box = {"zoo": mode.put_state(run.host_state)}
    ref_state, ref_step = reference_for(kind, cfg, run)
    box["ref"] = ref_state
    train = run.data.splits["train"]

    def zoo_loop(k):
        trainer = OmegaConf.merge(cfg.trainer, {"steps_per_call": k})

        def go():
            box["zoo"] = fit(box["zoo"], compiled, run.feed, run.eval_sets, trainer, n, logger)[0]
            return box["zoo"]

        return go

    def naive():
        box["ref"] = naive_loop(box["ref"], ref_step, train.x, train.y, stream.batch_size, n, cfg.trainer.log_every,
                                seed=cfg.seed)
        return box["ref"]

    fns = {"naive": naive, **{f"K={k}": zoo_loop(k) for k in sizes.chunk_ks}}
    first_call = {}
    for name, fn in fns.items():  # the first run of each compiles its chunk shapes
        start = time.perf_counter()
        jax.block_until_ready(fn())
        first_call[name] = time.perf_counter() - start
    t = interleave(fns, sizes.chunk_rounds, warmup=0)
    logger.close("r2")

    sps = {name: [n / v for v in t[name]] for name in fns}
    rows = [row(f"chunking/{kind}/naive", sps["naive"], "steps/s",
                note=f"pure JAX, 1 step/call, batch {stream.batch_size}, {n} steps/round")]
    # compile estimate: the first run minus a steady run; break-even: run length from which K beats K=1
    compile_s = {name: max(first_call[name] - median(t[name]), 0.0) for name in fns}
    step_s = {name: 1 / median(sps[name]) for name in fns}
    first = f"K={sizes.chunk_ks[0]}"
    best = None
    for k in sizes.chunk_ks:
        name = f"K={k}"
        vs_naive = ratios(t["naive"], t[name])
        saved = step_s[first] - step_s[name]
        extra = compile_s[name] - compile_s[first]
        break_even = (max(extra, 0.0) / saved if saved > 0 else None) if name != first else 0
        rows.append(row(f"chunking/{kind}/{name}", vs_naive, "x naive",
                        note=f"{median(sps[name]):,.0f} steps/s; compile ~{compile_s[name]:.1f} s"
                             + ("" if name == first else "; beats " + first + (
                                 f" after {break_even:,.0f} steps" if break_even is not None else " never")),
                        steps_per_s=sps[name], first_run_s=first_call[name], compile_s=compile_s[name],
                        break_even_steps=break_even))
        if best is None or median(vs_naive) > median(best[1]):
            best = (k, vs_naive)
    rows.append(row(f"chunking/{kind}/best", best[1], "x naive", target=(">=", 5.0 if kind == "linear" else 1.5),
                    note=f"best K={best[0]} (log_every {cfg.trainer.log_every})", best_k=best[0]))
    return rows
