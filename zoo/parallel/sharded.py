import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from zoo.parallel.compiler import compiler_options
from zoo.parallel.cpu_collectives import serialised_on_cpu
from zoo.parallel.distributed import local_rows, to_host


class ShardedMode:
    """parallel=sharded: jax.jit over a Mesh with axis `data`; the batch is split on it, the step untouched.

    With fsdp=True each parameter and optimizer-state array is also split along `data` (on its largest
    dimension that divides evenly); XLA inserts the gathers, and the maths is unchanged.
    """

    axis_name = None  # global arrays: the compiler inserts the collectives

    def __init__(self, devices, fsdp: bool = False):
        self.mesh = Mesh(np.array(devices), ("data",))
        self.num_devices = len(devices)
        self.program_copies = 1  # the lowered program is the global one, before XLA partitions it
        self.fsdp = fsdp
        self.replicated = NamedSharding(self.mesh, P())
        self.chunk_sharding = NamedSharding(self.mesh, P(None, "data"))  # (K, B, ...)
        self.batch_sharding = NamedSharding(self.mesh, P("data"))  # (B, ...)

    def prepare_model(self, model):
        return model

    def _leaf_sharding(self, x):
        if self.fsdp and np.ndim(x) > 0:
            dims = sorted(range(np.ndim(x)), key=lambda d: -np.shape(x)[d])
            for d in dims:
                if np.shape(x)[d] % self.num_devices == 0:
                    spec = [None] * np.ndim(x)
                    spec[d] = "data"
                    return NamedSharding(self.mesh, P(*spec))
        return self.replicated

    def state_sharding(self, state):
        return jax.tree.map(self._leaf_sharding, state)

    def compile(self, train_chunk, eval_step, state):
        state_sh = self.state_sharding(state)
        # A resident split is replicated, so each device gathers its columns of the (K, B) indices locally;
        # split by rows, every step would need a cross-device gather. The accumulator is not donated: one
        # placed zero accumulator starts every log interval.
        leaves_sh = jax.tree.leaves(state_sh)  # the train call takes the state's leaves (zoo.steps.over_leaves)
        train = jax.jit(train_chunk, in_shardings=(leaves_sh, self.replicated, self.chunk_sharding, self.replicated),
                        out_shardings=(leaves_sh, self.replicated), donate_argnums=0,
                        compiler_options=compiler_options())
        evaluate = jax.jit(eval_step, in_shardings=(state_sh, self.replicated, self.batch_sharding),
                           out_shardings=self.replicated, donate_argnums=1, compiler_options=compiler_options())
        return serialised_on_cpu(list(self.mesh.devices.flat), train, evaluate)

    # Every process holds the same host values (same data, same seed) and hands over only its share:
    # the rows of the batch its devices own, or the whole array where the sharding replicates it.
    def _put(self, x, sharding, batch_axis=None):
        x = np.asarray(x)
        local = x if batch_axis is None else local_rows(x, batch_axis)
        return jax.make_array_from_process_local_data(sharding, local, x.shape)

    def put_state(self, tree):
        tree = jax.device_get(tree)
        return jax.tree.map(lambda x, s: self._put(x, s) if s is self.replicated else jax.device_put(x, s),
                            tree, self.state_sharding(tree))

    def put_replicated(self, tree):
        return jax.tree.map(lambda x: self._put(x, self.replicated), jax.device_get(tree))

    put_rows = put_replicated  # (N, ...): each process places the whole split on its own devices

    def put_chunk(self, chunk):  # (K, B, ...) batches or (K, B) indices: each process places its columns
        return jax.tree.map(lambda x: self._put(x, self.chunk_sharding, batch_axis=1), chunk)

    def put_batch(self, batch):  # (B, ...)
        return jax.tree.map(lambda x: self._put(x, self.batch_sharding, batch_axis=0), batch)

    def get(self, tree):
        return jax.tree.map(to_host, tree)
