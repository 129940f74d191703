"""Run a corpus ``Launch`` through ``tritonplug.triton_call``, in several calling shapes, and check it.

Shapes (each a way a JAX user could write the library's launch):

* ``library``: the library's own call, positional and keyword arguments exactly as its launcher passes
  them, every written buffer a ``jax.new_ref`` updated in place (eager);
* ``out_type``: every argument by keyword; buffers the launcher allocates (``out``) come back through
  ``out_type``, in-place buffers are ``jax.new_ref``s (under ``jax.jit``);
* ``aliases``: the arguments up to the last written one positional, the rest by keyword; written buffers
  are arrays aliased to the results with ``input_output_aliases`` (jax-triton 0.4's way; under ``jax.jit``).
"""

from __future__ import annotations

import importlib.util
import os
import re
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import triton

import tritonplug
import tritonplug.process.state
from corpus.spec import Buf, Launch
from tritonplug.porting.stores import stored_params

SHAPES = ("library", "out_type", "aliases")


def library_installed(module: str) -> bool:
    """Found without importing it (its ``__init__`` imports torch)."""
    try:
        return importlib.util.find_spec(module.split(".")[0]) is not None
    except (ImportError, ValueError):
        return False


def load_kernel(launch: Launch) -> Any:
    """The kernel object as the library exposes it: imported when torch imports, else from source. Where torch
    imports but the module's own import fails (a dependency of the library missing on a GPU machine without
    a registry), loaded from source too: with torch there, its wrappers (``LibEntry``) are applied as usual."""
    if launch.module.startswith("tutorial:"):
        folder = os.environ["TRITONPLUG_TUTORIALS_DIR"]
        return getattr(tritonplug.kernels_from_file(Path(folder) / launch.module.split(":", 1)[1]), launch.kernel)
    try:
        module = tritonplug.kernels_of(launch.module)
    except ImportError:
        module = tritonplug.kernels_of(launch.module, use_import=False)
    return getattr(module, launch.kernel)


def jit_function(kernel: Any) -> triton.JITFunction:
    while not isinstance(kernel, triton.JITFunction):
        kernel = kernel.fn
    return kernel


def named_arguments(launch: Launch, kernel: Any) -> tuple[list[str], dict[str, Any], dict[str, Any]]:
    """(parameter names, the launch's arguments by parameter name, its other keywords: options)."""
    fn = jit_function(kernel)
    names = list(fn.arg_names)
    by_name = dict(zip(names, launch.args, strict=False))
    by_name.update({k: v for k, v in launch.kwargs.items() if k in names})
    options = {k: v for k, v in launch.kwargs.items() if k not in names}
    return names, by_name, options


def _value(arg: Any, arrays: dict[str, Any]) -> Any:
    return arrays[arg.name] if isinstance(arg, Buf) else arg


def run(launch: Launch, shape: str) -> dict[str, np.ndarray]:
    """The written buffers after the launch, through tritonplug in calling shape ``shape``."""
    kernel = load_kernel(launch)
    inputs = {name: jnp.asarray(value) for name, value in launch.buffers.items()}
    if shape == "library":
        return _library(launch, kernel, inputs)
    body = {"out_type": _out_type, "aliases": _aliases}[shape]
    names = sorted(inputs)

    @jax.jit
    def program(*arrays: Any) -> dict[str, Any]:
        return body(launch, kernel, dict(zip(names, arrays, strict=True)))

    results = program(*(inputs[n] for n in names))
    return {name: np.asarray(value) for name, value in results.items()}


def _library(launch: Launch, kernel: Any, inputs: dict[str, Any]) -> dict[str, np.ndarray]:
    arrays = {name: (jax.new_ref(value) if name in launch.written else value) for name, value in inputs.items()}
    args = [_value(a, arrays) for a in launch.args]
    kwargs = {k: _value(v, arrays) for k, v in launch.kwargs.items()}
    passed = [a.name for a in (*launch.args, *launch.kwargs.values()) if isinstance(a, Buf)]
    if any(passed.count(name) > 1 for name in launch.written):  # one buffer, two parameters (Liger's dX = dY):
        handles = {name: tritonplug.tensor(arrays[name]) for name in launch.written}  # the launch layer gives
        args = [handles.get(a.name, _value(a, arrays)) if isinstance(a, Buf) else a for a in launch.args]
        kwargs = {k: handles.get(v.name, _value(v, arrays)) if isinstance(v, Buf) else v  # the ref to the writer
                  for k, v in launch.kwargs.items()}
        tritonplug.launch(kernel)[launch.grid](*args, **kwargs)
    else:
        tritonplug.triton_call(*args, kernel=kernel, grid=launch.grid, out_type=(), **kwargs)
    return {name: np.asarray(arrays[name][...]) for name in launch.written}


