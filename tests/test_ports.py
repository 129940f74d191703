"""The ports of ``examples/ports``: values and ``jax.grad`` against ``jnp`` references, and how many
lines of each launcher differ from the library's own (read from the installed source, not imported).

Needs the pinned libraries (``tox -e corpus`` installs liger-kernel 0.8.5 and fla-core 0.6.0 with
``--no-deps``: no torch); skipped where they are not installed.
"""

from __future__ import annotations

import ast
import difflib
import importlib
import importlib.machinery
from pathlib import Path

import pytest
from helpers import for_backend

ROOT = Path(__file__).resolve().parent.parent


def _installed(package: str) -> bool:
    return importlib.machinery.PathFinder.find_spec(package) is not None  # finds, never imports


#: port module, library module, {launcher: (port lines changed or added, library lines dropped, library lines)}
PORTS = [
    ("liger_rms_norm", "liger_kernel.ops.rms_norm", {"rms_norm_forward": (5, 4, 67),
                                                     "rms_norm_backward": (7, 12, 91)}),
    ("liger_swiglu", "liger_kernel.ops.swiglu", {"swiglu_forward": (3, 17, 35), "swiglu_backward": (2, 16, 33)}),
    ("liger_rope", "liger_kernel.ops.rope", {"rope_forward": (2, 0, 54), "rope_backward": (2, 0, 54)}),
    ("liger_cross_entropy", "liger_kernel.ops.cross_entropy", {"cross_entropy_forward": (21, 30, 102),
                                                               "cross_entropy_backward": (5, 5, 18)}),
    ("fla_fused_recurrent", "fla.ops.common.fused_recurrent", {"fused_recurrent_fwd": (15, 13, 58)}),
    ("liger_fused_linear_cross_entropy", "liger_kernel.ops.fused_linear_cross_entropy",
     {"fused_linear_cross_entropy_forward": (48, 241, 266), "fused_linear_cross_entropy_backward": (3, 13, 38)}),
    ("fla_parallel_attention", "fla.ops.attn.parallel", {"parallel_attn_fwd": (11, 10, 66),
                                                         "parallel_attn_bwd_preprocess": (4, 3, 14),
                                                         "parallel_attn_bwd": (21, 20, 114)}),
]


def _requires(library_module: str) -> pytest.MarkDecorator:
    package = library_module.split(".")[0]
    return pytest.mark.skipif(not _installed(package), reason=f"{package} is not installed (tox -e corpus installs it)")


def _function_lines(path: Path, name: str) -> list[str]:
    text = path.read_text()
    node = next(n for n in ast.parse(text).body if isinstance(n, ast.FunctionDef) and n.name == name)
    first = min([d.lineno for d in node.decorator_list] + [node.lineno])  # decorators count as lines
    lines = (line.strip() for line in text.splitlines()[first - 1:node.end_lineno])
    return [line for line in lines if line and not line.startswith("#")]


def _library_file(module: str) -> Path:
    parts = module.split(".")
    spec = importlib.machinery.PathFinder.find_spec(parts[0])
    return Path(list(spec.submodule_search_locations)[0]).joinpath(*parts[1:]).with_suffix(".py")


@pytest.mark.parametrize(("port", "library", "launchers"), [pytest.param(*p, marks=_requires(p[1])) for p in PORTS],
                         ids=[p[0] for p in PORTS])
def test_port_differs_from_the_library_launcher_only_where_its_docstring_says(port, library, launchers):
    for name, expected in launchers.items():
        theirs = _function_lines(_library_file(library), name)
        ours = _function_lines(ROOT / "examples" / "ports" / f"{port}.py", name)
        diff = list(difflib.ndiff(theirs, ours))
        counted = (sum(d.startswith("+ ") for d in diff), sum(d.startswith("- ") for d in diff), len(theirs))
        assert counted == expected, f"{port}.{name}: (changed or added, dropped, library lines) = {counted}"


@pytest.mark.parametrize("port", [pytest.param(p[0], marks=_requires(p[1])) for p in PORTS],
                         ids=[p[0] for p in PORTS])
def test_port_matches_jnp_values_and_gradients(port):
    """Each port's ``main`` checks values (and ``jax.grad`` through its ``custom_vjp``) under ``jit``."""
    importlib.import_module(f"ports.{port}").main()


