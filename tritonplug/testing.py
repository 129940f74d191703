"""The conformance kit: what every backend plugin's tests need, and the checks every backend must pass.

A plugin's test suite (the four here, or a third party's outside this repository) uses it from its
``conftest.py``::

    from tritonplug.testing import configure_environment, private_cache_fixture
    configure_environment()
    _private_cache = private_cache_fixture()

and runs the conformance checks as tests::

    import pytest
    from tritonplug.testing import conformance_checks

    @pytest.mark.parametrize("check", conformance_checks("mybackend", target_hints={"compute_capability": 90}))
    def test_conformance(check):
        check()

The checks use the plugin as users get it: loaded through its entry point by the host, driven through
``tritonplug.triton_call`` under ``jax.jit``. Without a device of the backend's platform they check
target detection, option parsing and lowering (the program must embed a kernel call); with one they
also run the kernels and compare with NumPy. Each kernel puts an output pointer where real kernels put
it: last, first (Liger's norms), between inputs (Triton's layer-norm tutorial), and one updates a
buffer in place; one takes a ``None`` argument.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np
import pytest
import triton
import triton.language as tl

from tritonplug import settings

__all__ = ["Check", "configure_environment", "conformance_checks", "private_cache_fixture", "use_private_cache"]

N, BLOCK = 1000, 128


def configure_environment() -> None:
    """Checked interpreter runs, no GPU memory preallocation (several pytest-xdist workers share one GPU),
    Triton's FP fusion as Triton 3.9 defaults it; each only where the environment does not set it. Compiles
    start early (at trace time), as they do by default; ``tox -e jax011-triton37`` runs with them at lowering."""
    os.environ.setdefault("TRITONPLUG_INTERPRET_CHECK", "1")
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")


def use_private_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Point ``TRITONPLUG_CACHE_DIR`` at a directory of this run, shared by its pytest-xdist workers."""
    if not settings.CACHE_DIR.is_set():
        root = tmp_path_factory.getbasetemp()
        shared = root.parent if os.environ.get("PYTEST_XDIST_WORKER") else root
        os.environ["TRITONPLUG_CACHE_DIR"] = str(shared / "tritonplug-cache")


def private_cache_fixture() -> Any:
    """A session-wide autouse fixture that calls :func:`use_private_cache`; assign it in a conftest."""
    @pytest.fixture(autouse=True, scope="session")
    def _private_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
        use_private_cache(tmp_path_factory)
    return _private_cache


@dataclass(frozen=True)
class Check:
    """One conformance check of one backend: call it; it raises ``AssertionError`` naming what failed."""

    name: str
    run: Callable[[], None]

    def __call__(self) -> None:
        self.run()

    def __repr__(self) -> str:
        return self.name


def conformance_checks(backend: str, target_hints: Mapping[str, Any] | None = None) -> list[Any]:
    """The checks for ``backend`` as ``pytest.param``s (ids name them), one per platform it serves.

    ``target_hints`` (``compute_capability`` …) let a GPU backend lower without a device, as
    ``triton_call(..., compute_capability=90)`` does; a backend that detects its target from the
    environment (``TRITONPLUG_ROCM_ARCH``) needs none when that is set.
    """
    from tritonplug.process.state import state

    backends = state.host().backends
    if backend not in backends:
        problems = "; ".join(state.host().problems) or "none reported"
        raise AssertionError(f"backend {backend!r} is not loaded (loaded: {sorted(backends)}; plugin problems: "
                             f"{problems}): is its distribution installed, with a tritonplug.backends entry point?")
    hints = dict(target_hints or {})
    checks = [Check(f"{backend}-info", lambda: _check_info(backend))]
    for platform in backends[backend].info.platforms:
        checks.append(Check(f"{backend}-{platform}-target", functools.partial(_check_target, backend, platform, hints)))
        for name, case in CASES.items():
            checks.append(Check(f"{backend}-{platform}-{name}", functools.partial(_check_case, platform, case, hints)))
    return [pytest.param(c, id=c.name) for c in checks]


def _check_info(name: str) -> None:
    from tritonplug.compile.backends import capability_problem
    from tritonplug.process.state import state

    info = state.host().backends[name].info
    assert info.name == name, f"the plugin registered as {name!r} calls itself {info.name!r}"
    assert info.platforms, f"backend {name!r} serves no JAX platform"
    problem = capability_problem(info)
    assert problem is None, f"backend {name!r}'s BackendInfo {problem}"


