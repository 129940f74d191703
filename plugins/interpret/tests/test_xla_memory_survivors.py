"""The edges of ``xla/memory.py`` that the mutation run found untested (issue 37): which lanes of a load, a store
or an atomic touch memory, and what the others read.

Each test runs a real Triton kernel translated by the XLA path, asserts it was translated (a translation that
fails falls back to the interpreter, which would hide the failure) and compares its result with NumPy:

* a masked load's ``other`` fills its masked-off lanes (not zeros);
* a masked store in a branch that only some programs take: in the parallel schedule both sides run, masked by
  the branch's predicate, so the lanes of the side a program does not take must not write (nor, in a program
  that takes it, the lanes its mask leaves off);
* a load through loaded indices, some of them outside the buffer (the last element's successor, past it,
  before it), in unchecked mode: those lanes read zero, the others their element; a store through such
  indices writes only the valid ones, and so does a bitwise atomic (``tl.atomic_or``, run lane by lane);
* a pointer chosen by ``tl.where`` between two pointers into one buffer, and into two (refused: the
  interpreter runs it);
* a float buffer read and written through int pointers of its item size (its bits, not its values converted);
* a pointer whose lanes a loop changes by loaded jumps, carried whole by the loop (a pytree through the loop);
  where the lanes jump apart the XLA path is wrong (a known bug, marked ``xfail``);
* the same pointer through a loop whose trip count is loaded: a ``lax.while_loop`` carrying the pointer, which JAX
  takes apart and rebuilds (the pytree's unflatten: its buffer, its element type);
* a compare-and-swap on the first and on the last element of a buffer of three;
* a pointer bitcast to a pointee of another size (the XLA path refuses it: Triton's interpreter runs the call).
* block pointers (Triton 3.6-3.8) a while loop advances, tiles starting before the tensor, their padding stored;
  a block pointer of rank 1.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest
import triton
import triton.language as tl
from helpers import requires_backend
from xla_hlo_support import run_translated

import tritonplug

pytestmark = [pytest.mark.interpret, requires_backend("interpret"), pytest.mark.usefixtures("fresh_xla_path")]
OLD = -7.0   # what a stored-to buffer holds before the call: the kernels never write it


def _run(kernel, inputs, out_shape, grid, *args, **constexprs):
    return run_translated(kernel, inputs, out_shape, grid, *args, fill=OLD, **constexprs)


@triton.jit
def _other_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n, other=1.5))


def test_a_masked_load_reads_other_in_its_masked_off_lanes():
    x = np.random.default_rng(1).standard_normal(256).astype(np.float32)
    got = _run(_other_kernel, (x,), x.shape, (4,), 200, BLOCK=64)
    np.testing.assert_array_equal(got, np.where(np.arange(256) < 200, x, np.float32(1.5)))


@triton.jit
def _even_programs_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    if tl.program_id(0) % 2 == 0:
        x = tl.load(x_ptr + offs, mask=mask, other=0.0)
        tl.store(out_ptr + offs, tl.abs(x) * 2 + 1, mask=mask)


@pytest.mark.parametrize("n", [200, 150])
def test_a_masked_store_in_a_branch_writes_only_in_the_programs_that_take_it(n):
    """``n`` 150 cuts program 2's block, which takes the branch: the mask and the branch's predicate both hold."""
    x = np.random.default_rng(2).standard_normal(256).astype(np.float32)
    got = _run(_even_programs_kernel, (x,), x.shape, (4,), n, BLOCK=64)
    offs = np.arange(256)
    np.testing.assert_array_equal(got, np.where((offs < n) & (offs // 64 % 2 == 0), np.abs(x) * 2 + 1,
                                                np.float32(OLD)))


@triton.jit
def _indexed_kernel(x_ptr, index_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + tl.load(index_ptr + offs)))


def test_lanes_outside_the_buffer_read_zero_in_unchecked_mode(monkeypatch):
    """Indices ``n`` (one past the last element), ``n + 3`` and ``-1`` among valid ones: a gather, since the
    indices are loaded; outside the buffer a lane is off, as a masked-off one (checked mode would report it)."""
    monkeypatch.setenv("TRITONPLUG_INTERPRET_CHECK", "0")
    n = 100
    x = np.random.default_rng(3).uniform(1, 2, n).astype(np.float32)      # no element is zero
    index = np.random.default_rng(4).integers(0, n, 64).astype(np.int32)
    index[[3, 17, 40, 41]] = [n, n + 3, -1, n]
    got = _run(_indexed_kernel, (x, index), (64,), (2,), BLOCK=32)
    inside = (index >= 0) & (index < n)
    np.testing.assert_array_equal(got, np.where(inside, x[np.clip(index, 0, n - 1)], np.float32(0)))


@triton.jit
def _scattered_kernel(x_ptr, index_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + tl.load(index_ptr + offs), tl.load(x_ptr + offs))


def test_lanes_outside_the_buffer_write_nothing_in_unchecked_mode(monkeypatch):
    """The store's side: a scatter through loaded indices ``n``, ``n + 3`` and ``-1`` among distinct valid ones
    writes only the valid ones (a store the plan cannot prove inside keeps its bounds mask)."""
    monkeypatch.setenv("TRITONPLUG_INTERPRET_CHECK", "0")
    n = 100
    x = np.random.default_rng(6).uniform(1, 2, 64).astype(np.float32)
    index = np.random.default_rng(7).permutation(n)[:64].astype(np.int32)
    index[[3, 17, 40, 41]] = [n, n + 3, -1, n]
    got = _run(_scattered_kernel, (x, index), (n,), (2,), BLOCK=32)
    want = np.full(n, OLD, np.float32)
    inside = (index >= 0) & (index < n)
    want[index[inside]] = x[inside]
    np.testing.assert_array_equal(got, want)


@triton.jit
def _or_through_index_kernel(index_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.atomic_or(out_ptr + tl.load(index_ptr + offs), 1 << offs)


def test_a_bitwise_atomic_outside_the_buffer_changes_nothing_in_unchecked_mode(monkeypatch):
    """``tl.atomic_or`` (run lane by lane) through indices of which one is ``-1``: that lane is off, not the last
    element (the bounds mask of an atomic is never dropped)."""
    monkeypatch.setenv("TRITONPLUG_INTERPRET_CHECK", "0")
    index = np.array([0, 2, -1, 2, 1, 8, 3, 0], np.int32)
    old = np.array([0, 0, 0, 256], np.int32)

    def fn(i, o):
        out = jax.new_ref(o)
        tritonplug.triton_call(i, out, kernel=_or_through_index_kernel, out_type=(), grid=(1,), BLOCK=8)
        return out[...]

    assert "tritonplug_host_kernel" not in jax.jit(fn).lower(index, old).as_text(), "not translated to XLA"
    got = np.asarray(jax.jit(fn)(index, old))
    want = old.copy()
    for lane, i in enumerate(index):
        if 0 <= i < old.size:
            want[i] |= 1 << lane
    np.testing.assert_array_equal(got, want)


@triton.jit
def _chosen_half_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    src = tl.where(tl.program_id(0) % 2 == 0, x_ptr + offs, x_ptr + BLOCK + offs)   # arith.select of pointers
    tl.store(out_ptr + tl.program_id(0) * BLOCK + offs, tl.load(src))


def test_a_pointer_chosen_between_two_pointers_into_one_buffer():
    x = np.random.default_rng(5).standard_normal(16).astype(np.float32)
    got = _run(_chosen_half_kernel, (x,), (32,), (4,), BLOCK=8)
    np.testing.assert_array_equal(got, np.concatenate([x[:8], x[8:], x[:8], x[8:]]))


@triton.jit
def _chosen_buffer_kernel(x_ptr, y_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    src = tl.where(tl.program_id(0) % 2 == 0, x_ptr + offs, y_ptr + offs)      # pointers into two buffers
    tl.store(out_ptr + tl.program_id(0) * BLOCK + offs, tl.load(src))


def test_a_pointer_chosen_between_two_buffers_reads_the_one_chosen():
    """The XLA path refuses a select between pointers into different buffers (Triton's interpreter runs the call,
    so this call is not asserted translated): each program reads its own buffer, never one at the other's offset."""
    import jax.numpy as jnp

    rng = np.random.default_rng(11)
    x, y = rng.standard_normal(8).astype(np.float32), rng.standard_normal(8).astype(np.float32)
    got = jax.jit(lambda a, b: tritonplug.triton_call(a, b, kernel=_chosen_buffer_kernel, grid=(4,), BLOCK=8,
                                                      out_type=jax.ShapeDtypeStruct((32,), jnp.float32)))(x, y)
    np.testing.assert_array_equal(np.asarray(got), np.concatenate([x, y, x, y]))


