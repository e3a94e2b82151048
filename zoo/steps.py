"""One pure train step and one eval step. Parallel modes only choose how they are compiled and fed.

`axis_name` is set only under pmap, where each device holds a slice of the batch: gradients and metric
sums are then psum-med across it, so every mode computes the same global quantities.
"""
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from zoo.data.feed import PADDING_ROW
from zoo.data.pipeline import PADDING_STEP
from zoo.models.layers import DropoutDraws, draw_masks, replays_dropout, replaying, set_dropout_rate
from zoo.rng import step_key

# dropout masks of a whole call drawn ahead of its loop only up to this size (bytes: one per unit and step); per
# member of a population, which holds one set per member
PREDRAWN_MASKS_BYTES = 16 * 2 ** 20


def _add(a, b):
    return jax.tree.map(jnp.add, a, b)


def make_steps(graphdef, task, tx: optax.GradientTransformation, axis_name=None, unroll: bool = False,
               gradients=None, members: bool = False):
    """`gradients(state, batch) -> (grads reduced across devices, local metric sums, model_state)` replaces the
    mean-loss gradient when given (DP-SGD: zoo.privacy.gradients).

    `tx` is an optax transformation, or a function of hyperparameters returning one: then train_chunk takes the
    hyperparameters as its `hyper` argument (a population's members, each with its own, in one program), and a
    `dropout` entry among them sets the rate of the model's Dropout layers."""
    optimizer = (lambda hyper: tx) if isinstance(tx, optax.GradientTransformation) else tx

    def reduce(tree):
        return jax.lax.psum(tree, axis_name) if axis_name else tree

    def dropout_key(state, step):
        key = step_key(state.rng, step)
        if axis_name:  # independent dropout masks per device slice
            key = jax.random.fold_in(key, jax.lax.axis_index(axis_name))
        return key

    def forward(params, state, x, hyper, rngs):
        model = nnx.merge(graphdef, params, state.model_state, copy=True)
        if hyper is not None and "dropout" in hyper:
            set_dropout_rate(model, hyper["dropout"])
        return model(x, train=True, rngs=rngs), model

    def train_step(state, batch, hyper, masks=None):
        """`masks`: this step's dropout masks, drawn before the call's loop (see `predrawn_masks`)."""
        def loss_fn(params):
            if masks is None:
                rngs = nnx.Rngs(dropout=dropout_key(state, state.step))
                outputs, model = forward(params, state, batch["x"], hyper, rngs)
            else:
                with replaying(DropoutDraws(masks)):
                    outputs, model = forward(params, state, batch["x"], hyper, None)
            sums = task.sums(outputs, batch["y"], batch["mask"])
            # local sum / global count: the psum of these gradients is the global mean gradient
            loss = sums["loss_sum"] / reduce(sums["count"])
            return loss, (sums, nnx.split(model, nnx.Param, ...)[2])

        if gradients is None:
            (_, (sums, model_state)), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
            grads = reduce(grads)
        else:
            grads, sums, model_state = gradients(state, batch)
        updates, opt_state = optimizer(hyper).update(grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
        new_state = state.replace(params=params, model_state=model_state, opt_state=opt_state, step=state.step + 1)
        return new_state, reduce(sums)

    def predrawn_masks(state, x, k, hyper):
        """The dropout masks of a call's k steps, (k, ...) per Dropout call, or None. XLA:CPU fuses each mask's
        Threefry hash into both its forward and its backward use, so drawn inside the step every mask is hashed
        twice; drawn here it is hashed once, for all k steps in one pass. The masks are those each step would
        draw (step_key of steps state.step + i), so results do not change: only where the bits are computed."""
        if gradients is not None or jax.default_backend() != "cpu":
            return None
        if not replays_dropout(nnx.merge(graphdef, state.params, state.model_state, copy=True)):
            return None
        draws = DropoutDraws()
        with replaying(draws):
            jax.eval_shape(lambda p: forward(p, state, x, hyper, None)[0], state.params)
        if not draws.calls or k * sum(np.prod(shape) for shape, _ in draws.calls) > PREDRAWN_MASKS_BYTES:
            return None
        steps = state.step + jnp.arange(k, dtype=jnp.int32)
        return jax.vmap(lambda step: draw_masks(draws.calls, dropout_key(state, step)))(steps)

    def train_and_sum(carry, batch, hyper, masks=None):
        state, sums = train_step(carry[0], batch, hyper, masks)
        return state, _add(carry[1], sums)

    def step_or_skip(carry, batch, active, hyper):
        """XLA:CPU runs convolutions inside a conditional ~18x slower: compute, then keep or drop."""
        return jax.tree.map(lambda new, old: jnp.where(active, new, old), train_and_sum(carry, batch, hyper), carry)

    def train_chunk(state, acc, batches, rows=None, hyper=None):
        """K ordinary steps in one compiled call; batches are stacked (K, B, ...), or, with the train split
        resident on the device as `rows` {"x", "y"} (N, ...), indices {"idx"} (K, B) gathered here (-1: masked).

        `unroll` traces the K steps one after another instead of a loop: XLA:CPU runs convolutions
        inside a while loop ~15x slower (measured 290 ms vs 18 ms per CNN step). Its pass that puts a
        convolution into the dimension order of its fast (Eigen) kernel, ConvCanonicalization, visits only the
        entry computation, so the gradient convolutions in a loop body or a conditional's branch keep JAX's
        order and run in XLA's generic loops. Unrolling costs compile
        time that grows with K, so the loop stays the choice for everything else. Unrolled padding rows are
        computed and discarded; convnets default to K=1, which never pads.
        """
        if rows:  # masked and padding rows (zoo.data.feed.fold_mask) gather row 0, which their mask zeroes
            idx = batches["idx"]
            take = jnp.maximum(idx, 0)
            mask = jnp.where(idx >= 0, 1.0, jnp.where(idx == PADDING_ROW, PADDING_STEP, 0.0))
            batches = {"x": rows["x"][take], "y": rows["y"][take], "mask": mask}
        # a step runs unless the call pads with it (zoo.data.pipeline.PADDING_STEP): a DP-SGD step whose Poisson
        # sample holds no example runs too, its update the noise alone
        active = reduce(jnp.any(batches["mask"] >= 0, axis=1).astype(jnp.int32)) > 0  # (K,), same on every device
        batches = {**batches, "mask": jnp.maximum(batches["mask"], 0.0)}
        if unroll:
            for i in range(active.shape[0]):
                state, acc = step_or_skip((state, acc), jax.tree.map(lambda x: x[i], batches), active[i], hyper)
            return state, acc

        # A padding step (mask PADDING_STEP, see TrainStream.indices) changes nothing, so the active rows run first, in
        # their order, and the loop ends after them. No conditional in the step lets XLA:CPU drop the parameter copies
        # (zoo.parallel.compiler): 3.5% of an MLP step, where with the conditional it gained nothing. Vmapped
        # members would need a loop as long as the longest member's (and, spread over devices, a collective to
        # agree on it), so they keep all K iterations and skip the rest in a conditional, a select under vmap.
        order = jnp.argsort(~active, stable=True)
        count = jnp.sum(active)
        masks = predrawn_masks(state, batches["x"][0], active.shape[0], hyper)

        def step(i, carry):
            batch = jax.tree.map(lambda x: x[order[i]], batches)
            return train_and_sum(carry, batch, hyper, None if masks is None else jax.tree.map(lambda m: m[i], masks))

        if members or active.shape[0] == 1:  # a one-step call: XLA removes a loop of one static iteration
            return jax.lax.fori_loop(0, active.shape[0], lambda i, carry: jax.lax.cond(
                i < count, step, lambda i, carry: carry, i, carry), (state, acc))
        return jax.lax.fori_loop(0, count, step, (state, acc))

    def batch_sums(state, batch):
        model = nnx.merge(graphdef, state.params, state.model_state)
        return task.sums(model(batch["x"], train=False), batch["y"], batch["mask"])

    def eval_step(state, acc, batch):
        return _add(acc, reduce(batch_sums(state, batch)))

    def zero_sums(state, batch):
        """Zeros shaped like one batch's metric sums: the accumulator both loops start from."""
        shapes = jax.eval_shape(batch_sums, state, batch)
        return jax.tree.map(lambda s: np.zeros(s.shape, s.dtype), shapes)  # host: placed fresh each time

    return train_chunk, eval_step, zero_sums


class PackedSums:
    """Metric sums as one vector between train calls: `pack` a sums dict, `unpack` the vector (host or traced).

    Each array a jitted call takes and returns costs the call ~2 us on CPU (a function of one array against
    the same with five more scalars in and out: 6 against 17 us); a regression run's five sums were ~10 us of
    the linear model's ~45 us one-step call. The tasks' sums are all float32 (zoo.tasks: weighted by the mask)."""

    def __init__(self, zero_sums: dict):
        leaves, self.treedef = jax.tree.flatten(zero_sums)
        dtypes = {np.result_type(x) for x in leaves}
        assert len(dtypes) == 1, f"metric sums of one dtype pack without conversion, got {dtypes}"
        self.shapes = [np.shape(x) for x in leaves]
        self.bounds = np.cumsum([0] + [int(np.prod(shape)) for shape in self.shapes]).tolist()

    def pack(self, sums, xp=np):
        return xp.concatenate([xp.ravel(x) for x in jax.tree.leaves(sums)])

    def unpack(self, vector):
        parts = [vector[a:b].reshape(shape) for a, b, shape in zip(self.bounds, self.bounds[1:], self.shapes)]
        return jax.tree.unflatten(self.treedef, parts)


def over_leaves(train_chunk, treedef, sums: PackedSums):
    """train_chunk taking and returning the state's leaves (a list) instead of the TrainState, and the metric
    sums packed (`sums`).

    jit flattens a list of arrays in C++, but a TrainState holds nnx.State and nnx.Param nodes flattened by
    Python callbacks: measured ~20 us a call for the linear model (89 against 69 us a one-step call). The train
    loop keeps the leaves between calls and rebuilds the state only where it needs it."""

    def train_leaves(leaves, acc, data, rows=None):
        state, acc = train_chunk(jax.tree.unflatten(treedef, leaves), sums.unpack(acc), data, rows)
        return jax.tree.leaves(state), sums.pack(acc, jnp)

    return train_leaves
