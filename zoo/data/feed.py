"""The train stream as a compiled call receives it.

A train split within `parallel.device_data_mb` is placed on the device(s) once; each call then receives only
the batch indices and masks of its steps and gathers there. A larger split streams: each call receives its
batches copied from the host. Both give every step the same examples in the same order, so where the data
lives changes no result.
"""
import numpy as np

MB = 2**20


MASKED_ROW, PADDING_ROW = -1, -2  # folded indices of a masked row and of a padding step's row


def fold_mask(idx: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Indices and a mask (1, 0 or PADDING_STEP, see zoo.data.pipeline) as one array for the device: MASKED_ROW
    marks a masked row, PADDING_ROW a row of a padding step (zoo.steps.train_chunk unfolds them). One array
    crosses to the device instead of two: ~3 us of a linear model's 34 us one-step call."""
    return np.where(mask > 0, idx, np.where(mask < 0, PADDING_ROW, MASKED_ROW)).astype(np.int32)


def split_bytes(split) -> int:
    """Bytes of one copy of the split's inputs and targets."""
    return split.x.nbytes + split.y.nbytes


def fits_on_device(split, limit_mb: float) -> bool:
    """Whether one copy of the split is within the per-device limit."""
    return split_bytes(split) <= limit_mb * MB


class TrainFeed:
    """`args(step, k, pad_to)`: what a compiled train call takes after (state, acc) for steps [step, step + k).

    That is (data, rows): indices {"idx"} (K, B), -1 where a row is masked (`fold_mask`), and the resident split
    {"x", "y"} (N, ...), or the stacked batches {"x", "y", "mask"} (K, B, ...) and no rows. See
    zoo.steps.train_chunk.
    """

    def __init__(self, stream, mode, resident: bool):
        self.stream, self.mode, self.resident = stream, mode, resident
        self.batch_size, self.position = stream.batch_size, stream.position
        self._rows = None if resident else {}

    @property
    def rows(self) -> dict:
        """The train split on the device(s), placed at first use: an eval-only run never places it."""
        if self._rows is None:
            split = self.stream.split
            self._rows = self.mode.put_rows({"x": np.asarray(split.x), "y": np.asarray(split.y)})
        return self._rows

    def args(self, step: int, k: int, pad_to: int | None = None) -> tuple:
        if self.resident:
            idx, mask = self.stream.indices(step, k, pad_to)
            return self.mode.put_chunk({"idx": fold_mask(idx, mask)}), self.rows
        return self.mode.put_chunk(self.stream.chunk(step, k, pad_to)), self.rows
