import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P


class ShardedMode:
    """parallel=sharded: jax.jit over a Mesh with axis `data`; the batch is split on it, the step untouched.

    With fsdp=True each parameter and optimizer-state array is also split along `data` (on its largest
    dimension that divides evenly); XLA inserts the gathers, and the maths is unchanged.
    """

    axis_name = None  # global arrays: the compiler inserts the collectives

    def __init__(self, devices, fsdp: bool = False):
        self.mesh = Mesh(np.array(devices), ("data",))
        self.num_devices = len(devices)
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
        train = jax.jit(train_chunk, in_shardings=(state_sh, self.replicated, self.chunk_sharding),
                        out_shardings=(state_sh, self.replicated), donate_argnums=(0, 1))
        evaluate = jax.jit(eval_step, in_shardings=(state_sh, self.replicated, self.batch_sharding),
                           out_shardings=self.replicated, donate_argnums=1)
        return train, evaluate

    def put_state(self, tree):
        return jax.device_put(tree, self.state_sharding(tree))

    def put_replicated(self, tree):
        return jax.device_put(tree, self.replicated)

    def put_chunk(self, chunk):
        return jax.device_put(chunk, self.chunk_sharding)

    def put_batch(self, batch):
        return jax.device_put(batch, self.batch_sharding)

    def get(self, tree):
        return jax.device_get(tree)
