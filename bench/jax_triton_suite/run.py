"""Run jax-triton 0.4.0's own tests against tritonplug (``import tritonplug as jt``) on a GPU machine.

    python bench/jax_triton_suite/run.py --upstream PATH/TO/jax-triton/tests --out $OUT/jax_triton_suite

``--upstream`` is the ``tests/`` directory of a jax-triton 0.4.0 checkout (commit
2e271999faaa95af2cc6c08d2a93e787746cab02): its ``triton_call_test.py`` and ``gluon_test.py`` are not part of
this repository (they are jax-triton's code, Apache-2.0); bring them to the GPU machine beside the checkout.
This script copies them to a scratch directory, rewrites ``import jax_triton as jt`` to
``import tritonplug as jt``, points the tests' one use of jax-triton's primitive
(``jttl.triton_kernel_call_p``, to find the call in a jaxpr) at tritonplug's, then runs pytest on them,
deselecting :data:`EXCLUDED` (each with its reason). It needs a CUDA GPU, absl-py
and pytest; it is not part of the CI test run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
FILES = ("triton_call_test.py", "gluon_test.py")

_INTERNALS = "inspects jax-triton's internals (its triton_lib module: TritonFunction, its kernel cache, " \
             "compile_ttir_inplace); tritonplug caches compiled kernels on disk instead (tests/test_cache.py)"
_PARAMS = "reads jax-triton's jaxpr parameter names (eqn.params['metaparams'] / ['has_side_effect']); " \
          "tritonplug's primitive has one parameter, the call spec (the behaviour is tested in tests/test_surface_*.py)"

#: test-name prefix -> why it does not apply to tritonplug
EXCLUDED = {
    "test_kernel_cache_equivalent_kernels": _INTERNALS,
    "test_kernel_cache_same_kernel_different_params": _INTERNALS,
    "test_callable_constexpr_and_cache": _INTERNALS,
    "test_kwarg_scalar_operand_stays_static": _PARAMS,
    "test_has_side_effect_parameter": _PARAMS,
    "test_batching_exception": "expects jax.vmap to raise; tritonplug batches calls (a documented improvement, "
                               "tests/test_transforms.py)",
}
#: Gluon APIs jax-triton 0.4's Gluon TMA kernels use, which Triton 3.6 lacks
#: (``mbarrier.allocate_mbarrier``, ``tma.async_load``/``async_store``, ``nbytes_per_cta``).
NEWER_GLUON = {
    "test_device_desc_tma_copy": "its kernel uses Gluon APIs newer than Triton {triton} (mbarrier.allocate_mbarrier, "
                                 "tma.async_load/async_store, nbytes_per_cta; Triton 3.7+)",
    "test_host_desc_tma_copy": "its kernel uses Gluon APIs newer than Triton {triton} (see test_device_desc_tma_copy)",
}

SHIM = '''"""Stands in for jax_triton.triton_lib: the tests use it only to find the call in a jaxpr."""
from tritonplug.lowering.primitive import triton_call_p as triton_kernel_call_p  # noqa: F401
'''


def exclusions(triton_version: str) -> dict[str, str]:
    excluded = dict(EXCLUDED)
    major_minor = tuple(int(p) for p in re.findall(r"\d+", triton_version)[:2])
    if major_minor < (3, 7):
        excluded.update({k: v.format(triton=triton_version) for k, v in NEWER_GLUON.items()})
    return excluded


def adapt(source: str) -> str:
    """The upstream test file, calling tritonplug."""
    adapted = source.replace("import jax_triton.triton_lib as jttl", "import tritonplug_triton_lib_shim as jttl")
    adapted = adapted.replace("import jax_triton as jt", "import tritonplug as jt")
    if "jax_triton" in re.sub(r"#.*|r?\"[^\"\n]*\"", "", adapted):
        raise SystemExit("an upstream test still imports jax_triton after adaptation; update adapt()")
    return adapted


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--upstream", required=True, type=Path,
                        help="jax-triton 0.4.0's tests/ directory (holding triton_call_test.py and gluon_test.py)")
    parser.add_argument("--out", default=os.environ.get("OUT", "."), help="directory for the log, XML and summary")
    parser.add_argument("--select", default="", help="a pytest -k expression (a subset; the exclusions apply too)")
    parser.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    args = parser.parse_args(argv)
    import jax
    import jaxlib
    import triton

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    excluded = exclusions(triton.__version__)
    with tempfile.TemporaryDirectory(prefix="jax-triton-suite-") as scratch:
        work = Path(scratch)
        for name in FILES:
            (work / name).write_text(adapt((args.upstream / name).read_text()))
        (work / "tritonplug_triton_lib_shim.py").write_text(SHIM)
        deselect = " and ".join(f"not {name}" for name in excluded)
        if args.select:
            deselect = f"({args.select}) and {deselect}"
        command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rfEs", "-q", "-k", deselect,
                   f"--junitxml={out / 'jax_triton_suite.xml'}", *FILES, *args.pytest_args]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(work), os.environ.get("PYTHONPATH", "")]))
        with open(out / "jax_triton_suite.log", "w") as log:
            log.write(f"$ {' '.join(command)}\n(cwd {work})\n")
            log.flush()
            done = subprocess.run(command, cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True)
            log.write(done.stdout)
        print(done.stdout[-6000:])
    counts = {k: int(v) for v, k in re.findall(r"(\d+) (passed|failed|skipped|error|errors|deselected)",
                                                done.stdout.splitlines()[-1] if done.stdout else "")}
    summary = {"command": " ".join(command), "returncode": done.returncode, "counts": counts,
               "excluded": excluded, "versions": {"jax": jax.__version__, "jaxlib": jaxlib.__version__,
                                                  "triton": triton.__version__, "python": platform.python_version()},
               "devices": [str(d) for d in jax.devices()]}
    (out / "jax_triton_suite.json").write_text(json.dumps(summary, indent=2))
    print(json.dumps({"counts": counts, "excluded": sorted(excluded)}, indent=2))
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
