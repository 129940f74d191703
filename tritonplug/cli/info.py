"""What ``tritonplug info`` reports: versions, backends, targets, cache, workers and the settings in effect."""

from __future__ import annotations

from typing import Any

from tritonplug import settings
from tritonplug.cli import settings_table


def collect_info() -> dict[str, Any]:
    import jax
    import jaxlib
    import triton

    from tritonplug.cache.disk import CacheDirError, open_cache_from_env
    from tritonplug.cache.plugins import redact
    from tritonplug.cache.signing import fleet_keys
    from tritonplug.compile import frontend
    from tritonplug.compile.workers import pool_size, pool_timeout
    from tritonplug.process.state import state
    from tritonplug.version import tested_report

    host = loaded_plugins()
    backends: dict[str, Any] = {}
    for backend in host.backends.values():
        info = backend.info
        entry: dict[str, Any] = {"version": info.version, "platforms": ", ".join(info.platforms),
                                 "source": backend.source,
                                 "capabilities": f"ir={','.join(info.ir_stages) or 'none'} "
                                                 f"cache={'yes' if info.cache_binaries else 'no'} "
                                                 f"worker={'yes' if backend.compiles_in_worker else 'no'} "
                                                 f"autotune={info.autotune} "
                                                 f"descriptors={info.tensor_descriptors}"}
        for platform in backend.info.platforms:
            entry[f"target[{platform}]"] = _target(backend, platform)
        backends[backend.name] = entry
    try:
        cache = open_cache_from_env()
        cache_report: Any = dict(vars(cache.stats())) if cache is not None else "disabled (TRITONPLUG_CACHE=0)"
    except (CacheDirError, ValueError) as exc:
        cache_report = f"not usable: {exc}"
    return {
        "versions": {"tritonplug": frontend.TRITONPLUG_VERSION, "triton": triton.__version__,
                     "jax": jax.__version__, "jaxlib": jaxlib.__version__},
        "tested": tested_report(),
        "backends": backends or "none installed",
        "problems": [*host.problems, *state.compiler.remote.problems(), *settings.invalid()] or "none",
        "jax devices": ", ".join(str(d) for d in jax.devices()),
        "cache": cache_report,
        "remote cache": state.compiler.remote.status(),
        "cache entries": _setting(lambda: fleet_keys().describe()),
        "compile workers": _setting(pool_size),
        "compile timeout (s)": _setting(pool_timeout),
        # every setting the host and the loaded plugins declare: its value now and whether it was set or is the default
        "settings": {name: redact(text) for name, text in settings_table.in_effect().items()},
        "setting owners": _owners(),
        "undeclared variables": ", ".join(settings.undeclared()) or "none",  # a typo, or an unloaded plugin's
    }


def loaded_plugins() -> Any:
    """Every backend and cache plugin loaded (their settings declared); the backends' host."""
    from tritonplug.process.state import state

    host = state.host()
    state.compiler.remote.load_plugins()
    return host


def collect_settings() -> dict[str, Any]:
    """``tritonplug settings``: each declared setting's owner, value now and meaning."""
    from tritonplug.cache.plugins import redact

    loaded_plugins()
    shown = settings_table.in_effect()
    return {s.name: {"owner": s.owner, "value": redact(shown[s.name]), "meaning": s.doc} for s in settings.declared()}


def _owners() -> dict[str, str]:
    """Owner → the names of its settings."""
    owners: dict[str, list[str]] = {}
    for setting in settings.declared():
        owners.setdefault(setting.owner, []).append(setting.name)
    return {owner: ", ".join(names) for owner, names in owners.items()}


def _setting(read: Any) -> Any:
    try:
        return read()
    except ValueError as exc:  # a bad environment variable: report it, with the rest
        return f"invalid ({exc})"


def _target(backend: Any, platform: str) -> str:
    import jax

    try:
        devices = jax.devices(platform)
    except RuntimeError:
        devices = []
    try:
        target = backend.detect_target(platform, devices[0] if devices else None, {})
    except Exception as exc:
        return f"not detected ({exc})"
    return target.describe() if target is not None else "none"