@_requires("liger_kernel")
def test_ports_run_eagerly_and_under_vmap():
    import jax
    import jax.numpy as jnp
    import numpy as np
    from ports import liger_rms_norm, liger_swiglu

    x = jax.random.normal(jax.random.key(5), (3, 4, 32), jnp.float32)
    w = jnp.linspace(0.5, 1.5, 32, dtype=jnp.float32)
    np.testing.assert_allclose(liger_rms_norm.liger_rms_norm(x[0], w), liger_rms_norm.rms_norm_reference(x[0], w),
                               rtol=1e-5, atol=1e-5)
    batched = jax.vmap(liger_rms_norm.liger_rms_norm, in_axes=(0, None))(x, w)
    np.testing.assert_allclose(batched, liger_rms_norm.rms_norm_reference(x, w), rtol=1e-5, atol=1e-5)
    grads = jax.grad(lambda a, b: jnp.sum(liger_swiglu.liger_swiglu(a, b) ** 2), argnums=(0, 1))(x[0], x[1])
    want = jax.grad(lambda a, b: jnp.sum(liger_swiglu.swiglu_reference(a, b) ** 2), argnums=(0, 1))(x[0], x[1])
    for got, expected in zip(grads, want, strict=True):
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)


LOWERED = {  # port: (function of small arrays, arguments, the kernels its lowered CUDA program calls)
    "liger_rms_norm": ("grad", ((8, 96), (96,)), {"_rms_norm_forward_kernel", "_rms_norm_backward_kernel"}),
    "liger_swiglu": ("grad", ((8, 96), (8, 96)), {"_swiglu_forward_kernel", "_swiglu_backward_kernel"}),
    "liger_cross_entropy": ("grad", ((8, 96), None), {"liger_cross_entropy_kernel", "element_mul_kernel"}),
    "liger_rope": ("grad", ((1, 2, 8, 16), (1, 2, 8, 16)), {"_triton_rope"}),
    "fla_fused_recurrent": ("fwd", ((1, 8, 2, 16),) * 3, {"fused_recurrent_fwd_kernel"}),
    "liger_fused_linear_cross_entropy": ("grad", ((8, 16), (64, 16), None),
                                         {"liger_cross_entropy_kernel", "element_mul_kernel"}),
    "fla_parallel_attention": ("grad", ((1, 8, 4, 16), (1, 8, 2, 16), (1, 8, 2, 16)),
                               {"parallel_attn_fwd_kernel", "parallel_attn_bwd_kernel_preprocess",
                                "parallel_attn_bwd_kernel_dq", "parallel_attn_bwd_kernel_dkv"}),
}


def _lowered_function(port):
    import jax
    import jax.numpy as jnp

    module = importlib.import_module(f"ports.{port}")
    _, shapes, _ = LOWERED[port]
    args = [jnp.ones(s, jnp.float32) if s else jnp.zeros(8, jnp.int32) for s in shapes]
    if port == "fla_fused_recurrent":
        return (lambda q, k, v: module.fused_recurrent_fwd(q, k, v, scale=0.25, output_final_state=True)), args
    if port == "liger_fused_linear_cross_entropy":
        return jax.grad(module.fused_linear_cross_entropy, argnums=(0, 1)), args
    if port == "fla_parallel_attention":
        return jax.grad(lambda q, k, v: jnp.sum(module.attention(q, k, v)), argnums=(0, 1, 2)), args
    fn = getattr(module, port)  # each Liger port's op is named like its module
    if port == "liger_rope":
        cos = jnp.ones((1, 8, 16), jnp.float32)
        return jax.grad(lambda q, k: jnp.sum(fn(q, k, cos, cos)[0] + 2 * jnp.sum(fn(q, k, cos, cos)[1])),
                        argnums=(0, 1)), args
    if port == "liger_cross_entropy":
        return jax.grad(lambda x, t: fn(x, t)), args
    return jax.grad(lambda a, b: jnp.sum(fn(a, b)), argnums=(0, 1)), args


@for_backend("cuda")
@pytest.mark.parametrize("port", [pytest.param(p[0], marks=_requires(p[1])) for p in PORTS], ids=[p[0] for p in PORTS])
def test_port_lowers_for_sm90_without_a_gpu(port, monkeypatch):
    """Each port's launches, outputs before inputs and refs included, make a CUDA program on a CPU machine."""
    import jax

    from tritonplug.inspection import kernel_calls

    monkeypatch.setenv("TRITONPLUG_CUDA_ARCH", "90")
    fn, args = _lowered_function(port)
    text = jax.jit(fn).trace(*args).lower(lowering_platforms=("cuda",)).as_text()
    assert {call["name"] for call in kernel_calls(text)} == LOWERED[port][2]
