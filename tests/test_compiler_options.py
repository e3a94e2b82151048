"""The zoo's train calls compile with its XLA:CPU options (zoo.parallel.compiler)."""
import re

import jax

from zoo.train import build


def compiled_train_call(run) -> str:
    compiled = run.compiled
    leaves = jax.tree.leaves(compiled.mode.put_state(run.host_state))
    k = compiled.steps_per_call if compiled.steps_per_call > 1 else 1
    return compiled.train_chunk.lower(leaves, compiled.put_sums(compiled.zero_sums),
                                      *run.feed.args(0, min(k, 4), pad_to=min(k, 4))).compile().as_text()


def test_the_train_call_copies_no_parameter(make_cfg):
    # two hidden layers: the second's weight and the head's are each read by a forward and an input-gradient
    # matmul before the optimizer overwrites them, which XLA:CPU's default copy insertion copies every step
    run = build(make_cfg("debug=smoke", "model=mlp", "model.hidden=[32,32]", "model.dropout=0.1"))
    text = compiled_train_call(run)
    copied = {tuple(map(int, dims.split(","))) for dims in re.findall(r"= f32\[([\d,]+)\]\{[\d,]*\} copy\(", text)}
    parameters = {tuple(x.shape) for x in jax.tree.leaves(run.host_state.params)}
    assert (32, 32) in parameters and not copied & parameters


def test_convolutions_and_matmuls_are_xlas_own(make_cfg):
    # 32 and 64 channels: YNNPACK would take these convolutions (not those of 4 and 8)
    text = compiled_train_call(build(make_cfg("debug=smoke", "model=cnn", "model.channels=[32,64]", "model.dense=16")))
    assert "convolution(" in text and "__ynn_fusion" not in text
