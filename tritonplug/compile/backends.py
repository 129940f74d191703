"""The plugin manager: loads backends from entry points and picks one per JAX platform.

A plugin that fails to import, implements hooks that do not match the specs, or raises
while describing itself is reported with a warning naming it; the others keep working.
A hook that raises (other than ``ValueError``/``TypeError``/``NotImplementedError``, which
describe the user's call) or returns the wrong type becomes a ``PluginError`` naming the
backend. Two backends claiming one platform is recorded as a problem (``tritonplug info``)
and is an error when that platform is lowered, until ``TRITONPLUG_BACKENDS`` picks one.
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Mapping
from typing import Any

import pluggy

from tritonplug import hookspecs, settings
from tritonplug.adapters import plugin_hooks
from tritonplug.calls import user_warnings
from tritonplug.errors import PluginError
from tritonplug.records import (
    AUTOTUNE_MODES,
    BUFFER_ORDERS,
    IR_STAGES,
    TENSOR_DESCRIPTOR_MODES,
    BackendInfo,
    Binary,
    CompileJob,
    GpuKernel,
    HostKernel,
    JaxKernel,
    KernelObject,
    Launch,
    Options,
    Target,
)

REQUIRED_HOOKS = (
    "tritonplug_backend_info",
    "tritonplug_detect_target",
    "tritonplug_parse_options",
    "tritonplug_compile",
    "tritonplug_make_kernel",
)
# Errors that describe the user's call rather than a broken plugin: they pass through.
USER_ERRORS = (ValueError, TypeError, NotImplementedError)


#: Where a backend that declares ``inlines`` lowers a call given ``inline=True``: the CPU and the GPUs Triton
#: compiles for (its translation is XLA ops, which each of them compiles).
INLINE_PLATFORMS = ("cpu", "cuda", "rocm")


class Backend:
    """One loaded plugin: its description and typed access to its hooks."""

    def __init__(self, manager: pluggy.PluginManager, plugin: object, info: BackendInfo, source: str,
                 from_entry_point: bool = False):
        self._manager = manager
        self.plugin = plugin
        self.info = info
        self.source = source
        self.from_entry_point = from_entry_point

    @property
    def name(self) -> str:
        return self.info.name

    @property
    def compiles_in_worker(self) -> bool:
        """Workers find backends through entry points, so one registered at run time compiles here."""
        return self.info.compile_in_worker and self.from_entry_point

    def _call(self, hook: str, returns: tuple[type, ...], **kwargs: Any) -> Any:
        others = [p for p in self._manager.get_plugins() if p is not self.plugin]
        caller = self._manager.subset_hook_caller(hook, remove_plugins=others)
        try:
            result = caller(**kwargs)
        except USER_ERRORS:
            raise
        except PluginError:
            raise
        except Exception as exc:
            raise PluginError(f"backend {self.name!r} raised in {hook}: {type(exc).__name__}: {exc}") from exc
        if not isinstance(result, returns):
            expected = " or ".join("None" if t is type(None) else t.__name__ for t in returns)
            raise PluginError(f"backend {self.name!r}: {hook} returned {type(result).__name__} {result!r:.200}, "
                              f"not {expected}")
        return result

    def detect_target(self, platform: str, device: Any | None, requested: Mapping[str, Any]) -> Target | None:
        target = self._call("tritonplug_detect_target", (Target, type(None)), platform=platform, device=device,
                            requested=requested)
        if target is not None and self.info.ir_stages and target.triton_backend is None:
            raise PluginError(f"backend {self.name!r} compiles {list(self.info.ir_stages)} but its target "
                              f"{target.describe()} names no triton_backend for Triton's front end")
        limit = None if target is None else target.max_shared_mem
        if limit is not None and (type(limit) is not int or limit <= 0):
            raise PluginError(f"backend {self.name!r}: its target {target.describe()} has max_shared_mem "
                              f"{limit!r}, not a positive int of bytes or None")
        return target

    def parse_options(self, target: Target, call_options: Mapping[str, Any]) -> Options:
        return self._call("tritonplug_parse_options", (Options,), target=target, call_options=call_options)

    def compile(self, job: CompileJob) -> Binary:
        return self._call("tritonplug_compile", (Binary,), job=job)

    def make_kernel(self, target: Target, binary: Binary, launch: Launch) -> KernelObject:
        return self._call("tritonplug_make_kernel", (GpuKernel, HostKernel, JaxKernel), target=target, binary=binary,
                          launch=launch)


class Host:
    """Owns the pluggy manager and the map from backend names to loaded backends."""

    def __init__(self) -> None:
        self.manager = pluggy.PluginManager(hookspecs.PROJECT_NAME)
        self.manager.add_hookspecs(hookspecs)
        self.backends: dict[str, Backend] = {}
        self.problems: list[str] = []
        self._lock = threading.RLock()

    def load_entry_points(self) -> None:
        """Load every plugin of the entry-point group but those ``TRITONPLUG_DISABLE_PLUGINS`` names."""
        disabled = settings.DISABLE_PLUGINS.get()

        def register(plugin: object, name: str, source: str) -> None:
            self.register(plugin, name=name, source=source, strict=False, disabled=disabled, from_entry_point=True)

        plugin_hooks.load_entry_points(hookspecs.ENTRY_POINT_GROUP, {*disabled, *self.backends}, "plugin", register,
                                       self._report)
        for message in self.conflicts():
            self.problems.append(message)

    def conflicts(self) -> list[str]:
        """Platforms claimed by several backends that ``TRITONPLUG_BACKENDS`` does not settle."""
        chosen = settings.BACKENDS.get()
        claims: dict[str, list[str]] = {}
        for backend in self.backends.values():
            for platform in backend.info.platforms:
                claims.setdefault(platform, []).append(backend.name)
        return [_conflict_message(platform, names) for platform, names in claims.items()
                if len(names) > 1 and platform not in chosen]

    def register(self, plugin: object, name: str | None = None, source: str = "register_plugin",
                 strict: bool = True, disabled: Collection[str] = (), from_entry_point: bool = False) -> Backend | None:
        """Register ``plugin``; a broken one raises ``PluginError`` if ``strict``, else is reported.

        A plugin whose backend name is in ``disabled`` is unregistered again without a word.
        """
        with self._lock:
            try:
                backend = self._register(plugin, name, source, from_entry_point)
            except PluginError as exc:
                if strict:
                    raise
                self._report(str(exc))
                return None
            if backend.name in disabled:
                self.manager.unregister(plugin)
                del self.backends[backend.name]
                settings.withdraw(backend.name)
                return None
            return backend

    def _register(self, plugin: object, name: str | None, source: str, from_entry_point: bool) -> Backend:
        label: str = name or str(getattr(plugin, "__name__", type(plugin).__name__))
        if self.manager.is_registered(plugin):
            raise PluginError(f"plugin {label!r} is already registered")
        plugin_hooks.register(self.manager, plugin, label, f"plugin {label!r}", "tritonplug")
        try:
            info = self._describe(plugin, label)
            if info.name in self.backends:
                raise PluginError(f"plugin {label!r}: a backend named {info.name!r} is already loaded "
                                  f"({self.backends[info.name].source})")
            plugin_hooks.declare_settings(self.manager, plugin, info.name, f"plugin {label!r}")
        except PluginError:
            self.manager.unregister(plugin)
            raise
        backend = Backend(self.manager, plugin, info, source, from_entry_point)
        self.backends[info.name] = backend
        return backend

    def _describe(self, plugin: object, label: str) -> BackendInfo:
        """Check a registered plugin's hooks and ask it for its :class:`BackendInfo`."""
        what = f"plugin {label!r}"
        plugin_hooks.check_hooks(self.manager, plugin, REQUIRED_HOOKS, what, "tritonplug.hookspecs.hookimpl")
        info = plugin_hooks.own_answer(self.manager, plugin, "tritonplug_backend_info", what)
        if not isinstance(info, BackendInfo):
            raise PluginError(f"plugin {label!r}: tritonplug_backend_info returned {info!r:.200}, not a BackendInfo")
        if not isinstance(info.name, str) or not info.name or not isinstance(info.platforms, tuple) \
                or not all(isinstance(p, str) and p for p in info.platforms):
            raise PluginError(f"plugin {label!r}: its BackendInfo needs a name and a tuple of platform names, "
                              f"got name={info.name!r}, platforms={info.platforms!r}")
        problem = capability_problem(info)
        if problem:
            raise PluginError(f"plugin {label!r}: its BackendInfo {problem}")
        return info

    def _report(self, message: str) -> None:
        self.problems.append(message)
        user_warnings.warn(f"tritonplug: {message}", RuntimeWarning)

    def platforms(self) -> set[str]:
        """Every JAX platform some loaded backend declares."""
        return {p for backend in self.backends.values() for p in backend.info.platforms}

    def inlines(self) -> bool:
        """Whether some loaded backend translates kernels to XLA ops (declares ``inlines``)."""
        return any(backend.info.inlines for backend in self.backends.values())

    def lowered_platforms(self) -> set[str]:
        """The platforms calls are lowered for: those declared, and :data:`INLINE_PLATFORMS` where a backend
        declares ``inlines`` (a call given ``inline=True`` needs no backend of the platform itself)."""
        return self.platforms() | (set(INLINE_PLATFORMS) if self.inlines() else set())

    def backend_for(self, platform: str, inline: bool = False) -> Backend:
        """The backend serving a JAX platform, or with ``inline`` the one that declares ``inlines`` (a call's
        ``inline=True``, on any platform); errors name the candidates and the fix."""
        if inline:
            inlining = [b for b in self.backends.values() if b.info.inlines]
            if len(inlining) != 1:
                raise PluginError(f"inline=True needs one loaded backend that translates kernels to XLA ops "
                                  f"(BackendInfo.inlines), found {[b.name for b in inlining]}: install the CPU "
                                  f"backend's plugin (`pip install ./plugins/interpret`, distribution "
                                  f"tritonplug-interpret), or call without inline=True")
            return inlining[0]
        chosen = settings.BACKENDS.get()
        if platform in chosen:
            name = chosen[platform]
            if name not in self.backends:
                raise PluginError(f"TRITONPLUG_BACKENDS picks backend {name!r} for platform {platform!r}, "
                                  f"but it is not loaded (loaded: {sorted(self.backends)})")
            if platform not in self.backends[name].info.platforms:
                raise PluginError(f"TRITONPLUG_BACKENDS picks backend {name!r} for platform {platform!r}, but it "
                                  f"serves only {list(self.backends[name].info.platforms)}")
            return self.backends[name]
        claims = [b for b in self.backends.values() if platform in b.info.platforms]
        if not claims:
            bundled = {"cpu": "interpret", "cuda": "cuda", "rocm": "rocm"}.get(platform)
            hint = (f"install its plugin, which ships in this project's repository: `pip install ./plugins/{bundled}` "
                    f"from a clone (distribution tritonplug-{bundled})" if bundled else
                    "install a backend plugin that serves it (docs/writing-a-backend.md)")
            raise PluginError(
                f"no tritonplug backend serves the JAX platform {platform!r} (loaded: "
                f"{ {b.name: list(b.info.platforms) for b in self.backends.values()} }); {hint}")
        if len(claims) > 1:
            raise PluginError(_conflict_message(platform, [b.name for b in claims]))
        return claims[0]


