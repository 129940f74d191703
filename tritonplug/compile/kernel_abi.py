"""The argument order of a compiled kernel, for runtimes that hand out buffers in order.

jaxlib's Triton runtime gives the k-th pointer argument of a kernel the k-th buffer of its custom call,
and a custom call's buffers are all its operands, then all its results (DESIGN §4). The emitter may order
the operands among themselves and the results among themselves as it likes, but no result can come before
an operand. A kernel whose signature puts an output pointer before an input pointer (Liger's
``_rms_norm_forward_kernel(Y_ptr, Y_row_stride, X_ptr, ...)``, the layer-norm tutorial's
``(X, Y, W, B, ...)``) therefore cannot run as compiled. For backends that declare
``BackendInfo.buffer_order == "operands_first"`` the host compiles such a kernel with its output pointers
moved behind its other arguments: :func:`argument_order` chooses the order, :func:`permute_entry_arguments`
rewrites the ``tt.func`` header of the front end's TTIR (or TTGIR) before Triton's back end runs, and
:func:`ordered_params` lists the launch's parameters in that order. Every other argument keeps its
relative place, and a kernel whose outputs already come last compiles exactly as Triton compiles it.

The emitter never assumes an order: it reads the buffers the pointer parameters name
(``emitters.buffer_layout``) and refuses a sequence that would put a result before an operand.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tritonplug.records import ArrayParam, ConstexprParam, TensorDescriptorParam


def runtime_leaves(params: Sequence[Any], names: Sequence[str]) -> list[tuple[str, Any]]:
    """The kernel's runtime arguments (tuples flattened, constexprs left out), each with a name such as
    ``x_ptr`` or ``pair[1]``: the arguments of the front end's ``tt.func``, in its order."""
    leaves: list[tuple[str, Any]] = []

    def visit(name: str, param: Any) -> None:
        if isinstance(param, tuple):
            for i, p in enumerate(param):
                visit(f"{name}[{i}]", p)
        elif not isinstance(param, ConstexprParam):
            leaves.append((name, param))

    for name, param in zip(names, params, strict=True):
        visit(name, param)
    return leaves


def _is_output(param: Any, n_operands: int) -> bool:
    return isinstance(param, ArrayParam) and param.buffer >= n_operands


def _is_input(param: Any, n_operands: int) -> bool:
    return isinstance(param, TensorDescriptorParam) or isinstance(param, ArrayParam) and param.buffer < n_operands


def argument_order(params: Sequence[Any], names: Sequence[str], n_operands: int) -> tuple[int, ...] | None:
    """``None`` when the runtime arguments can be laid out as operands then results as they stand;
    otherwise the order (indices into :func:`runtime_leaves`) with every output pointer moved behind the
    other arguments, both groups in signature order."""
    leaves = [p for _, p in runtime_leaves(params, names)]
    outputs = [i for i, p in enumerate(leaves) if _is_output(p, n_operands)]
    inputs = [i for i, p in enumerate(leaves) if _is_input(p, n_operands)]
    if not outputs or not inputs or outputs[0] > inputs[-1]:
        return None
    return tuple([i for i in range(len(leaves)) if i not in outputs] + outputs)


def ordered_params(params: Sequence[Any], names: Sequence[str],
                   order: tuple[int, ...]) -> tuple[tuple[Any, ...], tuple[str, ...]]:
    """The runtime arguments in ``order``, flat, with their names (a launch in the compiled kernel's order)."""
    leaves = runtime_leaves(params, names)
    chosen = [leaves[i] for i in order]
    return tuple(p for _, p in chosen), tuple(n for n, _ in chosen)


def permute_entry_arguments(ir: str, order: Sequence[int], kernel_name: str) -> str:
    """``ir`` (TTIR or TTGIR text) with the arguments of its public ``tt.func`` in ``order``.

    MLIR names block arguments in the header and refers to them by name in the body, so reordering the
    header's argument list (each argument with its type, attributes and location) reorders the
    kernel's parameters and nothing else.
    """
    marker = ir.find("tt.func public @")
    if marker < 0 or ir.find("tt.func public @", marker + 1) >= 0:
        raise RuntimeError(f"kernel {kernel_name!r}: expected one public tt.func in the front end's IR")
    start = ir.index("(", marker) + 1
    pieces, end = _split_arguments(ir, start)
    if sorted(order) != list(range(len(pieces))):
        raise RuntimeError(f"kernel {kernel_name!r}: its compiled entry point has {len(pieces)} arguments, but "
                           f"the launch has {len(order)} runtime parameters; cannot reorder them")
    return ir[:start] + ", ".join(pieces[i] for i in order) + ir[end:]


_CLOSE = {"(": ")", "[": "]", "{": "}", "<": ">"}


def _split_arguments(text: str, start: int) -> tuple[list[str], int]:
    """The top-level comma-separated pieces from ``start`` to the ``)`` closing the argument list, and
    that parenthesis's index. Brackets of every kind nest; string literals are skipped whole."""
    pieces: list[str] = []
    stack: list[str] = []
    piece_start, i = start, start
    while i < len(text):
        c = text[i]
        if c == '"':
            i += 1
            while text[i] != '"':
                i += 2 if text[i] == "\\" else 1
        elif c in _CLOSE:
            stack.append(_CLOSE[c])
        elif c == "-" and text.startswith("->", i):
            i += 1  # an arrow inside a type, not a closing bracket
        elif stack and c == stack[-1]:
            stack.pop()
        elif not stack and c == ")":
            last = text[piece_start:i].strip()
            return pieces + ([last] if last else []), i
        elif not stack and c == ",":
            pieces.append(text[piece_start:i].strip())
            piece_start = i + 1
        i += 1
    raise RuntimeError("unterminated tt.func argument list in the front end's IR")
