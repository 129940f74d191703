"""Hopper-era kernels for the descriptor, Gluon and scalar tests (module-level, so Triton finds their source)."""

import triton
import triton.language as tl
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia import hopper as gl_hopper

# Triton 3.9 renamed Gluon's TMA copies (3.6 has only the old names, 3.9 only the new ones).
tma_load = getattr(gl_hopper.tma, "async_load", None) or gl_hopper.tma.async_copy_global_to_shared
tma_store = getattr(gl_hopper.tma, "async_store", None) or gl_hopper.tma.async_copy_shared_to_global


@triton.jit
def desc_copy_kernel(in_desc, out_ptr, M: tl.constexpr, N: tl.constexpr):
    """Load one block through a host-side descriptor, store it with pointers."""
    block = in_desc.load([0, 0])
    offs = tl.arange(0, M)[:, None] * N + tl.arange(0, N)[None, :]
    tl.store(out_ptr + offs, block)


@triton.jit
def desc_tiles_kernel(in_desc, out_desc, scale, BM: tl.constexpr, BN: tl.constexpr):
    """out = in * scale, tile by tile, descriptors both ways (edge tiles padded and clipped by TMA)."""
    m = tl.program_id(0) * BM
    n = tl.program_id(1) * BN
    tile = in_desc.load([m, n])
    out_desc.store([m, n], tile * scale)


@triton.jit
def desc_pair_kernel(descs, out_ptr, M: tl.constexpr, N: tl.constexpr):
    """A tuple of two descriptors: out = a + b."""
    a = descs[0].load([0, 0])
    b = descs[1].load([0, 0])
    offs = tl.arange(0, M)[:, None] * N + tl.arange(0, N)[None, :]
    tl.store(out_ptr + offs, a + b)


@triton.jit
def device_desc_copy_kernel(in_ptr, out_ptr, M: tl.constexpr, N: tl.constexpr):
    """Device-side TMA: descriptors built in the kernel (global scratch memory)."""
    desc_in = tl.make_tensor_descriptor(in_ptr, shape=[M, N], strides=[N, 1], block_shape=[M, N])
    desc_out = tl.make_tensor_descriptor(out_ptr, shape=[M, N], strides=[N, 1], block_shape=[M, N])
    desc_out.store([0, 0], desc_in.load([0, 0]))


@triton.jit
def tma_matmul_kernel(a_desc, b_desc, M, N, K, c_ptr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """C = A @ B with A and B read through host-side descriptors (fp16 in, fp32 accumulate, fp16 out)."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        a = a_desc.load([pid_m * BM, k])
        b = b_desc.load([k, pid_n * BN])
        acc = tl.dot(a, b, acc)
    offs_m = pid_m * BM + tl.arange(0, BM)
    offs_n = pid_n * BN + tl.arange(0, BN)
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    tl.store(c_ptr + offs_m[:, None] * N + offs_n[None, :], acc.to(tl.float16), mask=mask)


@triton.jit
def scale_kernel(x_ptr, scale, n, out_ptr, BLOCK: tl.constexpr):
    """out = x * scale: the scalar's type decides the arithmetic's precision."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, (tl.load(x_ptr + offs, mask=mask) * scale).to(out_ptr.dtype.element_ty), mask=mask)


@gluon.jit
def gluon_copy_scalar_kernel(in_ptr, out_ptr):
    gl.store(out_ptr, gl.load(in_ptr))


@gluon.jit
def gluon_add_kernel(x_ptr, y_ptr, n, out_ptr, BLOCK: gl.constexpr):
    """A layout-carrying Gluon kernel: the warps come from the module, not from the kernel."""
    layout: gl.constexpr = gl.BlockedLayout([1], [32], [gl.num_warps()], [0])
    offs = gl.program_id(0) * BLOCK + gl.arange(0, BLOCK, layout=layout)
    mask = offs < n
    gl.store(out_ptr + offs, gl.load(x_ptr + offs, mask=mask) + gl.load(y_ptr + offs, mask=mask), mask=mask)


@gluon.jit
def gluon_device_tma_copy_kernel(in_ptr, out_ptr, M: gl.constexpr, N: gl.constexpr):
    """Gluon on Hopper: shared memory, an mbarrier and TMA copies through device-side descriptors."""
    layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([M, N], gl.float32)
    in_desc = gl_hopper.tma.make_tensor_descriptor(in_ptr, shape=[M, N], strides=[N, 1], block_shape=[M, N],
                                                   layout=layout)
    out_desc = gl_hopper.tma.make_tensor_descriptor(out_ptr, shape=[M, N], strides=[N, 1], block_shape=[M, N],
                                                    layout=layout)
    smem = gl.allocate_shared_memory(gl.float32, [M, N], layout)
    bar = gl.allocate_shared_memory(gl.int64, [1], gl_hopper.mbarrier.MBarrierLayout())
    gl_hopper.mbarrier.init(bar, count=1)
    gl_hopper.mbarrier.expect(bar, M * N * 4)
    tma_load(in_desc, [0, 0], bar, smem)
    gl_hopper.mbarrier.wait(bar, phase=0)
    gl_hopper.mbarrier.invalidate(bar)
    tma_store(out_desc, [0, 0], smem)
    gl_hopper.tma.store_wait(0)


@gluon.jit
def gluon_host_desc_copy_kernel(in_desc, out_ptr, M: gl.constexpr, N: gl.constexpr):
    """Gluon with a host-side descriptor: TMA into shared memory, then a device-side descriptor out."""
    out_desc = gl_hopper.tma.make_tensor_descriptor(out_ptr, shape=[M, N], strides=[N, 1], block_shape=[M, N],
                                                    layout=in_desc.layout)
    smem = gl.allocate_shared_memory(in_desc.dtype, [M, N], in_desc.layout)
    bar = gl.allocate_shared_memory(gl.int64, [1], gl_hopper.mbarrier.MBarrierLayout())
    gl_hopper.mbarrier.init(bar, count=1)
    gl_hopper.mbarrier.expect(bar, M * N * in_desc.dtype.primitive_bitwidth // 8)
    tma_load(in_desc, [0, 0], bar, smem)
    gl_hopper.mbarrier.wait(bar, phase=0)
    gl_hopper.mbarrier.invalidate(bar)
    tma_store(out_desc, [0, 0], smem)
    gl_hopper.tma.store_wait(0)
