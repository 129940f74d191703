"""Kernel calls on several GPUs: per-device placement, shard_map, pmap, sharded arrays refused.

Runs where at least two CUDA devices are visible (e.g. `pytest -m cuda tests/test_multigpu.py`
on a two-GPU machine); the same behaviours are checked on forced CPU devices in
test_multidevice.py.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest
from helpers import gpu_platforms, requires_backend
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
from kernels import add_kernel

import tritonplug


def cuda_devices() -> list:
    return jax.devices("cuda") if "cuda" in gpu_platforms() else []


pytestmark = [pytest.mark.cuda, requires_backend("cuda"),
              pytest.mark.skipif(len(cuda_devices()) < 2, reason="fewer than two CUDA devices are visible")]


def add(x, y):
    return tritonplug.triton_call(x, y, x.size, kernel=add_kernel, out_type=jax.ShapeDtypeStruct(x.shape, x.dtype),
                                  grid=(tritonplug.cdiv(x.size, 256),), BLOCK=256)


def data(n: int = 4096):
    rng = np.random.default_rng()
    return rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)


def test_each_device_runs_its_own_call():
    x, y = data()
    for device in cuda_devices():
        xd, yd = jax.device_put(x, device), jax.device_put(y, device)
        out = jax.jit(add)(xd, yd)
        assert out.devices() == {device}
        np.testing.assert_allclose(np.asarray(out), x + y, rtol=1e-6)


def test_shard_map_runs_the_kernel_on_each_shard():
    devices = cuda_devices()
    mesh = jax.make_mesh((len(devices),), ("d",), devices=devices)
    x, y = data(1024 * len(devices))
    f = jax.jit(jax.shard_map(add, mesh=mesh, in_specs=(P("d"), P("d")), out_specs=P("d")))
    sharding = NamedSharding(mesh, P("d"))
    out = f(jax.device_put(x, sharding), jax.device_put(y, sharding))
    np.testing.assert_allclose(np.asarray(out), x + y, rtol=1e-6)


def test_pmap():
    n = len(cuda_devices())
    x, y = (a.reshape(n, -1) for a in data(1024 * n))
    out = jax.pmap(add, devices=cuda_devices())(x, y)
    np.testing.assert_allclose(np.asarray(out), x + y, rtol=1e-6)


def test_a_sharded_call_outside_shard_map_is_refused():
    devices = cuda_devices()
    mesh = jax.make_mesh((len(devices),), ("d",), devices=devices)
    x, y = (jax.device_put(a, NamedSharding(mesh, P("d"))) for a in data(1024 * len(devices)))
    with pytest.raises(ValueError, match="shard_map"):
        jax.jit(add)(x, y)