@triton.jit
def _next_float_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    bits = tl.load(x_ptr.to(tl.pointer_type(tl.int32), bitcast=True) + offs)        # f32 elements read as i32
    tl.store(out_ptr.to(tl.pointer_type(tl.int32), bitcast=True) + offs, bits + 1)  # and written as i32


def test_a_float_buffer_read_and_written_through_int_pointers_keeps_its_bits():
    x = np.random.default_rng(6).standard_normal(128).astype(np.float32)
    got = _run(_next_float_kernel, (x,), x.shape, (2,), BLOCK=64)
    np.testing.assert_array_equal(got.view(np.int32), x.view(np.int32) + 1)


@triton.jit
def _walk_kernel(x_ptr, jump_ptr, out_ptr, STEPS: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    p = x_ptr + offs
    acc = tl.zeros([BLOCK], tl.float32)
    for i in range(0, STEPS):
        acc += tl.load(p)
        p += tl.load(jump_ptr + i * BLOCK + offs)    # loaded jumps: the loop carries the pointer itself
    tl.store(out_ptr + offs, acc + tl.load(p))      # (and the load after the loop reads through it)


def _walk(x, jump):
    at, ref = np.arange(jump.shape[1]), np.zeros(jump.shape[1], np.float32)
    for step in jump:
        ref, at = ref + x[at], at + step
    return ref + x[at]


def test_a_pointer_the_loop_carries_whole_keeps_its_buffer():
    """The loaded jumps make the pointer's lanes unknown to the plan: the loop carries the pointer itself (its
    buffer and offsets through ``lax.while_loop``). Here every lane of a trip jumps as far (see the next test)."""
    steps, block = 4, 16
    rng = np.random.default_rng(7)
    x = rng.standard_normal(64).astype(np.float32)
    jump = np.repeat(rng.integers(0, 10, (steps, 1)), block, axis=1).astype(np.int32)
    got = _run(_walk_kernel, (x, jump), (block,), (1,), STEPS=steps, BLOCK=block)
    np.testing.assert_allclose(got, _walk(x, jump), rtol=1e-6)


def test_a_pointer_whose_lanes_jump_apart_in_a_loop():
    """Each lane jumps its own way: the plan once kept the load's lanes from the loop analysis's first visit (which
    assumed the pointer keeps them) and read every lane as jumping as lane 0 did (issue 37's mutation work)."""
    steps, block = 4, 16
    rng = np.random.default_rng(7)
    x = rng.standard_normal(64).astype(np.float32)
    jump = rng.integers(0, 10, (steps, block)).astype(np.int32)
    got = _run(_walk_kernel, (x, jump), (block,), (1,), STEPS=steps, BLOCK=block)
    np.testing.assert_allclose(got, _walk(x, jump), rtol=1e-6)



@triton.jit
def _walk_loaded_steps_kernel(x_ptr, jump_ptr, steps_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    p = x_ptr + offs
    acc = tl.zeros([BLOCK], tl.float32)
    for i in range(0, tl.load(steps_ptr)):         # a trip count known only at run time: not unrolled
        acc += tl.load(p)
        p += tl.load(jump_ptr + i * BLOCK + offs)
    tl.store(out_ptr + offs, acc + tl.load(p))


def test_a_pointer_a_while_loop_carries_is_rebuilt_with_its_buffer():
    """A scalar argument is baked into the translation (a loop over it is unrolled); a loaded trip count makes the
    loop a ``lax.while_loop``, whose carry JAX flattens and rebuilds: the rebuilt pointer must keep its buffer."""
    steps, block = 4, 16
    rng = np.random.default_rng(8)
    x = rng.standard_normal(64).astype(np.float32)
    jump = rng.integers(0, 10, (steps, block)).astype(np.int32)
    got = _run(_walk_loaded_steps_kernel, (x, jump, np.array([steps], np.int32)), (block,), (1,), BLOCK=block)
    np.testing.assert_allclose(got, _walk(x, jump), rtol=1e-6)

@triton.jit
def _first_claim_kernel(lock_ptr, old_ptr, AT: tl.constexpr):
    tl.store(old_ptr + tl.program_id(0), tl.atomic_cas(lock_ptr + AT, 0, tl.program_id(0) + 1))   # lock_ptr[AT] only


@pytest.mark.parametrize("at", [0, 2])
def test_a_compare_and_swap_on_the_first_or_last_element_of_a_longer_buffer(at):
    def fn(lock, old):
        lock, old = jax.new_ref(lock), jax.new_ref(old)
        tritonplug.triton_call(lock, old, kernel=_first_claim_kernel, out_type=(), grid=(4,), AT=at)
        return lock[...], old[...]

    args = (np.zeros(3, np.int32), np.full(4, -1, np.int32))
    assert "tritonplug_host_kernel" not in jax.jit(fn).lower(*args).as_text(), "not translated to XLA"
    lock, old = (np.asarray(a) for a in jax.jit(fn)(*args))
    want = np.zeros(3, np.int32)
    want[at] = 1                                        # programs in order: program 0 claims it
    np.testing.assert_array_equal(lock, want)
    np.testing.assert_array_equal(old, [0, 1, 1, 1])


@triton.jit
def _halves_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    halves = tl.load(x_ptr.to(tl.pointer_type(tl.int16), bitcast=True) + offs)   # f32 elements read as 2 x i16
    tl.store(out_ptr + offs, halves.to(tl.float32))


def test_a_pointer_bitcast_to_a_pointee_of_another_size_reads_its_bytes():
    """The XLA path refuses it (``bitcast_pointer``), and the call runs in Triton's interpreter: right either way,
    wrong if the translation took the pointer's offsets in the buffer's elements."""
    x = np.random.default_rng(9).standard_normal(64).astype(np.float32)

    def fn(x, out):
        ref = jax.new_ref(out)
        tritonplug.triton_call(x, ref, kernel=_halves_kernel, out_type=(), grid=(2,), BLOCK=64)
        return ref[...]

    got = np.asarray(jax.jit(fn)(x, np.zeros(128, np.float32)))
    np.testing.assert_array_equal(got, x.view(np.int16).astype(np.float32))


@triton.jit
def _count_kernel(x_ptr, count_ptr):
    tl.atomic_add(count_ptr, tl.load(x_ptr + tl.program_id(0)))     # no mask


def test_an_atomic_without_a_mask_is_given_one_by_triton(monkeypatch):
    """Triton gives every ``tt.atomic_rmw`` a mask operand (all true when the kernel passes none), which the
    translator's ``len(args) > 2`` reads: checked on the TTIR of a real unmasked ``tl.atomic_add``."""
    from tritonplug_interpret.xla import plan
    from tritonplug_interpret.xla.ttir import walk

    seen, make = [], plan.make

    def spy(fn, *args, **kwargs):
        seen.extend(op for op in walk(fn.body) if op.name == "tt.atomic_rmw")
        return make(fn, *args, **kwargs)

    monkeypatch.setattr(plan, "make", spy)

    def fn(a, c):
        count = jax.new_ref(c)
        tritonplug.triton_call(a, count, kernel=_count_kernel, out_type=(), grid=(5,))
        return count[...]

    args = (np.arange(1, 6, dtype=np.int32), np.zeros(1, np.int32))
    assert "tritonplug_host_kernel" not in jax.jit(fn).lower(*args).as_text(), "not translated to XLA"
    np.testing.assert_array_equal(np.asarray(jax.jit(fn)(*args)), [15])
    assert seen and all(len(op.operands) == 3 for op in seen), [op.operands for op in seen]


@triton.jit
def _block_walk_kernel(x_ptr, steps_ptr, out_ptr, M, N, BM: tl.constexpr, BN: tl.constexpr, NAN: tl.constexpr):
    pid = tl.program_id(0)
    steps = tl.load(steps_ptr)
    src = tl.make_block_ptr(x_ptr, (M, N), (N, 1), (pid * BM - 1, -2), (BM, BN), (1, 0))
    dst = tl.make_block_ptr(out_ptr, (tl.num_programs(0) * steps * BM, BN), (BN, 1), (pid * steps * BM, 0), (BM, BN),
                            (1, 0))
    for _ in range(0, steps):                       # a loaded trip count: a while loop carrying both
        if NAN:
            x = tl.load(src, boundary_check=(0, 1), padding_option="nan")
        else:
            x = tl.load(src, boundary_check=(0, 1), padding_option="zero")
        tl.store(dst, x)                            # the padding too: unchecked, every lane inside `out`
        src = tl.advance(src, (BM, 3))
        dst = tl.advance(dst, (BM, 0))


def _block_walk(x, programs, steps, bm, bn, pad):
    m, n = x.shape
    out = np.empty((programs, steps, bm, bn), np.float32)
    for p in range(programs):
        for s in range(steps):
            rows, cols = p * bm - 1 + s * bm + np.arange(bm), -2 + 3 * s + np.arange(bn)
            inside = ((rows >= 0) & (rows < m))[:, None] & ((cols >= 0) & (cols < n))[None, :]
            out[p, s] = np.where(inside, x[np.clip(rows, 0, m - 1)][:, np.clip(cols, 0, n - 1)], pad)
    return out.reshape(-1, bn)


@pytest.mark.skipif(tuple(int(v) for v in triton.__version__.split(".")[:2]) >= (3, 9),
                    reason=f"Triton {triton.__version__} removed tl.make_block_ptr (tox -e triton36 runs it)")
@pytest.mark.parametrize("nan", [False, True], ids=["zero", "nan"])
def test_a_block_pointer_walks_from_before_the_tensor_and_stores_its_padding(nan):
    """Block pointers whose tile starts a row and two columns before the tensor and moves by ``(BM, 3)`` each trip of
    a ``lax.while_loop`` (a loaded trip count): the checked lanes outside read the padding (zero or NaN), which is
    stored too, so each tile shows where it was and what was padded."""
    programs, steps, bm, bn = 3, 3, 4, 8
    x = np.random.default_rng(9).standard_normal((9, 10)).astype(np.float32)
    got = _run(_block_walk_kernel, (x, np.array([steps], np.int32)), (programs * steps * bm, bn), (programs,),
               *x.shape, BM=bm, BN=bn, NAN=nan)
    np.testing.assert_array_equal(got, _block_walk(x, programs, steps, bm, bn, np.nan if nan else 0.0))


@triton.jit
def _block_row_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    src = tl.make_block_ptr(x_ptr, (n,), (1,), (pid * BLOCK,), (BLOCK,), (0,))
    dst = tl.make_block_ptr(out_ptr, (n,), (1,), (pid * BLOCK,), (BLOCK,), (0,))
    tl.store(dst, tl.load(src, boundary_check=(0,), padding_option="zero") * 2, boundary_check=(0,))


@pytest.mark.skipif(tuple(int(v) for v in triton.__version__.split(".")[:2]) >= (3, 9),
                    reason=f"Triton {triton.__version__} removed tl.make_block_ptr (tox -e triton36 runs it)")
def test_a_one_dimensional_block_pointer_reads_its_shape_and_stride():
    """Rank 1: ``tt.make_tensor_ptr``'s operands are base, one shape, one stride, one offset; the last program's
    block runs past ``n`` and its boundary check keeps ``OLD`` there."""
    x = np.random.default_rng(10).standard_normal(64).astype(np.float32)
    got = _run(_block_row_kernel, (x,), x.shape, (4,), 50, BLOCK=16)
    np.testing.assert_array_equal(got, np.where(np.arange(64) < 50, x * 2, np.float32(OLD)))
