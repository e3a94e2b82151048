"""Poisson sampling into fixed-shape batches: what the accountant assumes, with shapes that never recompile.

Each step includes every training example independently with probability q = batch_size / N. The sampled
examples fill the first rows of a batch of `max_batch_size` rows; the rest are padding with mask 0, which
contributes neither gradient nor metrics. A step that samples more than `max_batch_size` examples keeps only
the first `max_batch_size` of them. That truncation changes the output distribution by at most the
probability p that any step overflows, so (epsilon, delta_accountant)-DP Poisson sampling becomes
(epsilon, delta_accountant + (1 + e^epsilon) p)-DP; `max_batch_size` is chosen to keep that term small.
"""
import math

import numpy as np

from zoo.data.pipeline import PADDING_STEP, IndexedStream

SAMPLING_STREAM = 0x5A3D  # seeds (seed, stream, step): apart from the epoch shuffles seeded (seed, epoch)


def max_batch_size(n: int, q: float, steps: int, overflow_probability: float) -> tuple:
    """(rows, p): the fewest rows that `steps` Poisson samples overflow with probability p <= overflow_probability.
    Counted for n + 1 examples: the neighbouring dataset may hold one more. They do not depend on the devices (a
    batch is padded to split across them), so a run resumed on another number truncates its samples alike."""
    from scipy import stats  # ~0.5 s to import: private runs only

    # the smallest k with P(count > k) within the share; binom.isf returns n below ~1e-17 (a small privacy.delta)
    tail = stats.binom.sf(np.arange(n + 2), n + 1, q)
    rows = int(np.argmax(tail <= overflow_probability / max(steps, 1)))
    return rows, float(min(1.0, steps * stats.binom.sf(rows, n + 1, q)))


def chunk_bounds(expected: float, rows: int) -> list:
    """Row bounds [0, b1, ..., rows] for a DP step to compute its batch in: a first chunk of about expected + 2
    std rows, which holds the whole sample on ~98% of steps, then chunks of 4 std, each skipped when it holds no
    sampled example. With 128 expected in 220 rows: [0, 152, 200, 220], so ~150 rows computed, not 220."""
    std = math.sqrt(expected)
    first = max(8, round((expected + 2 * std) / 8) * 8)
    step = max(8, -(-int(4 * std) // 8) * 8)
    if first >= rows:
        return [0, rows]
    return [0, *range(first, rows, step), rows]


class PoissonStream(IndexedStream):
    """The TrainStream interface (batch_size, steps_per_epoch, position, chunk) for Poisson-sampled steps.

    The sample of a step depends on (seed, step) alone, so a resumed run draws the same batches.
    `batch_size` is the expected number of examples per step; `steps_per_epoch` = N // batch_size steps
    see each example once in expectation. A sample is truncated at `rows`; a batch has `rows` rounded up to a
    multiple of `devices` (padding), so that it splits across them.
    """

    def __init__(self, split, batch_size: int, seed: int, rows: int, devices: int = 1):
        self.split, self.batch_size, self.seed, self.rows = split, batch_size, seed, rows
        self.width = -(-rows // devices) * devices
        self.q = batch_size / len(split)
        self.steps_per_epoch = len(split) // batch_size

    def sample(self, step: int) -> np.ndarray:
        """Indices of the examples in step `step`'s batch, at most `rows` of them."""
        rng = np.random.default_rng([self.seed, SAMPLING_STREAM, step])
        return np.flatnonzero(rng.random(len(self.split)) < self.q)[:self.rows]

    def indices(self, step: int, k: int, pad_to: int | None = None) -> tuple:
        """Example indices (k, width) and mask (k, width) of steps [step, step + k); `pad_to` appends
        padding steps up to that many, as TrainStream.indices does. A step that sampled no example is not padding:
        its mask is all 0, and it runs."""
        idx = np.zeros((max(pad_to or k, k), self.width), np.int32)
        mask = np.full(idx.shape, PADDING_STEP, np.float32)
        mask[:k] = 0.0
        for i in range(k):
            chosen = self.sample(step + i)
            idx[i, :len(chosen)], mask[i, :len(chosen)] = chosen, 1.0
        return idx, mask