def capability_problem(info: BackendInfo) -> str | None:
    """What is wrong with a backend's capability fields, or ``None``."""
    if not isinstance(info.ir_stages, tuple) or not set(info.ir_stages) <= set(IR_STAGES):
        return f"declares ir_stages={info.ir_stages!r}; expected a tuple drawn from {IR_STAGES}"
    if info.autotune not in AUTOTUNE_MODES:
        return f"declares autotune={info.autotune!r}; expected one of {AUTOTUNE_MODES}"
    if info.tensor_descriptors not in TENSOR_DESCRIPTOR_MODES:
        return f"declares tensor_descriptors={info.tensor_descriptors!r}; expected one of {TENSOR_DESCRIPTOR_MODES}"
    if info.buffer_order not in BUFFER_ORDERS:
        return f"declares buffer_order={info.buffer_order!r}; expected one of {BUFFER_ORDERS}"
    for flag in ("cache_binaries", "compile_in_worker", "specialize_ones", "inlines"):
        if not isinstance(getattr(info, flag), bool):
            return f"declares {flag}={getattr(info, flag)!r}; expected a bool"
    for field in ("pointer_divisibility", "integer_divisibility"):
        value = getattr(info, field)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0 or value & (value - 1):
            return f"declares {field}={value!r}; expected 0 or a power of two"
    names = info.option_names
    if names is not None and not (isinstance(names, tuple) and all(isinstance(n, str) for n in names)):
        return f"declares option_names={names!r}; expected None or a tuple of str"
    grid = info.max_grid
    if grid is not None and not (isinstance(grid, tuple) and len(grid) == 3 and all(
            isinstance(d, int) and not isinstance(d, bool) and d >= 1 for d in grid)):
        return f"declares max_grid={grid!r}; expected None or a tuple of three positive ints"
    return None


def _conflict_message(platform: str, names: list[str]) -> str:
    listed = ", ".join(repr(n) for n in names[:-1]) + f" and {names[-1]!r}"
    return (f"backends {listed} all serve platform {platform!r}; choose one with "
            f"TRITONPLUG_BACKENDS={platform}:<name>, e.g. TRITONPLUG_BACKENDS={platform}:{names[0]}")
