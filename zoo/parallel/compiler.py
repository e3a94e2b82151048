"""XLA options for the zoo's compiled train and eval calls (jax.jit's compiler_options; jax.pmap takes none, so
parallel=pmap compiles with XLA's defaults)."""
import jax

# Measured side by side in one process on 2 cores (docs/benchmarks.md, "Compiler options"):
CPU_OPTIONS = {
    # Inside a call's loop the optimizer overwrites each parameter in place. By default XLA:CPU cannot tell that
    # a parameter read twice in a step (a layer's forward and its input-gradient matmuls) is read before that
    # write, and copies it every step; region analysis proves the order and drops the copies. Copies only:
    # results are bitwise the same.
    "xla_cpu_copy_insertion_use_region_analysis": True,
    # No YNNPACK library fusions: XLA's own convolutions and batched matmuls are faster here (the 28x28 CNN's
    # step, a population's vmapped matmuls); its single matmuls are as fast for the digits MLP and ~10% slower
    # at 512 wide. Results change within float rounding. Keeping YNNPACK for single matmuls alone was tried:
    # parallel=none then drifted from pmap (XLA's defaults) beyond the modes' tested tolerance on the CNN.
    "xla_cpu_experimental_ynn_fusion_type": "",
}


def compiler_options() -> dict:
    return dict(CPU_OPTIONS) if jax.default_backend() == "cpu" else {}
