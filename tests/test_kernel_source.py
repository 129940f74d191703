"""``tritonplug.kernels_of``: a library module's Triton kernels loaded from its source without torch.

The library here is a real package written to disk (``import torch`` at the top of every module, a package
``__init__`` that must never run, a torch-only wrapper decorator, a launcher); the real installed libraries
are loaded in ``tests/corpus``. Every test loads with ``use_import=False``, so it holds on a machine with
torch too.
"""

from __future__ import annotations

import inspect
import sys
import textwrap
import uuid
import warnings
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import triton

import tritonplug
from tritonplug.porting.kernel_source import WrapperDroppedWarning, kernels_from_file, kernels_of

FILES = {
    "__init__.py": """
        import torch
        raise RuntimeError("the package __init__ ran")
    """,
    "utils.py": """
        import functools
        import torch
        import triton

        BLOCK = 128
        DTYPES = {torch.float32: "fp32"}

        def is_hip():
            return torch.version.hip is not None

        def settings(n):
            block = triton.next_power_of_2(n)
            if block > 4096:
                return block, (16 if not is_hip() else 8)
            return block, 4

        def cached(fn):  # a launch-side wrapper, like FlagGems' libentry(), that needs torch
            fn.devices = torch.cuda.device_count()
            return fn
    """,
    "ops/__init__.py": """
        from .add import add  # noqa
        raise RuntimeError("the ops __init__ ran")
    """,
    "ops/helpers.py": """
        import triton
        import triton.language as tl

        @triton.jit
        def scaled(x, factor: tl.constexpr):
            return x * factor


        @triton.autotune(configs=[triton.Config({"B": b}) for b in (16, 32)], key=["n"])
        @triton.jit
        def tuned(x_ptr, n, B: tl.constexpr):
            tl.store(x_ptr + tl.arange(0, B), 0.0, mask=tl.arange(0, B) < n)
    """,
    "ops/add.py": """
        import torch
        import triton
        import triton.language as tl

        from ..utils import BLOCK, DTYPES, cached, settings
        from PKG.ops.helpers import scaled

        SCALE: tl.constexpr = tl.constexpr(2)


        @triton.jit
        def add_kernel(x_ptr, out_ptr, y_ptr, n, BLOCK_SIZE: tl.constexpr):
            offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
            mask = offs < n
            x = tl.load(x_ptr + offs, mask=mask)
            y = tl.load(y_ptr + offs, mask=mask)
            tl.store(out_ptr + offs, scaled(x + y, SCALE), mask=mask)


        @cached
        @triton.jit
        def wrapped_kernel(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
            offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
            tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


        @triton.autotune(configs=[triton.Config({"BLOCK_SIZE": 64})], key=["n"])
        @triton.jit
        def broken_kernel(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
            offs = tl.arange(0, BLOCK_SIZE)
            tl.store(out_ptr + offs, tl.load(x_ptr + offs) + undefined_name)


        def add(x, y):
            out = torch.empty_like(x)
            add_kernel[(triton.cdiv(x.numel(), BLOCK),)](x, out, y, x.numel(), BLOCK_SIZE=BLOCK)
            return out
    """,
}


@pytest.fixture(scope="module")
def library(tmp_path_factory) -> tuple[str, Path]:
    """A fresh package name per session: loaded modules are kept for the process, as imports are."""
    name = f"torchlib_{uuid.uuid4().hex[:8]}"
    root = tmp_path_factory.mktemp("site")
    write_package(root, name, FILES)
    sys.path.insert(0, str(root))
    yield name, root / name
    sys.path.remove(str(root))


def write_package(root: Path, name: str, files: dict[str, str]) -> None:
    """``files`` (relative path: source, ``PKG`` standing for ``name``) written as the package ``root/name``."""
    for relative, text in files.items():
        path = root / name / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).replace("PKG", name).lstrip())


def line_of(path: Path, needle: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if needle in line)


