import jax
import numpy as np
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from zoo.parallel.cpu_collectives import serialised_on_cpu


class PmapMode:
    """parallel=pmap: one program per device over axis `data`; arrays carry a leading device axis."""

    axis_name = "data"

    def __init__(self, devices):
        self.devices = list(devices)
        self.num_devices = len(self.devices)
        self.program_copies = self.num_devices  # each device runs the lowered program on its share: FLOPs x N
        # Placing stacked arrays with this sharding puts row d on device d, exactly where pmap wants it.
        self.stacked = NamedSharding(Mesh(np.array(self.devices), (self.axis_name,)), P(self.axis_name))

    def prepare_model(self, model):
        # BatchNorm averages its batch statistics over the same axis the gradients are reduced over.
        for _, module in model.iter_modules():
            if isinstance(module, nnx.BatchNorm):
                module.axis_name = self.axis_name
        return model

    def compile(self, train_chunk, eval_step, state):
        kw = dict(axis_name=self.axis_name, devices=self.devices)
        # the train accumulator is not donated: one placed zero accumulator starts every log interval
        return serialised_on_cpu(self.devices, jax.pmap(train_chunk, donate_argnums=0, **kw),
                                 jax.pmap(eval_step, donate_argnums=1, **kw))

    def _put(self, tree):
        return jax.device_put(tree, self.stacked)

    def put_replicated(self, tree):
        stack = lambda x: np.broadcast_to(np.asarray(x), (self.num_devices,) + np.shape(x))  # noqa: E731
        return self._put(jax.tree.map(stack, jax.device_get(tree)))

    put_state = put_replicated
    put_rows = put_replicated  # every device gathers its slice of each batch from its own copy of the split

    def _split(self, x, axis):
        # (..., B, rest) -> (D, ..., B/D, rest): device d gets the d-th contiguous slice of every batch
        shape = x.shape[:axis] + (self.num_devices, x.shape[axis] // self.num_devices) + x.shape[axis + 1:]
        return np.moveaxis(x.reshape(shape), axis, 0)

    def put_chunk(self, chunk):  # (K, B, ...) batches or (K, B) indices
        return self._put(jax.tree.map(lambda x: self._split(np.asarray(x), 1), chunk))

    def put_batch(self, batch):  # (B, ...)
        return self._put(jax.tree.map(lambda x: self._split(np.asarray(x), 0), batch))

    def get(self, tree):
        return jax.device_get(jax.tree.map(lambda x: x[0], tree))
