"""The SSD port (``examples/ports/mamba_ssd.py``) in a sharded ``jit`` on 8 CPU devices: its
``@tritonplug.partitioned`` rules run the forward and the backward per shard (batch split, heads split: freely
with one group, with their groups when g > 1; with initial states, and with packed sequences, ``seq_idx`` split over
batch), and the results and every gradient equal the unsharded call's.

Eight CPU devices exist only if XLA_FLAGS is set before JAX starts, so the cases run in a child process."""

from __future__ import annotations

import importlib.machinery
import json
import os
import subprocess
import sys
import textwrap

import pytest
from helpers import ROOT, case_ran, cpu_devices_env, requires_backend

pytestmark = [
    requires_backend("interpret"),
    pytest.mark.skipif(importlib.machinery.PathFinder.find_spec("mamba_ssm") is None,
                       reason="mamba-ssm's source is not on sys.path (examples/fetch_kernel_sources.py)"),
]

SCRIPT = textwrap.dedent('''
    import json, traceback
    import jax, jax.numpy as jnp, numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    from tritonplug import inspection
    from ports.mamba_ssd import mamba_chunk_scan_combined

    def arrays(b, l, h, p, g, n, states=False, packed=False):
        rng = np.random.default_rng(0)
        f = lambda *s: rng.standard_normal(s).astype(np.float32)
        out = dict(x=f(b, l, h, p), dt=f(b, l, h), A=-np.abs(f(h)) - 0.2, B=0.5 * f(b, l, g, n),
                   C=0.5 * f(b, l, g, n), D=f(h, p), z=f(b, l, h, p), dt_bias=0.5 * f(h))
        out = dict(out, initial_states=f(b, h, p, n)) if states else out
        # packed: each row's sequences start at different steps (one inside a chunk, one at a chunk's start)
        ids = np.stack([np.searchsorted(np.array([10 + 3 * i, 16 + 16 * (i % 2)]), np.arange(l), side="right")
                        for i in range(b)]).astype(np.int32)
        return (out, ids) if packed else (out, None)

    SPECS = dict(x=P("x", None, "y"), dt=P("x", None, "y"), A=P("y"), B=P("x"), C=P("x"), D=P("y"),
                 z=P("x", None, "y"), dt_bias=P("y"), initial_states=P("x", "y"))

    def run(mesh, arrays, heads_split_groups):
        a, seq_idx = arrays  # seq_idx: integers, not differentiated, split over batch as x
        names = list(a)
        specs = dict(SPECS, **({"B": P("x", None, "y"), "C": P("x", None, "y")} if heads_split_groups else {}))
        states = "initial_states" in a  # then the final states are returned and in the loss too
        def loss(*values):
            *values, seq = values
            out = mamba_chunk_scan_combined(**dict(zip(names, values)), chunk_size=16, dt_softplus=True,
                                            return_final_states=states, seq_idx=seq)
            y, last = out if states else (out, jnp.zeros(()))
            return jnp.sum(y * jnp.cos(y)) + jnp.sum(jnp.sin(last)), y
        step = jax.jit(jax.value_and_grad(loss, argnums=tuple(range(len(names))), has_aux=True))
        (_, y1), g1 = step(*[jnp.asarray(v) for v in a.values()], seq_idx)
        placed = [jax.device_put(v, NamedSharding(mesh, specs[k])) for k, v in a.items()]
        seq = None if seq_idx is None else jax.device_put(seq_idx, NamedSharding(mesh, P("x")))
        (_, y8), g8 = step(*placed, seq)
        text = step.lower(*placed, seq).compile().as_text()
        worst = max(float(np.abs(np.asarray(u) - np.asarray(w)).max() / max(np.abs(np.asarray(w)).max(), 1e-6))
                    for u, w in zip((y8, *g8), (y1, *g1)))
        return {"ok": True, "vs_one_device": worst, "y_sharding": list(y8.sharding.spec),
                "collectives": sorted({c["op"] for c in inspection.collectives(text)})}

    report = {"devices": len(jax.devices())}
    devices = np.array(jax.devices())
    cases = {
        "one_group/batch_x2_heads_x4": (Mesh(devices.reshape(2, 4), ("x", "y")), arrays(2, 40, 4, 8, 1, 16), False),
        "two_groups/batch_x2_heads_x2": (Mesh(devices[:4].reshape(2, 2), ("x", "y")), arrays(2, 40, 4, 8, 2, 16), True),
        "states/two_groups/batch_x2_heads_x2": (Mesh(devices[:4].reshape(2, 2), ("x", "y")),
                                                arrays(2, 40, 4, 8, 2, 16, states=True), True),
        "packed/two_groups/batch_x2_heads_x2": (Mesh(devices[:4].reshape(2, 2), ("x", "y")),
                                                arrays(2, 40, 4, 8, 2, 16, states=True, packed=True), True),
    }
    for name, (mesh, a, split_groups) in cases.items():
        try:
            report[name] = run(mesh, a, split_groups)
        except Exception as e:
            report[name] = {"ok": False, "error": repr(e), "trace": traceback.format_exc()}
    print("REPORT " + json.dumps(report))
''')


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    script = tmp_path_factory.mktemp("mamba_ssd_sharded") / "eight_devices.py"
    script.write_text(SCRIPT)
    # Checked mode off: its jax.debug.callback crashes XLA:CPU inside a partitioned body (as in test_partitioned)
    env = cpu_devices_env(8, TRITONPLUG_INTERPRET_CHECK="0", PYTHONPATH=os.pathsep.join(
        [str(ROOT / "tests"), str(ROOT), str(ROOT / "examples"), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=1500, env=env)
    lines = [line for line in done.stdout.splitlines() if line.startswith("REPORT ")]
    assert done.returncode == 0 and lines, f"child failed ({done.returncode}):\n{done.stdout}\n{done.stderr[-4000:]}"
    result = json.loads(lines[-1].removeprefix("REPORT "))
    assert result["devices"] == 8
    return result


@pytest.mark.parametrize("name", ["one_group/batch_x2_heads_x4", "two_groups/batch_x2_heads_x2",
                                  "states/two_groups/batch_x2_heads_x2", "packed/two_groups/batch_x2_heads_x2"])
def test_sharded_forward_and_gradients_equal_the_unsharded_call(report, name):
    entry = case_ran(report, name)
    assert entry["vs_one_device"] <= 1e-4, entry
    assert entry["y_sharding"][:3] == ["x", None, "y"], entry  # split as given, not gathered
    assert "all-gather" not in entry["collectives"], entry  # no factor of the rules had to be gathered
