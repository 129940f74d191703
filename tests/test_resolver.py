"""Issue 27: each derivation of a call happens once. The call's checks and the lowering's plan share one resolution
(``compile.resolver``: named arguments → constexprs → grid → zeroed outputs → options); kernel-only checks run once
per kernel; the environment's fingerprint is read once per lowering. Shown with user code that counts its calls,
with ``resolver.DERIVATIONS``, and by where in the source each derivation may be called (read with ``ast``)."""

from __future__ import annotations

import ast
import warnings
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from derivation_kernels import CALLS, counted_kernel, heuristic_kernel
from helpers import requires_backend
from kernels import add_kernel

import tritonplug
from tritonplug.compile import resolver

ROOT = Path(__file__).resolve().parents[1]
interpret = requires_backend("interpret")


def counting(name, value):
    """A user callable (a grid or zeroed_outputs callable) that counts its calls in ``CALLS[name]``."""
    def call(meta):
        CALLS[name] += 1
        return value(meta)
    return call


def derived(before):
    return {k: v - before.get(k, 0) for k, v in resolver.DERIVATIONS.items() if v != before.get(k, 0)}


def add(x, y, kernel=add_kernel, **options):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # zeroed_outputs=
        return tritonplug.triton_call(x, y, x.size, kernel=kernel, out_type=jax.ShapeDtypeStruct(x.shape, x.dtype),
                                      **options)


@interpret
@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_a_call_and_its_lowering_derive_its_configuration_once(jit, fresh_state):
    """A plain kernel: the call checked its grid and zeroed outputs, and the lowering used to derive both again."""
    x = jnp.arange(300, dtype=jnp.float32)
    CALLS.clear()
    before = dict(resolver.DERIVATIONS)

    def fn(a):
        return add(a, a, grid=counting("grid", lambda m: (tritonplug.cdiv(m["n"], m["BLOCK"]),)),
                   zeroed_outputs=counting("zeroed", lambda m: ()), BLOCK=128)

    out = (jax.jit(fn) if jit else fn)(x)
    np.testing.assert_array_equal(np.asarray(out), 2 * np.arange(300, dtype=np.float32))
    assert dict(CALLS) == {"grid": 1, "zeroed": 1}
    assert derived(before) == {"resolutions": 1, "kernel_checks": 1, "environment": 1}


@interpret
def test_autotune_pruning_and_heuristics_run_once_per_configuration(fresh_state):
    x = jnp.arange(256, dtype=jnp.float32)
    CALLS.clear()
    before = dict(resolver.DERIVATIONS)
    grid = counting("grid", lambda m: (tritonplug.cdiv(m["n"], m["BLOCK"]),))
    np.testing.assert_array_equal(np.asarray(add(x, x, kernel=counted_kernel, grid=grid)), 2 * np.asarray(x))
    assert dict(CALLS) == {"prune": 1, "heuristic": 2, "grid": 2}  # two configurations
    assert derived(before) == {"resolutions": 1, "kernel_checks": 1, "environment": 1}
    add(x, x, kernel=counted_kernel, grid=grid)  # a repeat: memoised, nothing derived
    assert dict(CALLS) == {"prune": 1, "heuristic": 2, "grid": 2}


@interpret
def test_kernel_only_checks_run_once_per_kernel(fresh_state):
    before = dict(resolver.DERIVATIONS)
    for size in (64, 96, 128):  # three calls the memo does not know
        x = jnp.ones(size, jnp.float32)
        add(x, x, kernel=heuristic_kernel, grid=(2,), BLOCK=64)
    assert derived(before)["kernel_checks"] == 1
    assert derived(before)["resolutions"] == 3


def test_a_kernel_whose_checks_fail_is_checked_again():
    """Only a kernel that passed is remembered: a failing one fails on every call."""
    import triton
    import triton.language as tl

    @triton.heuristics({"BLOK": lambda args: 64})
    @triton.jit
    def misspelt(x_ptr, BLOCK: tl.constexpr):
        pass

    from tritonplug.process.state import state

    for _ in range(2):
        with pytest.raises(ValueError, match="did you mean 'BLOCK'"):
            resolver.check_kernel(state.kernels.get(misspelt))


# ------------------------------------------------------------------ where each derivation lives

#: Each derivation and the host modules that may call it. ``calls/options.py`` normalises a static grid and static
#: zeroed outputs once (no metaparameters involved); ``api.py`` names an empty static grid in its error.
HOMES = {
    "named_arguments": {"tritonplug/compile/resolver.py"},
    "require_constexprs": {"tritonplug/compile/resolver.py"},
    "compatible_configs": {"tritonplug/compile/resolver.py"},
    "grid_for": {"tritonplug/compile/resolver.py", "tritonplug/calls/options.py", "tritonplug/api.py"},
    "zeroed_for": {"tritonplug/compile/resolver.py", "tritonplug/calls/options.py"},
    "environment_key": {"tritonplug/lowering/pipeline.py"},
    "kernel_environment": {"tritonplug/lowering/pipeline.py"},
    "constexpr_value": {"tritonplug/calls/binding.py"},
    "check_kernel": {"tritonplug/api.py", "tritonplug/compile/resolver.py"},
}


def _callers() -> dict[str, set[str]]:
    found: dict[str, set[str]] = {name: set() for name in HOMES}
    for path in sorted((ROOT / "tritonplug").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call):
                name = getattr(node.func, "attr", getattr(node.func, "id", None))
                if name in found:
                    found[name].add(str(path.relative_to(ROOT)))
    return found


def test_each_derivation_has_one_home():
    """The lowering reads the call's resolution: no module outside the resolver derives a configuration."""
    for name, callers in _callers().items():
        assert callers <= HOMES[name], f"{name} is called from {sorted(callers - HOMES[name])}"
        assert callers, f"{name} is called nowhere: update HOMES"


def test_the_lowering_reads_the_environment_once():
    """``pipeline.fingerprint`` is the only reader; every lowering and early compile calls it once."""
    text = (ROOT / "tritonplug/lowering/pipeline.py").read_text(encoding="utf-8")
    tree = ast.parse(text)
    lower_call = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "lower_call")
    calls = [n for n in ast.walk(lower_call) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "fingerprint"]
    assert len(calls) == 1
