"""Privacy benchmark: `python -m zoo.bench.privacy [--quick] [--out privacy.json]` prints a table, writes JSON.

dp_step/{mlp,cnn}: a DP-SGD step against an ordinary step at batch 128 on digits, interleaved rounds; the DP
step computes its Poisson batch's padded rows, so the row also reports the cost at the same 128 rows.
accuracy/digits_mlp/{non_private,eps=1,eps=3,eps=8}: test accuracy at delta 1e-5, each with the learning rate
picked by accuracy on a validation split carved from train (never by test accuracy).
"""
import argparse
import json
import os
import sys
import tempfile

from zoo.bench.util import compose_cfg, interleave, median, ratios, row

SECTIONS = ("dp_step", "accuracy")
QUIET = ["logger.progress=false", "logger.tensorboard=false", "logger.plot=false", "checkpoint.enabled=false"]
STEP_MODELS = {"mlp": ["model=mlp"], "cnn": ["model=cnn", "model.batch_norm=false"]}
EPSILONS = (None, 1, 3, 8)  # None: non-private
LEARNING_RATES = (1e-3, 5e-3)


def dp_step_rows(kind: str, rounds: int, steps: int, data_dir: str, work: str) -> list:
    import jax

    from zoo.train import build

    common = [*STEP_MODELS[kind], "trainer.batch_size=128", "trainer.steps_per_call=1", *QUIET]
    plain = build(compose_cfg(common, data_dir, os.path.join(work, "plain")))
    private = build(compose_cfg([*common, "privacy=dpsgd", "privacy.noise_multiplier=1.0"], data_dir,
                                os.path.join(work, "private")))
    box = {}

    def steps_of(name, run, feed=None):
        mode, compiled = run.compiled.mode, run.compiled
        chunks = [(feed or run.feed).args(s, 1) for s in range(steps)]
        # host copies: each timed loop donates its own state buffers
        box[name] = (jax.tree.leaves(mode.put_state(jax.device_get(run.host_state))),  # leaves, as zoo.loop keeps
                     compiled.put_sums(compiled.zero_sums))

        def go():
            state, acc = box[name]
            for chunk in chunks:
                state, acc = compiled.train_chunk(state, acc, *chunk)
            box[name] = (state, acc)
            return jax.block_until_ready(state)

        return go

    t = interleave({"plain": steps_of("plain", plain),
                    "dp": steps_of("dp", private),
                    "dp_same_rows": steps_of("dp_same_rows", private, plain.feed)}, rounds)
    ms = {name: 1e3 * median(v) / steps for name, v in t.items()}
    return [row(f"dp_step/{kind}", ratios(t["dp"], t["plain"]), "x", target=("<=", 2.0),
                note=f"DP {ms['dp']:.2f} ms ({private.stream.rows} rows, 128 expected) vs {ms['plain']:.2f} ms; "
                     f"at 128 rows {ms['dp_same_rows']:.2f} ms "
                     f"({median(ratios(t['dp_same_rows'], t['plain'])):.2f}x)",
                ms_per_step=ms)]


def accuracy_rows(quick: bool, data_dir: str, work: str) -> list:
    from zoo.train import train

    rows = []
    epsilons, rates = (EPSILONS[:1] + EPSILONS[2:3], LEARNING_RATES[1:2]) if quick else (EPSILONS, LEARNING_RATES)
    for eps in epsilons:
        trials = []
        for lr in rates:
            overrides = ["model=mlp", "dataset.validation_fraction=0.1", f"optimizer.learning_rate={lr}",
                         "trainer.eval_every=0", "trainer.log_every=100", *QUIET]
            if quick:
                overrides.append("trainer.max_steps=4")
            if eps is not None:
                overrides += ["privacy=dpsgd", f"privacy.target_epsilon={eps}", "privacy.delta=1e-5"]
            name = f"eps={eps}" if eps is not None else "non_private"
            results = train(compose_cfg(overrides, data_dir, os.path.join(work, f"{name.replace('=', '')}_lr{lr}")))
            trials.append((results["validation"]["accuracy"], lr, results))
        val, lr, best = max(trials, key=lambda t: t[0])
        privacy = best.get("privacy")
        note = (f"lr {lr} of {list(rates)} by validation accuracy {val:.4f}"
                + (f"; noise multiplier {privacy['noise_multiplier']:.3f}, epsilon {privacy['epsilon']:.3f}"
                   if privacy else ""))
        rows.append(row(f"accuracy/digits_mlp/{name}", best["test"]["accuracy"], "accuracy", note=note,
                        validation=[t[0] for t in trials], test=[t[2]["test"]["accuracy"] for t in trials]))
    return rows


def _print(r: dict) -> None:
    value = f"{r['value']:.4g}" if isinstance(r["value"], float) else r["value"]
    print(f"| {r['id']} | {value} | {r['unit']} | {r['target'] or ''} | {r['note']} |", flush=True)


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(prog="python -m zoo.bench.privacy", description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="tiny work: every section, in seconds")
    p.add_argument("--out", default="privacy.json")
    p.add_argument("--data-dir", default=os.environ.get("TFDS_DATA_DIR", "~/tensorflow_datasets"))
    p.add_argument("--only", nargs="+", choices=SECTIONS, default=SECTIONS)
    args = p.parse_args(sys.argv[1:] if argv is None else argv)
    data_dir, rows = os.path.expanduser(args.data_dir), []
    with tempfile.TemporaryDirectory(prefix="zoo_privacy_") as work:
        for kind in STEP_MODELS if "dp_step" in args.only else ():
            rows += dp_step_rows(kind, 2 if args.quick else 7, 2 if args.quick else 20, data_dir, work)
            _print(rows[-1])
        for r in accuracy_rows(args.quick, data_dir, work) if "accuracy" in args.only else ():
            rows.append(r)
            _print(r)
    with open(args.out, "w") as f:
        json.dump({"rows": rows, "quick": args.quick}, f, indent=2)
    return {"rows": rows}


if __name__ == "__main__":
    main()
