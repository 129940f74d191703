"""tox's inline plugin (tox 4 loads ``toxfile.py`` beside ``tox.ini``): finds the Python 3.12 that the jax 0.11 and
0.12 envs need (jax >= 0.11 requires Python 3.12).

On the machines here Python 3.12 lives under pyenv (``$(pyenv root)/versions/3.12.*``) and is not on PATH (pyenv's
``python3.12`` shim exists but refuses to run unless 3.12 is pyenv's global version), so tox's own discovery of
``python3.12`` would fail. This sets ``TRITONPLUG_PYTHON312`` (which those envs use as ``base_python``) to the
first that runs of: ``python3.12`` on PATH, the newest ``<pyenv root>/versions/3.12.*/bin/python3.12``. Set the
variable yourself to choose another. Where none is found, an env that needs one fails with a message that says so.

``python toxfile.py`` prints the interpreter found, or the message with exit status 1 (``.ci/run`` checks first).
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys

VARIABLE = "TRITONPLUG_PYTHON312"
MISSING = ("Python 3.12 not found: the jax 0.11/0.12 envs (jax >= 0.11 needs Python 3.12) looked for python3.12 on "
           "PATH and under pyenv ($(pyenv root)/versions/3.12.*/bin). Install it (pyenv install 3.12) or set "
           f"{VARIABLE}=/path/to/python3.12.")


def _runs(path: str) -> bool:
    try:
        done = subprocess.run([path, "-c", "import sys; assert sys.version_info[:2] == (3, 12)"],
                              capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def _pyenv_root() -> str:
    if os.environ.get("PYENV_ROOT"):
        return os.environ["PYENV_ROOT"]
    pyenv = shutil.which("pyenv")
    if pyenv:
        try:
            return subprocess.run([pyenv, "root"], capture_output=True, text=True, timeout=60).stdout.strip()
        except (OSError, subprocess.TimeoutExpired):
            pass
    return os.path.expanduser("~/.pyenv")


def find_python312() -> str | None:
    """A Python 3.12 interpreter that runs, or None."""
    candidates = [shutil.which("python3.12")]

    def patch_level(path: str) -> tuple[int, ...]:
        name = os.path.basename(os.path.dirname(os.path.dirname(path)))
        return tuple(int(p) for p in name.split(".") if p.isdigit())

    candidates += sorted(glob.glob(os.path.join(_pyenv_root(), "versions", "3.12.*", "bin", "python3.12")),
                         key=patch_level, reverse=True)
    return next((c for c in candidates if c and _runs(c)), None)


if not os.environ.get(VARIABLE):
    _found = find_python312()
    if _found:
        os.environ[VARIABLE] = _found

try:
    from tox.plugin import impl
    from tox.report import HandledError
except ImportError:  # run as a script, outside tox
    impl = None

if impl is not None:
    @impl
    def tox_add_env_config(env_conf, state) -> None:  # noqa: ANN001 (tox's types)
        """Fail an env that needs Python 3.12 with the message above when none was found."""
        if os.environ.get(VARIABLE):
            return
        selected = getattr(state.conf.options, "env", None)  # -e: tox builds every env's config, runs these
        if selected is not None and not (selected.is_all or selected.is_default_list) \
                and env_conf.name not in list(selected):
            return
        # Unset, the variable leaves these envs tox.ini's fallback spec: {env:TRITONPLUG_PYTHON312:python3.12}.
        if "python3.12" in (env_conf["base_python"] or []):
            raise HandledError(f"{env_conf.name}: {MISSING}")


if __name__ == "__main__":
    if os.environ.get(VARIABLE):
        print(os.environ[VARIABLE])
    else:
        print(MISSING, file=sys.stderr)
        sys.exit(1)