def test_kernels_load_without_running_the_package_or_importing_torch(library):
    name, root = library
    torch_before = "torch" in sys.modules
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", WrapperDroppedWarning)
        ops = kernels_of(f"{name}.ops.add", use_import=False)
    assert isinstance(ops.add_kernel, triton.JITFunction)
    assert isinstance(ops.broken_kernel, triton.runtime.Autotuner)
    assert ("torch" in sys.modules) == torch_before  # nothing imported torch
    assert ops.__file__ == str(root / "ops" / "add.py")
    # the same objects for every caller, as an import would give
    assert kernels_of(f"{name}.ops.add", use_import=False).add_kernel is ops.add_kernel
    assert kernels_of(f"{name}.ops.helpers", use_import=False).scaled is ops.scaled
    assert ops.BLOCK == 128 and ops.settings(100) == (128, 4)


def test_a_comprehension_in_a_decorator_binds_no_module_name(library):
    """Python 3.12 inlines comprehensions (PEP 709): their loop variables are not the module's names."""
    name, _ = library
    helpers = kernels_of(f"{name}.ops.helpers", use_import=False)
    assert isinstance(helpers.tuned, triton.runtime.Autotuner)
    assert "b" not in dir(helpers) and {"scaled", "tuned", "triton", "tl"} <= set(dir(helpers))


def test_the_kernel_sees_the_library_file_and_lines(library):
    name, root = library
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", WrapperDroppedWarning)
        ops = kernels_of(f"{name}.ops.add", use_import=False)
    fn = ops.add_kernel.fn
    path = root / "ops" / "add.py"
    assert fn.__code__.co_filename == str(path)
    source, first = inspect.getsourcelines(fn)
    assert first == line_of(path, "def add_kernel") - 1  # its decorator's line, as for an imported function
    assert source[1].startswith("def add_kernel(") and ops.add_kernel.starting_line_number == first


def test_a_loaded_kernel_runs_through_triton_call(library):
    name, _ = library
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", WrapperDroppedWarning)
        ops = kernels_of(f"{name}.ops.add", use_import=False)
    x, y = np.arange(300, dtype=np.float32), np.ones(300, dtype=np.float32)
    out = tritonplug.triton_call(jnp.asarray(x), kernel=ops.add_kernel, grid=(3,),
                                 out_type=jax.ShapeDtypeStruct((300,), jnp.float32),
                                 y_ptr=jnp.asarray(y), n=300, BLOCK_SIZE=ops.BLOCK)
    np.testing.assert_array_equal(np.asarray(out), (x + y) * 2)


def test_names_that_need_torch_fail_naming_the_name_and_the_module(library):
    name, root = library
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", WrapperDroppedWarning)
        ops = kernels_of(f"{name}.ops.add", use_import=False)
    with pytest.raises(tritonplug.KernelImportError, match=rf"{name}\.ops\.add\.DTYPES .*needs torch, through "
                                                              rf"{name}\.utils\.DTYPES .*utils\.py:6\)") as info:
        _ = ops.DTYPES
    assert isinstance(info.value, ImportError) and info.value.name == "torch"
    # a launcher loads (its body runs later) and fails where it first touches torch, naming that line
    with pytest.raises(ImportError, match=rf"{name}\.ops\.add\.torch \(`import torch`.*`\.empty_like` was used in "
                                          r"add at .*add\.py:\d+"):
        ops.add(np.ones(3), np.ones(3))
    # a helper touching torch only on one path works on the others
    utils = kernels_of(f"{name}.utils", use_import=False)
    assert utils.settings(4096) == (4096, 4)
    with pytest.raises(ImportError, match=r"`\.version` was used in is_hip"):
        utils.settings(10_000)
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        _ = ops.nothing_here


def test_a_wrapper_that_needs_torch_is_dropped_with_a_warning(library):
    name, _ = library
    with pytest.warns(WrapperDroppedWarning, match=r"wrapped_kernel without @cached .*needs torch"):
        ops = _fresh_wrapped(name)
    assert isinstance(ops.wrapped_kernel, triton.JITFunction)


