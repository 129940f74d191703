"""The Triton kernels of a torch library, without torch: ``tritonplug.kernels_of("liger_kernel.ops.rms_norm")``.

Kernel libraries (Liger-Kernel, flash-linear-attention, FlagGems …) ``import torch`` at the top of every
module, although their ``@triton.jit`` functions never touch it. When torch imports, ``kernels_of`` simply
imports the module. Otherwise it reads the module's installed source and runs only what its kernels need:
each ``@triton.jit`` / ``triton.autotune`` / ``triton.heuristics`` definition, and the module-level helpers,
constants and imports they read (found by CPython's own scope analysis, ``symtable``), in dependency order.
The selected statements are compiled from the parsed source with the file's real name and line numbers,
so ``inspect.getsource``, Triton's error locations and its cache key see the library's file.

* Imports from the same library (absolute or relative) are loaded the same way, recursively and per name,
  through an ``__import__`` hook in the loaded code's builtins; packages' ``__init__.py`` are never run whole.
* Other imports are real imports. One that fails (``import torch``) binds a stand-in that raises a
  :class:`~tritonplug.errors.KernelImportError` naming the name, the module, the line and where it was used,
  the moment anything uses it, and a definition that fails to run binds one for each name it defines: a
  helper that touches torch only on some path (``calculate_settings`` calls ``is_hip()`` for huge blocks)
  keeps working on the others.
* A wrapper above a kernel's Triton decorators (FlagGems' ``@libentry()``, a launch-side cache) is applied
  when it runs without torch; when it needs torch, the kernel is loaded without it and a
  :class:`WrapperDroppedWarning` says so.
* A Triton stand-in a library binds without torch (vLLM's ``TritonPlaceholder``) is replaced by what the statement
  imports from Triton for that name on its other branch (:func:`_replace_triton_stand_ins`).
* Loaded modules are plain ``types.ModuleType`` objects (Triton accepts only those as globals in a kernel)
  whose names load on first access; they are kept for the process, as ``sys.modules`` keeps imports,
  so every caller sees the same kernel objects; they are not entered in ``sys.modules``.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import importlib.util
import sys
import threading
import types
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tritonplug.errors import KernelImportError
from tritonplug.porting.kernel_source_ast import ModuleFile, Unit, find_module_file, read_module, strip_outer_wrappers

__all__ = ["KernelImportError", "WrapperDroppedWarning", "kernels_from_file", "kernels_of", "torch_imports"]


class WrapperDroppedWarning(UserWarning):
    """A kernel was loaded without a wrapper decorator of its library that needs torch."""


def torch_imports() -> bool:
    """Whether ``import torch`` works in this process (imports it if so)."""
    if "torch" in sys.modules:
        return True
    try:
        importlib.import_module("torch")
    except Exception:  # a broken torch (missing CUDA libraries …) counts as absent
        return False
    return True


def kernels_of(module: str, *, use_import: bool | None = None) -> types.ModuleType:
    """The module ``module`` of a kernel library, or, without torch, its Triton kernels loaded from source.

    ``use_import``: None (default) imports the module when torch imports and loads from source otherwise;
    True always imports; False always loads from source. Names that need torch raise
    :class:`~tritonplug.errors.KernelImportError` (an ``ImportError``) when used.
    """
    if not isinstance(module, str) or not module or not all(p.isidentifier() for p in module.split(".")):
        raise ValueError(f"kernels_of: `module` must be a dotted module name such as 'liger_kernel.ops.rms_norm', "
                         f"got {module!r}")
    if use_import is not None and not isinstance(use_import, bool):
        raise TypeError(f"kernels_of: `use_import` must be None, True or False, got {use_import!r}")
    if use_import is None:
        use_import = torch_imports()
    if use_import:
        return importlib.import_module(module)
    with _REGISTRY.lock:
        loader = _REGISTRY.loader(module)
        dropped = loader.load_kernels()
    if dropped:
        _warn_dropped(loader.name, dropped)
    return loader.module


def kernels_from_file(path: str | Path, *, name: str | None = None) -> types.ModuleType:
    """The Triton kernels of a standalone script (a tutorial, an example) loaded from its source as
    :func:`kernels_of` does for a module without torch; the file is never run whole. ``name`` (default: the
    file's stem) is the module name its functions report."""
    file = Path(path).resolve()
    if not file.is_file() or file.suffix != ".py":
        raise FileNotFoundError(f"kernels_from_file: `path` must be a Python source file, got {str(path)!r}")
    module_name = name or file.stem.replace("-", "_")
    with _REGISTRY.lock:
        key = f"file:{file}"
        loader = _REGISTRY.loaders.get(key)
        if loader is None:
            loader = _REGISTRY.loaders[key] = _Loader(_REGISTRY, ModuleFile(module_name, file, False, ()))
        dropped = loader.load_kernels()
    if dropped:
        _warn_dropped(module_name, dropped)
    return loader.module


def _replace_triton_stand_ins(node: ast.AST, bound: frozenset[str], namespace: dict[str, Any]) -> None:
    """A name of ``bound`` holding a stand-in module gets what ``node`` imports from Triton for it on another branch."""
    stand_ins = {name for name in bound if isinstance(value := namespace.get(name), types.ModuleType)
                 and sys.modules.get(value.__name__) is not value}
    if not stand_ins:
        return  # the common case: no walk over the statement (a kernel's whole body)
    imports: dict[str, tuple[str, str | None]] = {}
    for sub in ast.walk(node):
        if isinstance(sub, ast.Import):
            for alias in sub.names:
                if alias.name.split(".")[0] == "triton":
                    path = alias.name if alias.asname else alias.name.split(".")[0]
                    imports[alias.asname or path] = (path, None)
        elif isinstance(sub, ast.ImportFrom) and not sub.level and (sub.module or "").split(".")[0] == "triton":
            for alias in sub.names:
                imports[alias.asname or alias.name] = (str(sub.module), alias.name)
    for name in stand_ins & imports.keys():
        path, attr = imports[name]
        try:
            module = importlib.import_module(path)
            namespace[name] = module if attr is None else getattr(module, attr, None) or importlib.import_module(
                f"{path}.{attr}")
        except ImportError:
            pass  # the stand-in stays: using it fails as the library's own would


def _warn_dropped(module: str, dropped: dict[str, str]) -> None:
    by_wrapper: dict[str, list[str]] = {}
    for name, what in dropped.items():
        by_wrapper.setdefault(what, []).append(name)
    listing = "; ".join(f"{', '.join(names)} without {what}" for what, names in by_wrapper.items())
    warnings.warn(f"tritonplug.kernels_of({module!r}): loaded {listing}; the kernels themselves do not need torch",
                  WrapperDroppedWarning, stacklevel=3)


def _missing_module(exc: BaseException | None) -> str | None:
    """The module whose absence caused ``exc`` (torch …), following the exception's causes."""
    seen = 0
    while exc is not None and seen < 32:
        if isinstance(exc, KernelImportError | ModuleNotFoundError) and exc.name:
            return exc.name
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return None


def _describe(exc: BaseException) -> str:
    return str(exc) if isinstance(exc, KernelImportError) else f"{type(exc).__name__}: {exc}"


def _where(frame: types.FrameType | None) -> str:
    if frame is None:
        return ""
    return f" in {frame.f_code.co_name} at {_short(frame.f_code.co_filename)}:{frame.f_lineno}"


def _short(filename: str) -> str:
    parts = Path(filename).parts
    for marker in ("site-packages", "dist-packages"):
        if marker in parts:
            return "/".join(parts[parts.index(marker) + 1:])
    return filename


class Unavailable:
    """Stands in, in a loaded module's globals, for a name that could not be loaded without torch:
    any use raises a ``KernelImportError`` naming it, what it needed and where it was used. Dunder lookups
    raise ``AttributeError``, so introspection (``hasattr(x, '__wrapped__')``, copying) still works."""

    __slots__ = ("links", "reason", "missing", "path", "cause")

    def __init__(self, links: tuple[str, ...], reason: str, missing: str | None, path: str,
                 cause: BaseException | None) -> None:
        for key, value in zip(self.__slots__, (links, reason, missing, path, cause), strict=True):
            object.__setattr__(self, key, value)

    def error(self, use: str = "") -> KernelImportError:
        head, *rest = self.links
        text = f"{head} needs {self.missing or 'an import that fails here'}"
        if rest:
            text += ", through " + " -> ".join(rest)
        top = head.split(".")[0]
        text += (f": {self.reason}{use}. (tritonplug.kernels_of loads {top}'s Triton kernels from their source "
                 "when torch does not import; only what does not need it can be used.)")
        error = KernelImportError(text, name=self.missing, path=self.path)
        error.links, error.reason = self.links, self.reason  # type: ignore[attr-defined]
        return error

    def kernel_import_error(self, use: str) -> KernelImportError:
        """The error for a kernel that uses this name (the compile front end asks, ``triton_compat``)."""
        return self.error(use)

    def _raise(self, use: str) -> None:
        raise self.error(f" ({use}{_where(sys._getframe(2))})") from self.cause

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__") and attr.endswith("__"):
            raise AttributeError(attr)
        self._raise(f"`.{attr}` was used")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self._raise("it was called")

    def __repr__(self) -> str:
        return f"<unavailable {self.links[0]}: needs {self.missing}>"


def _refuse(op: str) -> Callable[..., Any]:
    def refuse(self: Unavailable, *args: Any) -> Any:
        self._raise(f"used as {op}")
    return refuse


for _op in ("bool", "index", "int", "float", "len", "iter", "getitem", "setitem", "contains", "enter", "lt", "le",
            "gt", "ge", "add", "radd", "sub", "rsub", "mul", "rmul", "truediv", "floordiv", "mod", "pow", "neg",
            "and", "or", "xor", "rand", "ror", "invert", "matmul", "lshift", "rshift"):
    setattr(Unavailable, f"__{_op}__", _refuse(f"__{_op}__"))


class _Registry:
    """Every module loaded from source in this process, by name; the ``__import__`` hook their code runs with."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.loaders: dict[str, _Loader] = {}
        self.builtins = dict(builtins.__dict__, __import__=self.import_hook)

    def loader(self, name: str) -> _Loader:
        loader = self.loaders.get(name)
        if loader is None:
            loader = self.loaders[name] = _Loader(self, find_module_file(name))
        return loader

    def import_hook(self, name: str, globals: dict | None = None, locals: Any = None,
                    fromlist: Any = (), level: int = 0) -> types.ModuleType:
        """``__import__`` for loaded code: the importing module's own library loads from source, the rest imports."""
        importer = (globals or {}).get("__name__", "")
        absolute = name
        if level:
            absolute = importlib.util.resolve_name("." * level + name, (globals or {}).get("__package__") or "")
        top = absolute.split(".")[0]
        if not importer or top != importer.split(".")[0]:
            return builtins.__import__(name, None, None, fromlist, 0)
        with self.lock:
            parts = absolute.split(".")
            for depth in range(1, len(parts) + 1):  # a missing module fails here, as ``import`` would
                self.loader(".".join(parts[:depth]))
            return self.loader(absolute if fromlist else top).module


_REGISTRY = _Registry()


class _Loader:
    """One module loaded from its source: its globals, its module object, which units have run."""

    def __init__(self, registry: _Registry, file: ModuleFile) -> None:
        self.registry = registry
        self.file = file
        self.name = file.name
        self.source = read_module(file)
        self.package = file.name if file.is_package else file.name.rpartition(".")[0]
        self.filename = str(file.path) if file.path else f"<namespace package {file.name}>"
        self.dropped: dict[str, str] = {}
        self.star_done = False
        self.globals: dict[str, Any] = {
            "__name__": file.name, "__file__": self.filename, "__package__": self.package,
            "__builtins__": registry.builtins, "__spec__": None, "__loader__": None, "__doc__": None,
        }
        module = types.ModuleType(file.name, f"{file.name}: Triton kernels loaded from {self.filename} "
                                             "by tritonplug.kernels_of (torch not imported)")
        module.__file__ = self.filename
        module.__package__ = self.package
        if file.is_package:
            self.globals["__path__"] = module.__path__ = list(file.search_locations)
        vars(module).update(__getattr__=self.module_getattr, __dir__=self.names)  # PEP 562: names load when read
        self.module = module

    # -- names ---------------------------------------------------------------------------------------
    def names(self) -> list[str]:
        return sorted({*self.source.by_name, *(n for n in self.globals if not n.startswith("__"))})

    def kernel_names(self) -> list[str]:
        return [name for unit in self.source.kernels for name in sorted(unit.bound)]

    def module_getattr(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__") and name not in self.source.by_name:
            raise AttributeError(f"module {self.name!r} has no attribute {name!r}")
        with self.registry.lock:
            before = dict(self.dropped)
            value = self.lookup(name)
            dropped = {k: v for k, v in self.dropped.items() if k not in before}
        if dropped:
            _warn_dropped(self.name, dropped)
        return value

    def lookup(self, name: str) -> Any:
        """``name``'s value, loading it (and what it reads) first; a submodule of a package; or an error."""
        self.ensure(name)
        if name in self.globals:
            value = self.globals[name]
            if isinstance(value, Unavailable):
                raise value.error() from value.cause
            return value
        if self.file.is_package:
            try:
                loader = self.registry.loader(f"{self.name}.{name}")
            except ImportError:
                pass
            else:
                self.globals[name] = loader.module
                return loader.module
        raise AttributeError(f"module {self.name!r} ({self.filename}, loaded from source by tritonplug.kernels_of) "
                             f"has no attribute {name!r}")

    def load_kernels(self) -> dict[str, str]:
        """Run every kernel definition of the module; returns the wrappers dropped by this call."""
        before = dict(self.dropped)
        for unit in self.source.kernels:
            self.run(unit)
        return {k: v for k, v in self.dropped.items() if k not in before}

    def ensure(self, name: str) -> None:
        units = self.source.by_name.get(name)
        if units:
            for unit in units:
                self.run(unit)
        elif name not in self.globals and self.source.star_imports and not self.star_done:
            self.star_done = True
            for unit in self.source.star_imports:
                self.run(unit)

    # -- running units -------------------------------------------------------------------------------
    def run(self, unit: Unit) -> None:
        if unit.state != "new":
            return  # done, failed, or being loaded further up (a cycle, as Python's partial modules)
        unit.state = "loading"
        for name in sorted(unit.reads):
            self.ensure(name)
        try:
            self.execute(unit)
        except Exception as exc:
            unit.state = "failed"
            self.bind_failure(unit, exc)
        else:
            unit.state = "done"

    def compile(self, node: ast.stmt) -> types.CodeType:
        return compile(ast.Module(body=[node], type_ignores=[]), self.filename, "exec",
                       flags=self.source.compile_flags, dont_inherit=True)

    def execute(self, unit: Unit) -> None:
        node = unit.node
        if unit.import_alias is not None:
            if isinstance(node, ast.ImportFrom):
                node = ast.ImportFrom(module=node.module, names=[unit.import_alias], level=node.level)
            else:
                node = ast.Import(names=[unit.import_alias])
            node = ast.fix_missing_locations(ast.copy_location(node, unit.node))
        try:
            exec(self.compile(node), self.globals)
            _replace_triton_stand_ins(node, unit.bound, self.globals)
        except Exception as exc:
            stripped = strip_outer_wrappers(unit, self.source.origins) if unit.is_kernel else None
            if stripped is None or _missing_module(exc) is None:
                raise
            try:
                exec(self.compile(stripped), self.globals)
            except Exception:
                raise exc from None
            assert isinstance(unit.node, ast.FunctionDef)
            count = len(unit.node.decorator_list) - len(stripped.decorator_list)  # type: ignore[attr-defined]
            wrappers = ", ".join(f"@{ast.unparse(d)}" for d in unit.node.decorator_list[:count])
            links = getattr(exc, "links", None)
            why = f"{links[0].split(' (')[0]} needs {_missing_module(exc)}" if links else _describe(exc)
            self.dropped[unit.node.name] = f"{wrappers} ({why})"

    def bind_failure(self, unit: Unit, exc: Exception) -> None:
        where = f"{_short(self.filename)}:{unit.first_line}"
        if unit.import_alias is not None:
            where = f"`{ast.unparse(self._one_alias(unit))}`, {where}"
        inner = getattr(exc, "links", None)
        reason = exc.reason if inner else _describe(exc)  # type: ignore[attr-defined]
        for name in sorted(unit.bound):
            if name in self.globals and not isinstance(self.globals[name], Unavailable):
                continue  # bound before the statement failed (a try/if block)
            links = (f"{self.name}.{name} ({where})", *(inner or ()))
            self.globals[name] = Unavailable(links, reason, _missing_module(exc), self.filename, exc)

    @staticmethod
    def _one_alias(unit: Unit) -> ast.stmt:
        node, alias = unit.node, unit.import_alias
        assert alias is not None, "the unit of one imported name"
        if isinstance(node, ast.ImportFrom):
            return ast.ImportFrom(module=node.module, names=[alias], level=node.level)
        return ast.Import(names=[alias])
