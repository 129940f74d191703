"""The parts of ``examples/moe/ragged.py`` that need no mesh: :func:`ragged.pieces` (each slice of the exchange cut
into pieces, so XLA's GPU kernel gets enough updates to fill the device) moves the same rows to the same places,
and the permutations with hand-written gradients (:func:`ragged.slot_rows`, :func:`ragged.unsorted`) equal the
``jnp`` expressions they replace, value and gradient.

Each ``ragged_all_to_all`` update copies ``operand[input_offsets[i]:][:send_sizes[i]]`` to
``output[output_offsets[i]:]`` of its peer; which peer does not change how a slice is cut, so a NumPy copy loop
into one output is the reference (the peers' layout is tested on 8 CPU devices in ``test_moe_parallel.py`` and
against XLA's own op in ``test_moe_ragged_gpu.py``)."""

from __future__ import annotations

import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from examples.moe import ragged  # noqa: E402


def _copies(operand, rows, input_offsets, send_sizes, output_offsets):
    out = np.full((rows, operand.shape[1]), -1.0, operand.dtype)
    for start, size, at in zip(input_offsets, send_sizes, output_offsets, strict=True):
        assert size >= 0 and (out[at:at + size] == -1.0).all(), "updates overlap"
        out[at:at + size] = operand[start:start + size]
    return out


@settings(max_examples=150, deadline=None)
@given(sizes=st.lists(st.integers(0, 40), min_size=1, max_size=9), count=st.integers(1, 12),
       gap=st.integers(0, 3), seed=st.integers(0, 2**16))
def test_pieces_move_every_row_where_the_whole_slices_do(sizes, count, gap, seed):
    rng = np.random.default_rng(seed)
    send = np.asarray(sizes, np.int32)
    starts = np.cumsum(send) - send
    order = rng.permutation(len(send))  # the slices land in another order, with gaps between them
    lands = np.zeros_like(send)
    lands[order] = np.cumsum(send[order] + gap) - send[order] - gap
    operand = rng.standard_normal((int(send.sum()), 2)).astype(np.float32)
    rows = int(lands.max() + send.max() + 1)
    args = [jnp.asarray(a) for a in (starts.astype(np.int32), send, lands, send)]
    cut = [np.asarray(a) for a in ragged.pieces(*args, count)]
    assert all(len(a) == len(send) * count for a in cut)
    np.testing.assert_array_equal(cut[1], cut[3])  # the receiver cuts its sizes as the sender does
    assert (cut[1] <= np.repeat(-(-send // count), count)).all()  # no piece longer than its share
    np.testing.assert_array_equal(_copies(operand, rows, *cut[:3]), _copies(operand, rows, starts, send, lands))


def _permutation(n: int, seed: int):
    return jnp.asarray(np.random.default_rng(seed).permutation(n).astype(np.int32))


def test_slot_rows_is_the_gather_and_its_gradient_sums_each_tokens_slots():
    t, k, d = 12, 3, 5
    order = _permutation(t * k, 0)
    h = jax.random.normal(jax.random.key(1), (t, d), jnp.float32)
    g = jax.random.normal(jax.random.key(2), (t * k, d), jnp.float32)
    got, vjp = jax.vjp(lambda h: ragged.slot_rows(h, order, ragged.inverse(order), k), h)
    want, want_vjp = jax.vjp(lambda h: h[order // k], h)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_allclose(vjp(g)[0], want_vjp(g)[0], rtol=1e-6, atol=1e-6)


def test_unsorted_puts_rows_back_in_slot_order_and_its_gradient_is_the_gather():
    n, d = 30, 4
    order = _permutation(n, 3)
    y = jax.random.normal(jax.random.key(4), (n, d), jnp.float32)
    g = jax.random.normal(jax.random.key(5), (n, d), jnp.float32)
    np.testing.assert_array_equal(ragged.inverse(order)[order], np.arange(n))
    got, vjp = jax.vjp(lambda y: ragged.unsorted(y, order, ragged.inverse(order)), y)
    want, want_vjp = jax.vjp(lambda y: jnp.zeros_like(y).at[order].set(y), y)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(vjp(g)[0], want_vjp(g)[0])


def test_the_permutations_differentiate_inside_jit_and_twice_composed_are_the_identity():
    t, k, d = 8, 2, 3
    order = _permutation(t * k, 6)
    h = jax.random.normal(jax.random.key(7), (t, d), jnp.float32)

    back = ragged.inverse(order)

    def f(h):  # each slot's row sorted by expert, put back: every token k times, in slot order
        return ragged.unsorted(ragged.slot_rows(h, order, back, k), order, back).reshape(t, k, d).sum(axis=1)

    np.testing.assert_allclose(jax.jit(f)(h), k * h, rtol=1e-6)
    np.testing.assert_allclose(jax.jit(jax.grad(lambda h: jnp.sum(f(h) * h)))(h), 2 * k * h, rtol=1e-5)
