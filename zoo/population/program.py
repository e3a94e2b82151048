"""One compiled program for a whole population: the solo train and eval steps under jax.vmap.

The members' states, metric sums and hyperparameters are stacked on a leading population axis. The train
split lives on the device(s) once; each call receives only the members' batch indices (N, K, B) and masks
and gathers there, so the batches are exactly those of each member's solo run. With several devices the
population axis is sharded across them (parallel=sharded, or on CPU one device per core: see
zoo.population.train.member_devices): each device trains its share of the members.
"""
import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from zoo.data.feed import fold_mask
from zoo.parallel.compiler import compiler_options


class PopulationProgram:
    def __init__(self, devices: list, train_chunk, eval_step, train_split, zero_sums: dict, size: int):
        self.num_devices = len(devices)
        self.size = -(-size // self.num_devices) * self.num_devices  # padded with frozen copies to shard evenly
        self.zero_sums = zero_sums  # one member's, on the host
        mesh = Mesh(np.array(devices), ("population",))
        self.members = NamedSharding(mesh, P("population"))  # leading axis: one slice of members per device
        self.replicated = NamedSharding(mesh, P())
        self.rows = jax.device_put({"x": train_split.x, "y": train_split.y}, self.replicated)
        # every member gathers its (K, B) batches from the one resident split
        members_train = jax.vmap(train_chunk, in_axes=(0, 0, 0, None, 0))
        m, r = self.members, self.replicated
        self._train = jax.jit(members_train, in_shardings=(m, m, m, r, m), out_shardings=(m, m),
                              donate_argnums=(0, 1), compiler_options=compiler_options())
        self._eval = jax.jit(jax.vmap(eval_step, in_axes=(0, 0, None)), in_shardings=(m, m, r),
                             out_shardings=m, donate_argnums=1, compiler_options=compiler_options())

    def zero_accs(self):
        return self.put_members(stack([self.zero_sums] * self.size))

    def put_members(self, tree):
        return jax.device_put(tree, self.members)

    def put_replicated(self, tree):
        return jax.device_put(tree, self.replicated)

    def train_chunk(self, states, accs, idx, mask, hyper):
        return self._train(states, accs, {"idx": fold_mask(idx, mask)}, self.rows, hyper)

    def eval_step(self, states, accs, batch):
        return self._eval(states, accs, batch)


def stack(trees: list):
    """Host trees of one structure -> one tree of arrays with a leading member axis."""
    return jax.tree.map(lambda *leaves: np.stack([np.asarray(x) for x in leaves]), *trees)


def member(tree, i: int):
    """Member i's slice of a stacked host tree."""
    return jax.tree.map(lambda x: x[i], tree)
