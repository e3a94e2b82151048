"""In-process benchmarks on one Run built by zoo.train.build: compile times, the compiled step against the
hand-written reference, the real loop against the isolated step, and the input pipeline alone.
"""
import os
import time

import jax
import optax

from zoo.bench.reference import DROPOUT, make_reference
from zoo.bench.suite import TWIN_KINDS
from zoo.bench.torch_twin import torch_twin_row
from zoo.bench.util import compose_cfg, interleave, median, per_step, ratios, row, synthetic_images
from zoo.loop import fit
from zoo.run_logger import RunLogger
from zoo.train import build

LOGGING = ["logger.progress=false", "logger.plot=false"]  # JSONL + TensorBoard at log_every, as a real run


def case_overrides(kind: str, sizes) -> list:
    common = [f"trainer.batch_size={sizes.batch[kind]}", "trainer.eval_every=0", *LOGGING]
    if kind == "linear":
        return ["model=linear", "dataset=diabetes", *common]
    if kind == "mlp":
        return ["model=mlp", f"model.hidden=[{','.join(map(str, sizes.mlp_hidden))}]", "dataset=digits",
                f"model.dropout={DROPOUT}", *common]
    return ["model=cnn", f"model.channels=[{','.join(map(str, sizes.cnn_channels))}]", f"model.dropout={DROPOUT}",
            f"model.dense={sizes.cnn_dense}", "dataset=digits", *common]


def build_case(kind: str, sizes, where, out_dir: str):
    """(cfg, Run) through the real path; images are synthetic `sizes.image` arrays (MNIST-shaped by default)."""
    cfg = compose_cfg(case_overrides(kind, sizes), where.data_dir, out_dir, where.cache_dir)
    if kind == "linear":
        return cfg, build(cfg)
    with synthetic_images(sizes.image, sizes.n_train):
        return cfg, build(cfg)


def reference_for(kind: str, cfg, run):
    tx = optax.adamw(cfg.optimizer.learning_rate, weight_decay=cfg.optimizer.weight_decay)
    hidden = (cfg.model.dense,) if kind == "cnn" else tuple(cfg.model.get("hidden", ()))
    return make_reference(kind, run.data.task, run.data.input_shape, run.data.out_features, tx, seed=cfg.seed,
                          hidden=hidden, cnn_channels=tuple(cfg.model.get("channels", ())))


def _aot_seconds(jitted, *args) -> float:
    """Trace + lower + compile. The executable lands in jit's cache, so the first real call reuses it."""
    start = time.perf_counter()
    jitted.lower(*args).compile()
    return time.perf_counter() - start


def step_benchmarks(kind: str, sizes, where) -> list:
    out_dir = os.path.join(where.work, f"steps_{kind}")
    cfg, run = build_case(kind, sizes, where, out_dir)
    compiled, mode, stream = run.compiled, run.compiled.mode, run.stream
    state, acc = mode.put_state(run.host_state), compiled.put_sums(compiled.zero_sums)
    batch_size = stream.batch_size
    ref_state, ref_step = reference_for(kind, cfg, run)

    # 4. compile times (zoo train and eval step; the reference step for comparison)
    host = [stream.chunk(s, 1) for s in range(max(sizes.steps[kind], sizes.loop_steps.get(kind, 0)))]
    chunks = [run.feed.args(s, 1) for s in range(len(host))]  # what the loop hands a one-step call
    ref_batches = [(jax.device_put(h["x"][0]), jax.device_put(h["y"][0])) for h in host]
    eval_batch = run.eval_sets["test"][0][0]
    train_s = _aot_seconds(compiled.train_chunk, jax.tree.leaves(state), acc, *chunks[0])
    eval_s = _aot_seconds(compiled.eval_step, state, mode.put_replicated(compiled.zero_sums), eval_batch)
    ref_s = _aot_seconds(ref_step, ref_state, *ref_batches[0])
    rows = [row(f"compile/{kind}/train", train_s, "s", note=f"reference step {ref_s:.2f} s", reference_s=ref_s),
            row(f"compile/{kind}/eval", eval_s, "s", note=f"eval batch {eval_batch['x'].shape[0]}")]

    # 1. the compiled step against the hand-written one, interleaved, same device batches
    box = {"zoo": (jax.tree.leaves(state), acc), "ref": ref_state}  # the state's leaves, as the loop keeps it
    n = sizes.steps[kind]

    def zoo_steps(count):
        """The compiled step alone over the first `count` device-resident chunks."""

        def go():
            s, a = box["zoo"]
            for chunk in chunks[:count]:
                s, a = compiled.train_chunk(s, a, *chunk)
            box["zoo"] = (s, a)
            return s, a

        return go

    def ref_steps():
        s = box["ref"]
        for x, y in ref_batches[:n]:
            s, metrics = ref_step(s, x, y)
        box["ref"] = s
        return s, metrics

    t = interleave({"zoo": zoo_steps(n), "ref": ref_steps}, sizes.rounds[kind])
    zoo_ms, ref_ms = [1e3 * v for v in per_step(t["zoo"], n)], [1e3 * v for v in per_step(t["ref"], n)]
    rows.append(row(f"step_ratio/{kind}", ratios(t["ref"], t["zoo"]), "x",
                    target=(">=", 0.95 if kind != "linear" else 0.8),
                    note=f"zoo {median(zoo_ms):.3f} vs reference {median(ref_ms):.3f} ms/step, batch {batch_size}",
                    zoo_ms=zoo_ms, ref_ms=ref_ms, steps_per_round=n))
    if kind in TWIN_KINDS:
        rows.append(torch_twin_row(kind, cfg, run, host[:n], zoo_steps(n), sizes.rounds[kind]))
    if kind not in sizes.loop_steps:
        return rows

    # 2. + 3. the real loop, the isolated step and the pipeline alone, over the same N batches
    n = sizes.loop_steps[kind]
    logger = RunLogger(out_dir, cfg.logger, n)

    def loop():
        s = fit(compiled.state(box["zoo"][0]), compiled, run.feed, run.eval_sets, cfg.trainer, n, logger)[0]
        box["zoo"] = (jax.tree.leaves(s), box["zoo"][1])
        return s

    def pipeline():
        return [run.feed.args(s, 1) for s in range(n)]

    t = interleave({"loop": loop, "isolated": zoo_steps(n), "pipeline": pipeline}, sizes.loop_rounds)
    logger.close("accuracy")
    loop_sps = [n / v for v in t["loop"]]
    rows.append(row(f"loop_efficiency/{kind}", ratios(t["isolated"], t["loop"]), "x", target=(">=", 0.90),
                    note=f"fit {median(loop_sps):,.0f} steps/s, log_every {cfg.trainer.log_every}",
                    loop_steps_per_s=loop_sps, isolated_s=t["isolated"]))
    pipe_eps = [n * batch_size / v for v in t["pipeline"]]
    rows.append(row(f"pipeline/{kind}", ratios(t["isolated"], t["pipeline"]), "x",
                    note=f"{median(pipe_eps):,.0f} ex/s alone vs "
                         f"{n * batch_size / median(t['isolated']):,.0f} ex/s consumed",
                    pipeline_examples_per_s=pipe_eps))
    return rows
