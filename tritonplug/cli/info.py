"""What ``tritonplug info`` reports: versions, backends, targets, cache, workers and the settings in effect."""

from __future__ import annotations

from typing import Any

from tritonplug import settings


def collect_info() -> dict[str, Any]:
    import jax
    import jaxlib
    import triton

    from tritonplug.cache.disk import CacheDirError, open_cache_from_env
    from tritonplug.cache.plugins import redact
    from tritonplug.compile import frontend
    from tritonplug.compile.workers import pool_size, pool_timeout
    from tritonplug.process.state import state
    from tritonplug.version import tested_report

    host = state.host()
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
        "compile workers": _setting(pool_size),
        "compile timeout (s)": _setting(pool_timeout),
        # every declared setting: its value now and whether it was set or is the default
        "settings": {name: redact(text) for name, text in settings.in_effect().items()},
        "undeclared variables": ", ".join(settings.undeclared()) or "none",  # a typo, or a third-party plugin's
    }


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