def _fresh_wrapped(name: str):
    """The warning is given when a kernel is first loaded: load through a module of its own."""
    from tritonplug.porting.kernel_source import _REGISTRY

    _REGISTRY.loaders.pop(f"{name}.ops.add", None)
    return kernels_of(f"{name}.ops.add", use_import=False)


def test_a_triton_source_error_points_at_the_library_file(library):
    name, root = library
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", WrapperDroppedWarning)
        ops = kernels_of(f"{name}.ops.add", use_import=False)
    path = root / "ops" / "add.py"
    line = line_of(path, "undefined_name")
    with pytest.raises(tritonplug.KernelSourceError) as info:
        tritonplug.triton_call(jnp.ones(64), kernel=ops.broken_kernel, grid=(1,),
                               out_type=jax.ShapeDtypeStruct((64,), jnp.float32), n=64)
    assert f'File "{path}", line {line}' in str(info.value), str(info.value)


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="`module` must be a dotted module name"):
        kernels_of("not a module")
    with pytest.raises(TypeError, match="`use_import` must be None, True or False"):
        kernels_of("json", use_import="yes")
    with pytest.raises(ModuleNotFoundError, match="no module named 'no_such_library_xyz.ops'"):
        kernels_of("no_such_library_xyz.ops", use_import=False)
    import json

    assert kernels_of("json", use_import=True) is json


def test_use_import_imports_the_module_for_real(library):
    name, _ = library
    with pytest.raises(ImportError):  # the package __init__ runs: torch, or the RuntimeError after it
        try:
            kernels_of(f"{name}.ops.add", use_import=True)
        except RuntimeError as exc:
            raise ImportError(str(exc)) from exc


def test_a_script_loads_from_its_file(tmp_path):
    script = tmp_path / "01-vector-add.py"
    script.write_text(textwrap.dedent("""
        import torch
        import triton
        import triton.language as tl
        DEVICE = triton.runtime.driver.active.get_active_torch_device()

        @triton.jit
        def add_kernel(x_ptr, y_ptr, output_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
            offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
            mask = offsets < n_elements
            tl.store(output_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask),
                     mask=mask)

        x = torch.rand(98432, device=DEVICE)
        raise SystemExit("the script ran")
    """))
    tutorial = kernels_from_file(script)
    assert tutorial.add_kernel.fn.__code__.co_filename == str(script)
    assert inspect.getsourcelines(tutorial.add_kernel.fn)[1] == line_of(script, "@triton.jit")
    with pytest.raises(FileNotFoundError, match="`path` must be a Python source file"):
        kernels_from_file(tmp_path / "missing.py")


def test_a_kernel_using_a_name_whose_import_failed_is_refused_at_the_call_naming_the_package(tmp_path):
    """A library's dependency (not torch) missing: the kernel loads, and the call, before anything is compiled,
    raises a KernelImportError naming the package, the import line and the kernel, not Triton's "Unsupported
    function referenced"."""
    import jax
    import jax.numpy as jnp

    source = tmp_path / "needs_a_package.py"
    source.write_text("import triton\nimport triton.language as tl\nfrom not_a_real_package_xyz import fast_scale\n\n\n"
                      "@triton.jit\ndef scale_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):\n"
                      "    offs = tl.arange(0, BLOCK)\n"
                      "    tl.store(out_ptr + offs, fast_scale(tl.load(x_ptr + offs)))\n")
    module = tritonplug.kernels_from_file(source)
    x = jnp.ones(16)
    with pytest.raises(tritonplug.KernelImportError, match=r"fast_scale \(`from not_a_real_package_xyz import "
                       r"fast_scale`, .*needs_a_package.py:3\) needs not_a_real_package_xyz.*kernel 'scale_kernel'"):
        tritonplug.triton_call(x, kernel=module.scale_kernel, out_type=jax.typeof(x), grid=(1,), BLOCK=16)


