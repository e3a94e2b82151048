"""One compiled program for a whole population: the solo train and eval steps under jax.vmap.

The members' states, metric sums and hyperparameters are stacked on a leading population axis. The train
split lives on the device(s) once; each call receives only the members' batch indices (N, K, B) and masks
and gathers there, so the batches are exactly those of each member's solo run. With several devices the
population axis is sharded across them (parallel=sharded, or on CPU one device per core: see
zoo.population.train.member_devices): each device trains its share of the members.
"""
import logging
import threading

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from zoo.data.feed import fold_mask
from zoo.parallel.compiler import compiler_options

log = logging.getLogger("zoo")


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
        self._compiling = {}  # program name -> the thread compiling it ahead (compile_ahead)

    def compile_ahead(self, state, hyper, steps: int, batch_size: int, eval_batch, train: bool = True) -> None:
        """Start compiling the train and eval programs for the arguments the loop will pass them: one member's
        `state` and traced hyperparameters `hyper` (stacked here to the population's size), calls of `steps` steps
        of `batch_size` indices, eval batches like `eval_batch`; `train` false where no member has a step left.
        Each program is traced here, on the thread that reads the members' configs (OmegaConf is not for two
        threads at once), then lowered and compiled on a thread of its own: XLA compiles without holding the GIL,
        so the two compile side by side while the host goes on preparing the members. Each first call waits for
        its own program and finds it in jit's cache."""
        def abstract(tree, size: tuple, dtype=None, sharding=None):
            return jax.tree.map(lambda x: jax.ShapeDtypeStruct((*size, *np.shape(x)), dtype or _dtype(x),
                                                               sharding=sharding), tree)

        states = abstract(state, (self.size,), sharding=self.members)
        accs = abstract(self.zero_sums, (self.size,), sharding=self.members)
        try:
            traced = {"eval": self._eval.trace(states, accs, abstract(eval_batch, (), sharding=self.replicated))}
            if train:
                # the indices cross from the host each call, uncommitted: a sharding here would make another program
                idx = {"idx": jax.ShapeDtypeStruct((self.size, steps, batch_size), np.int32)}
                hypers = abstract(hyper, (self.size,), np.float32, self.members)
                traced["train"] = self._train.trace(states, accs, idx, self.rows, hypers)
        except Exception as e:  # noqa: BLE001 — the program's first call traces it again and raises the error there
            log.debug("the population's programs are not compiled ahead: %s", e)
            return
        self._compiling = {name: _compile_on_thread(name, t) for name, t in traced.items()}

    def _compiled(self, program: str) -> None:
        thread = self._compiling.pop(program, None)
        if thread is not None:
            thread.join()

    def close(self) -> None:
        """Wait for the programs still compiling ahead (one whose call never came: a group ended early): no thread
        of this group compiles on into the next group or the interpreter's exit."""
        for program in list(self._compiling):
            self._compiled(program)

    def zero_accs(self):
        return self.put_members(stack([self.zero_sums] * self.size))

    def put_members(self, tree):
        return jax.device_put(tree, self.members)

    def put_replicated(self, tree):
        return jax.device_put(tree, self.replicated)

    def train_chunk(self, states, accs, idx, mask, hyper):
        self._compiled("train")
        return self._train(states, accs, {"idx": fold_mask(idx, mask)}, self.rows, hyper)

    def eval_step(self, states, accs, batch):
        self._compiled("eval")
        return self._eval(states, accs, batch)


def _compile_on_thread(name: str, traced) -> threading.Thread:
    def compile_program():
        try:
            traced.lower().compile()
        except Exception as e:  # noqa: BLE001 — the program's first call compiles it again and raises the error there
            log.debug("compiling the population's %s program ahead failed: %s", name, e)

    thread = threading.Thread(target=compile_program, name="zoo-population-compile", daemon=True)
    thread.start()
    return thread


def _dtype(x):
    return x.dtype if hasattr(x, "dtype") else np.asarray(x).dtype  # a device array's without copying it to the host


def stack(trees: list):
    """Host trees of one structure -> one tree of arrays with a leading member axis."""
    return jax.tree.map(lambda *leaves: np.stack([np.asarray(x) for x in leaves]), *trees)


def member(tree, i: int):
    """Member i's slice of a stacked host tree."""
    return jax.tree.map(lambda x: x[i], tree)
