"""The zoo's train call compiles with its XLA:CPU options (zoo.parallel.compiler)."""
import re

import jax

from zoo.train import build


def test_the_train_call_copies_no_parameter_and_uses_no_ynnpack_fusion(make_cfg):
    # two hidden layers: the second's weight and the head's are each read by a forward and an input-gradient
    # matmul before the optimizer overwrites them, which XLA:CPU's default copy insertion copies every step
    run = build(make_cfg("debug=smoke", "model=mlp", "model.hidden=[32,32]", "model.dropout=0.1"))
    compiled = run.compiled
    leaves = jax.tree.leaves(compiled.mode.put_state(run.host_state))
    text = compiled.train_chunk.lower(leaves, compiled.put_sums(compiled.zero_sums),
                                      *run.feed.args(0, 4, pad_to=4)).compile().as_text()
    copied = {tuple(map(int, dims.split(","))) for dims in re.findall(r"= f32\[([\d,]+)\]\{[\d,]*\} copy\(", text)}
    parameters = {tuple(x.shape) for x in jax.tree.leaves(run.host_state.params)}
    assert (32, 32) in parameters and not copied & parameters
    assert "__ynn_fusion" not in text
