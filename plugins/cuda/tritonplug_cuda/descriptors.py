"""Host-side tensor descriptors on CUDA: what Triton's launcher would pass, as jaxlib runtime parameters.

For each ``tensordesc`` parameter Triton's NVIDIA launcher passes a ``CUtensorMap`` (encoded on the
host from the compiled kernel's ``tensordesc_meta``: element type, swizzle, box) followed by the
shape as ``i32`` and the strides as ``i64``. jaxlib's runtime encodes the ``CUtensorMap`` itself from a
:class:`~tritonplug.records.TmaDescriptorParam` over the next buffer. Without TMA (before sm_90, where
the metadata is empty) Triton lowers a descriptor to its base pointer and scalars instead.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tritonplug.records import ArrayParam, ScalarParam, TensorDescriptorParam, TmaDescriptorParam
from tritonplug_cuda import compat


def count(params: Sequence[Any]) -> int:
    """How many descriptor parameters ``params`` (nested tuples included) hold."""
    return sum(count(p) if isinstance(p, tuple) else isinstance(p, TensorDescriptorParam) for p in params)


def expand(params: Sequence[Any], tensordesc_meta: Sequence[Mapping[str, Any]], kernel_name: str) -> tuple[Any, ...]:
    """``params`` with each :class:`TensorDescriptorParam` replaced by the tuple of runtime parameters
    Triton's launcher passes for it (the k-th descriptor, in parameter order, takes the k-th metadata)."""
    n = count(params)
    if not n:
        return tuple(params)
    if tensordesc_meta and len(tensordesc_meta) != n:
        raise RuntimeError(f"kernel {kernel_name!r}: Triton's metadata describes {len(tensordesc_meta)} tensor "
                           f"descriptors, the call passes {n}")
    metas = iter(tensordesc_meta or [None] * n)

    def visit(p: Any) -> Any:
        if isinstance(p, tuple):
            return tuple(visit(q) for q in p)
        if isinstance(p, TensorDescriptorParam):
            meta = next(metas)
            head = _tma(p, meta, kernel_name) if meta is not None else _decomposed(p, kernel_name)
            return (*head, *(ScalarParam(int(d), "i32") for d in p.shape),
                    *(ScalarParam(int(s), "i64") for s in p.strides))
        return p

    return tuple(visit(p) for p in params)


def _tma(p: TensorDescriptorParam, meta: Mapping[str, Any], kernel_name: str) -> tuple[Any, ...]:
    where = f"kernel {kernel_name!r}"
    if meta.get("is_im2col", False):
        raise ValueError(f"{where}: its descriptor parameter is in im2col mode (Triton metadata is_im2col), which "
                         f"jaxlib's runtime cannot encode; tritonplug passes tiled descriptors only")
    if meta.get("fp4_padded", False):
        raise ValueError(f"{where}: its descriptor parameter uses the padded fp4 layout (Triton metadata fp4_padded), "
                         f"which jaxlib's runtime cannot encode")
    elem_type = compat.TMA_TF32 if p.round_f32_to_tf32 else compat.TMA_DTYPE_DEVICE_TO_HOST[int(meta["elem_type"])]
    descriptor = TmaDescriptorParam(p.buffer, elem_type, int(meta["swizzle"]), tuple(p.shape), tuple(p.strides),
                                    tuple(int(b) for b in meta["block_size"]), 1 if p.padding == "nan" else 0)
    return (descriptor,)


def _decomposed(p: TensorDescriptorParam, kernel_name: str) -> tuple[Any, ...]:
    if p.round_f32_to_tf32 and "round_f32_to_tf32" not in compat.DECOMPOSED_FLAGS:
        raise ValueError(f"kernel {kernel_name!r}: round_f32_to_tf32 needs TMA (sm_90+) with Triton "
                         f"{compat.TRITON_VERSION}, which lowers descriptors to plain loads before sm_90")
    flags = {"padding": p.padding == "nan", "round_f32_to_tf32": p.round_f32_to_tf32}
    return (ArrayParam(p.buffer, 0, 0), *(ScalarParam(int(d), "i64") for d in p.shape),
            *(ScalarParam(int(s), "i64") for s in p.strides),
            *(ScalarParam(flags[name], "i1") for name in compat.DECOMPOSED_FLAGS))

