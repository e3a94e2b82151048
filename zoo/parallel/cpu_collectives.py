"""Programs with collectives over several CPU devices of one process run one call at a time.

XLA:CPU runs each device's share of a program on a thread pool, and each share first takes its device's
in-flight slot (`xla::Semaphore` in `CpuPjRtRawLoadedExecutable::Execute`). With several such programs
dispatched asynchronously (an eval loop's calls, a loop's chunks), the shares of two calls can interleave so
that one call's shares wait in its all-reduce rendezvous for devices whose slots the other call holds: seen
here, under load, as "Expected 8 threads to join the rendezvous, but only 7 of them arrived", then an abort
after 40 s. Waiting for each call before the next removes the interleaving. Simulated CPU devices share the
same cores, so overlapping their calls gains nothing anyway; accelerators keep asynchronous dispatch.
"""
import jax


class OneCallAtATime:
    """A compiled function whose calls return only once their results are ready; `.lower` etc. pass through."""

    def __init__(self, fn):
        self._fn = fn

    def __call__(self, *args, **kwargs):
        return jax.block_until_ready(self._fn(*args, **kwargs))

    def __getattr__(self, name):
        return getattr(self._fn, name)


def serialised_on_cpu(devices: list, *fns) -> tuple:
    """`fns` unchanged, or each wrapped in OneCallAtATime when `devices` are several CPU devices of this process."""
    local = [d for d in devices if d.process_index == jax.process_index()]
    if len(local) > 1 and all(d.platform == "cpu" for d in local):
        return tuple(OneCallAtATime(fn) for fn in fns)
    return fns
