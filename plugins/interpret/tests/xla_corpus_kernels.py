"""A corpus of kernels as Triton users write them (tutorial-style ideas, our own code), for the
CPU backend's XLA path: ``test_xla_corpus_rows.py`` and ``test_xla_corpus_tiles.py`` (beside it) run
each and ``bench/interpret_corpus.py`` times each against Triton's interpreter.

The kernels live in two modules, by what they work on: ``xla_corpus_row_kernels.py`` (rows and
elements: normalisations, elementwise and libdevice, casts, reductions and scans) and
``xla_corpus_tile_kernels.py`` (tiles: layout, attention and matmul, memory, loops and grids). This
module lists them all under one name, ``import xla_corpus_kernels as K``.
"""

from xla_corpus_row_kernels import (
    activations_kernel,
    argmax_kernel,
    casts_kernel,
    dropout_kernel,
    fp8_rescale_kernel,
    int_ops_kernel,
    layer_norm_fwd_kernel,
    libdevice_kernel,
    nan_row_stats_kernel,
    quantize_rows_kernel,
    rms_norm_kernel,
    scans_kernel,
    softmax_one_row_kernel,
    softmax_rows_kernel,
)
from xla_corpus_tile_kernels import (
    block_ptr_copy_kernel,
    column_sum_atomic_kernel,
    complex_mul_kernel,
    descriptor_tiles_kernel,
    flash_attention_fwd_kernel,
    grid3d_kernel,
    grouped_matmul_kernel,
    histogram_kernel,
    poly_collatz_kernel,
    strided_rows_kernel,
    transpose_kernel,
)

__all__ = [
    "softmax_rows_kernel",
    "softmax_one_row_kernel",
    "layer_norm_fwd_kernel",
    "rms_norm_kernel",
    "dropout_kernel",
    "activations_kernel",
    "int_ops_kernel",
    "casts_kernel",
    "fp8_rescale_kernel",
    "quantize_rows_kernel",
    "libdevice_kernel",
    "scans_kernel",
    "argmax_kernel",
    "nan_row_stats_kernel",
    "transpose_kernel",
    "complex_mul_kernel",
    "flash_attention_fwd_kernel",
    "grouped_matmul_kernel",
    "block_ptr_copy_kernel",
    "descriptor_tiles_kernel",
    "histogram_kernel",
    "column_sum_atomic_kernel",
    "poly_collatz_kernel",
    "grid3d_kernel",
    "strided_rows_kernel",
]