def _device(platform: str) -> Any | None:
    try:
        return jax.devices(platform)[0]
    except RuntimeError:
        return None


def _check_target(name: str, platform: str, hints: Mapping[str, Any]) -> None:
    from tritonplug.process.state import state

    backend = state.host().backends[name]
    requested = {"compute_capability": None, **hints}
    try:
        target = backend.detect_target(platform, _device(platform), requested)
    except ValueError as exc:  # no device and no hint: the message must say what to set
        assert str(exc), f"backend {name!r} refused to detect a target for {platform!r} with an empty message"
        return
    assert target is not None and target.backend == name and target.platform == platform, \
        f"backend {name!r} detected {target!r} for platform {platform!r}"


@dataclass(frozen=True)
class Case:
    """A kernel, how to call it (``call(kernel, x, y, **options)`` returns the result) and what it must give."""

    kernel: Any
    call: Callable[..., Any]
    expected: Callable[[np.ndarray, np.ndarray], np.ndarray]


@triton.jit
def _add_outputs_last(x_ptr, y_ptr, n, out_ptr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


@triton.jit
def _scale_outputs_first(out_ptr, out_stride, x_ptr, n, scale, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs * out_stride, tl.load(x_ptr + offs, mask=mask) * scale, mask=mask)


@triton.jit
def _fma_output_between(x_ptr, out_ptr, w_ptr, b_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = x * tl.load(w_ptr + offs, mask=mask)
    if b_ptr is not None:
        y += tl.load(b_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, y, mask=mask)


@triton.jit
def _accumulate_in_place(acc_ptr, x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(acc_ptr + offs, tl.load(acc_ptr + offs, mask=mask) + tl.load(x_ptr + offs, mask=mask), mask=mask)


def _out(x: Any) -> Any:
    return jax.ShapeDtypeStruct(x.shape, x.dtype)


def _in_place(kernel: Any, x: Any, y: Any, **options: Any) -> Any:
    import tritonplug

    acc = jax.new_ref(x)
    tritonplug.triton_call(acc, y, N, kernel=kernel, out_type=(), grid=(N // BLOCK + 1,), BLOCK=BLOCK, **options)
    return acc[...]


def _tritonplug_call(*args: Any, **kwargs: Any) -> Any:
    import tritonplug

    return tritonplug.triton_call(*args, grid=(N // BLOCK + 1,), BLOCK=BLOCK, **kwargs)


CASES: dict[str, Case] = {
    "outputs-last": Case(_add_outputs_last, lambda k, x, y, **o: _tritonplug_call(x, y, N, kernel=k, out_type=_out(x),
                                                                                  **o), lambda x, y: x + y),
    "output-first-by-keyword": Case(
        _scale_outputs_first,
        lambda k, x, y, **o: _tritonplug_call(scale=2.0, x_ptr=x, out_stride=1, n=N, kernel=k, out_type=_out(x), **o),
        lambda x, y: x * 2),
    "output-between-inputs-and-none": Case(
        _fma_output_between, lambda k, x, y, **o: _tritonplug_call(x, w_ptr=y, b_ptr=None, n=N, kernel=k,
                                                                   out_type=_out(x), **o),
        lambda x, y: x * y),
    "in-place-ref": Case(_accumulate_in_place, _in_place, lambda x, y: x + y),
}


def _check_case(platform: str, case: Case, hints: Mapping[str, Any]) -> None:
    rng = np.random.default_rng(0)
    x, y = (rng.standard_normal(N).astype(np.float32) for _ in range(2))
    options = {k: v for k, v in hints.items() if v is not None}
    program = jax.jit(lambda a, b: case.call(case.kernel, a, b, **options))
    device = _device(platform)
    if device is None:  # no device: the program must lower and embed a kernel call (or inline the kernel)
        lowered = program.trace(x, y).lower(lowering_platforms=(platform,)).as_text()
        assert "custom_call" in lowered or platform == "cpu", f"no kernel call in the program lowered for {platform}"
        return
    got = np.asarray(program(jax.device_put(x, device), jax.device_put(y, device)))
    np.testing.assert_allclose(got, case.expected(x, y), rtol=1e-6, atol=1e-6,
                               err_msg=f"{case.kernel.fn.__name__} on {platform}")