def _out_type(launch: Launch, kernel: Any, inputs: dict[str, Any]) -> dict[str, Any]:
    names, by_name, options = named_arguments(launch, kernel)
    refs = {n: jax.new_ref(inputs[n]) for n, how in launch.written.items() if how == "inout"}
    outs = [(names.index(p), a.name) for p, a in by_name.items()
            if isinstance(a, Buf) and launch.written.get(a.name) == "out"]
    outs.sort()
    stores = stored_params(tritonplug.process.state.state.kernels.get(kernel))
    shared = {a.name for a in by_name.values() if isinstance(a, Buf)
              and sum(b is a or (isinstance(b, Buf) and b.name == a.name) for b in by_name.values()) > 1}
    keywords = {p: (refs.get(a.name, inputs.get(a.name)) if not (a.name in shared and p not in stores)
                    else inputs[a.name]) if isinstance(a, Buf) else a  # a shared buffer: the writer gets the ref
                for p, a in by_name.items() if not (isinstance(a, Buf) and launch.written.get(a.name) == "out")}
    out_type = [jax.ShapeDtypeStruct(inputs[n].shape, inputs[n].dtype) for _, n in outs]
    results = tritonplug.triton_call(kernel=kernel, grid=launch.grid, out_type=out_type, **keywords, **options)
    got = {n: r[...] for n, r in refs.items()}
    got.update({n: value for (_, n), value in zip(outs, results or (), strict=True)})
    return got


def _aliases(launch: Launch, kernel: Any, inputs: dict[str, Any]) -> dict[str, Any]:
    names, by_name, options = named_arguments(launch, kernel)
    written_at = [i for i, p in enumerate(names)
                  if isinstance(by_name.get(p), Buf) and by_name[p].name in launch.written]
    prefix = names[:max(written_at) + 1]
    positional, aliases, out_type, order = [], {}, [], []
    operand = 0  # jax-triton 0.4 counts every operand (scalars included), never a constexpr
    for index, param in enumerate(prefix):
        spec = jit_function(kernel).params[index]
        arg = by_name.get(param, spec.default)
        if isinstance(arg, Buf) and arg.name in launch.written:
            aliases[operand] = len(out_type)
            out_type.append(jax.ShapeDtypeStruct(inputs[arg.name].shape, inputs[arg.name].dtype))
            order.append(arg.name)
        positional.append(_value(arg, inputs))
        operand += not spec.is_constexpr
    keywords = {p: _value(a, inputs) for p, a in by_name.items() if p not in prefix}
    results = tritonplug.triton_call(*positional, kernel=kernel, grid=launch.grid, out_type=out_type,
                                     input_output_aliases=aliases, **keywords, **options)
    return dict(zip(order, results, strict=True))


def check(launch: Launch, got: dict[str, np.ndarray]) -> None:
    """Every buffer the reference gives must match; a mismatch is a wrong result and fails."""
    assert launch.expect is not None, launch.id
    expected = launch.expect({k: v.copy() for k, v in launch.buffers.items()})
    for name, want in expected.items():
        value = launch.post[name](got[name]) if name in launch.post else got[name]
        np.testing.assert_allclose(np.asarray(value, dtype=np.float64), np.asarray(want, dtype=np.float64),
                                   rtol=launch.rtol, atol=launch.atol, err_msg=f"{launch.id}: buffer {name}")


def outcome(launch: Launch, shape: str) -> tuple[str, str]:
    """("right" | "wrong" | "error", detail) for reports: never raises."""
    try:
        got = run(launch, shape)
    except Exception as exc:  # the report lists it
        return "error", f"{type(exc).__name__}: {_first_lines(str(exc))}"
    try:
        check(launch, got)
    except AssertionError as exc:
        return "wrong", _first_lines(str(exc))
    return "right", ""


def _first_lines(text: str, n: int = 6) -> str:
    return re.sub(r"\n\s*\n", "\n", "\n".join(text.strip().splitlines()[:n]))