STANDIN_FILES = {
    "__init__.py": "raise RuntimeError('the package __init__ ran')\n",
    "utils.py": """
        import types

        import triton as real_triton

        HAS_TRITON = False  # vLLM's check, which asks torch for a GPU driver


        class Placeholder(types.ModuleType):  # vLLM's TritonPlaceholder
            def __init__(self, name="triton"):
                super().__init__(name)
                self.jit = lambda fn=None, **kwargs: fn if fn is not None else (lambda f: f)


        if HAS_TRITON:
            import triton
            import triton.language as tl
            import triton.language.extra.libdevice as tldevice
            from triton.no_such_module_xyz import missing
        else:
            triton = Placeholder()
            tl = Placeholder("triton.language")
            tldevice = Placeholder("triton.language")  # named as vLLM names it: not the module it stands for
            missing = Placeholder("triton.no_such_module_xyz")
        not_triton = Placeholder("triton")  # a stand-in with no Triton import beside it
    """,
    "kernels.py": """
        from PKG.utils import missing, not_triton, real_triton, tl, tldevice, triton


        @triton.jit
        def k(out_ptr, BLOCK: tl.constexpr):
            tl.store(out_ptr + tl.arange(0, BLOCK), 1.0)
    """,
}


def test_a_library_stand_in_for_triton_is_replaced_by_the_real_module(tmp_path, monkeypatch):
    """A stand-in module for Triton (vLLM's ``TritonPlaceholder``, whose ``jit`` returns the function) becomes what
    the same statement imports for that name on its other branch, in every unit that binds it; a real module passes
    through untouched."""
    name = f"fakelib_{uuid.uuid4().hex[:8]}"
    write_package(tmp_path, name, STANDIN_FILES)
    monkeypatch.syspath_prepend(str(tmp_path))
    module = kernels_of(f"{name}.kernels", use_import=False)
    assert isinstance(module.k, triton.runtime.jit.JITFunction)
    assert module.triton is sys.modules["triton"] and module.tl is sys.modules["triton.language"]
    assert module.tldevice is sys.modules["triton.language.extra.libdevice"]  # the import's module, not its name
    utils = kernels_of(f"{name}.utils", use_import=False)
    assert utils.triton is sys.modules["triton"]  # replaced where the stand-in is first bound too
    assert module.real_triton is sys.modules["triton"] is triton  # the real module: the same object
    # no Triton import beside it, or an import that fails: left as the library bound it
    assert isinstance(module.not_triton, utils.Placeholder)
    assert isinstance(module.missing, utils.Placeholder)
    out = tritonplug.triton_call(kernel=module.k, grid=(1,), out_type=jax.ShapeDtypeStruct((16,), jnp.float32),
                                 BLOCK=16)
    np.testing.assert_array_equal(np.asarray(out), np.ones(16, np.float32))


def test_a_module_under_namespace_packages_of_an_unimported_package_loads(tmp_path, monkeypatch):
    """A regular package (never run) holding directories without ``__init__.py`` (vLLM's sources copied without
    them): their search paths come from the directories, not from the parent module, which is not imported."""
    name = f"nslib_{uuid.uuid4().hex[:8]}"
    write_package(tmp_path, name, {"__init__.py": 'raise RuntimeError("the package __init__ ran")',
                                   "mid/deeper/kern.py": """
                                       import triton
                                       import triton.language as tl

                                       @triton.jit
                                       def fill_kernel(out_ptr, BLOCK: tl.constexpr):
                                           tl.store(out_ptr + tl.arange(0, BLOCK), 2.0)
                                   """})
    monkeypatch.syspath_prepend(str(tmp_path))
    module = kernels_of(f"{name}.mid.deeper.kern", use_import=False)
    assert module.__file__ == str(tmp_path / name / "mid" / "deeper" / "kern.py") and name not in sys.modules
    out = tritonplug.triton_call(kernel=module.fill_kernel, grid=(1,),
                                 out_type=jax.ShapeDtypeStruct((8,), jnp.float32), BLOCK=8)
    np.testing.assert_array_equal(np.asarray(out), np.full(8, 2.0, np.float32))
