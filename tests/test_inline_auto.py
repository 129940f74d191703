"""``inline``: ``True``, ``False`` or ``"auto"``, from the call, the kernel (``tritonplug.set_inline``) or
``TRITONPLUG_INLINE`` (call > kernel > setting), and ``"auto"``'s choice from path records (how ``tune`` makes
them, timing the whole program: ``test_inline_auto_program.py``).

Lowered for CUDA (sm_90) on a machine without a GPU: a launched call carries jaxlib's kernel call, an inlined one
XLA ops only; ``tritonplug.inspection.paths()`` says which and why. Needs the CUDA backend (the launching one)
and the CPU backend (the translation).
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest
import triton
import triton.language as tl
from helpers import for_backend, requires_backend, requires_cuda_device
from kernels import scaled_add_kernel

import tritonplug
from tritonplug.adapters import triton_compat
from tritonplug.errors import PluginError
from tritonplug.inspection import kernel_calls, paths
from tritonplug.tuning.records import FILE_FORMAT, decode_file, encode_file

pytestmark = [requires_backend("interpret")]
cuda = for_backend("cuda")
N = 1000
SPEC = jax.ShapeDtypeStruct((N,), jnp.float32)
INDICES = jax.ShapeDtypeStruct((N,), jnp.int32)


@triton.jit
def gather_kernel(x_ptr, idx_ptr, n, out_ptr, BLOCK: tl.constexpr):
    """``out[i] = x[idx[i]]``: its translation holds a gather."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    idx = tl.load(idx_ptr + offs, mask=mask, other=0)
    tl.store(out_ptr + offs, tl.load(x_ptr + idx, mask=mask), mask=mask)


@triton.jit
def cas_kernel(out_ptr, BLOCK: tl.constexpr):
    """An atomic compare-and-swap: the translation to XLA ops has none."""
    offs = tl.arange(0, BLOCK)
    tl.atomic_cas(out_ptr + offs, tl.zeros([BLOCK], tl.int32), tl.full([BLOCK], 1, tl.int32))


def scaled_add(x, y, **options):
    return tritonplug.triton_call(x, y, N, 2.0, kernel=scaled_add_kernel, out_type=SPEC, grid=(triton.cdiv(N, 128),),
                                  BLOCK=128, **options)


def gather(x, idx, **options):
    return tritonplug.triton_call(x, idx, N, kernel=gather_kernel, out_type=SPEC, grid=(triton.cdiv(N, 128),),
                                  BLOCK=128, **options)


def cas(**options):
    return tritonplug.triton_call(kernel=cas_kernel, out_type=jax.ShapeDtypeStruct((8,), jnp.int32), grid=(1,),
                                  BLOCK=8, **options)


def lower_for_cuda(fn, *specs) -> tuple[bool, object]:
    """Whether ``fn`` lowered for sm_90 launches a kernel (jaxlib's kernel call), and the lowering's path."""
    text = jax.jit(lambda *a: fn(*a)).trace(*specs).lower(lowering_platforms=("cuda",)).as_text()  # a new trace
    return bool(kernel_calls(text)), paths()[-1]


@pytest.fixture
def sm90(monkeypatch, private_cache):
    monkeypatch.setenv("TRITONPLUG_CUDA_ARCH", "90")
    monkeypatch.delenv("TRITONPLUG_INLINE", raising=False)
    monkeypatch.delenv("TRITONPLUG_TUNING_FILE", raising=False)
    yield private_cache
    tritonplug.set_inline(scaled_add_kernel, None)


MODES = (None, True, False, "auto")
SETTINGS = {None: None, True: "on", False: "off", "auto": "auto"}


@cuda
def test_the_call_then_the_kernel_then_the_setting_decide_and_the_lowering_follows(sm90, monkeypatch):
    """Every combination: the first of (call, kernel, setting) that is set is the mode; without a record,
    only ``True`` inlines (``"auto"`` never inlines unmeasured)."""
    for call_mode, kernel_mode, setting in itertools.product(MODES, MODES, MODES):
        tritonplug.set_inline(scaled_add_kernel, kernel_mode)
        if setting is None:
            monkeypatch.delenv("TRITONPLUG_INLINE", raising=False)
        else:
            monkeypatch.setenv("TRITONPLUG_INLINE", SETTINGS[setting])
        options = {} if call_mode is None else {"inline": call_mode}
        launched, path = lower_for_cuda(lambda x, y, options=options: scaled_add(x, y, **options), SPEC, SPEC)
        expected = next(((m, s) for m, s in zip((call_mode, kernel_mode, setting), ("call", "kernel", "setting"),
                                                strict=True) if m is not None), (False, "default"))
        case = f"call={call_mode!r} kernel={kernel_mode!r} setting={setting!r}: {path}"
        assert (path.mode, path.source) == expected, case
        assert launched == (expected[0] is not True), case
        assert path.path == ("launched" if launched else "inlined"), case
        assert path.kernel == "scaled_add_kernel" and path.platform == "cuda", case


@pytest.mark.parametrize("value", [1, "yes", "on", 0.0])
def test_a_bad_inline_is_refused_at_the_call_naming_it(value):
    x = jnp.ones((N,), jnp.float32)
    kind = ValueError if isinstance(value, str) else TypeError
    with pytest.raises(kind, match=r"inline must be True .*, False .*, 'auto' .* or None .*got"):
        scaled_add(x, x, inline=value)


def test_a_kernel_default_set_on_the_jit_function_holds_for_its_autotuner():
    from tritonplug.calls.inline_mode import kernel_default

    tuned = triton.autotune(configs=[triton.Config({"BLOCK": 128})], key=["n"])(scaled_add_kernel)
    try:
        tritonplug.set_inline(scaled_add_kernel, "auto")
        assert kernel_default(tuned) == "auto"
        tritonplug.set_inline(tuned, False)  # the wrapper's own wins
        assert kernel_default(tuned) is False and kernel_default(scaled_add_kernel) == "auto"
    finally:
        tritonplug.set_inline(scaled_add_kernel, None)


def test_a_bad_kernel_default_and_a_bad_setting_are_refused_naming_them(monkeypatch):
    with pytest.raises(ValueError, match=r"set_inline\(kernel, mode\): mode must be True"):
        tritonplug.set_inline(scaled_add_kernel, "sometimes")
    with pytest.raises(TypeError, match=r"set_inline\(kernel, mode\): kernel must be a Triton kernel object"):
        tritonplug.set_inline(3, "auto")
    monkeypatch.setenv("TRITONPLUG_INLINE", "sometimes")
    x = jnp.ones((N,), jnp.float32)
    with pytest.raises(ValueError, match=r"TRITONPLUG_INLINE must be on, off or auto"):
        scaled_add(x, x)
    assert scaled_add(x, x, inline=False).shape == (N,)  # the call's mode wins: the setting is not read


@pytest.mark.parametrize(("word", "mode"), [("on", True), ("1", True), ("TRUE", True), ("off", False),
                                            ("no", False), ("auto", "auto"), ("Auto", "auto")])
def test_the_setting_takes_the_on_off_words_and_auto(monkeypatch, word, mode):
    from tritonplug import settings

    monkeypatch.setenv("TRITONPLUG_INLINE", word)
    assert settings.INLINE.get() == mode


def test_unfusible_ops_counts_gathers_scatters_and_while_loops_in_sub_jaxprs_too():
    from tritonplug.inspection import unfusible_ops

    x, idx = jnp.arange(8.0), jnp.array([3, 1, 2], jnp.int32)
    assert unfusible_ops(lambda x: jnp.tanh(x[2:6]) * 2, x) == {"gather": 0, "scatter": 0, "while": 0}
    assert unfusible_ops(lambda x, i: x[i], x, idx)["gather"] == 1
    assert unfusible_ops(lambda x, i: x.at[i].add(1.0), x, idx)["scatter"] == 1
    loop = lambda x: jax.lax.fori_loop(0, jnp.int32(x[0]), lambda i, c: c + 1.0, x)  # noqa: E731
    assert unfusible_ops(loop, x)["while"] == 1
    branches = lambda x, i: jax.lax.cond(x[0] > 0, lambda: x[i].sum(), lambda: x.at[i].set(0.0).sum())  # noqa: E731
    assert unfusible_ops(jax.jit(branches), x, idx) == {"gather": 1, "scatter": 1, "while": 0}  # in the branches


def path_record(kernel, path: str, args: dict, dtypes: list, constexprs: dict, **info) -> dict:
    """A path record written by hand (docs/using.md: the format), for sm_90."""
    return {"kernel": kernel.fn.__name__ if hasattr(kernel, "fn") else kernel.__name__,
            "source": triton_compat.source_key(kernel), "backend": "cuda",
            "target": {"platform": "cuda", "arch": "90", "warp_size": 32},
            "key": {"args": args, "dtypes": dtypes, "constexprs": constexprs, "choice": "path"},
            "config": {"path": path}, **info}


def scaled_add_record(path: str, **info) -> dict:
    args = {"x_ptr": "float32[1000]", "y_ptr": "float32[1000]", "n": N, "alpha": 2.0, "out_ptr": "float32[1000]",
            "BLOCK": 128}
    return path_record(scaled_add_kernel, path, args, ["float32"] * 3, {"BLOCK": 128}, **info)


def use_records(monkeypatch, tmp_path: Path, *records: dict) -> None:
    file = tmp_path / f"paths{len(list(tmp_path.glob('paths*.json')))}.json"  # a new name: the file is read once
    file.write_text(json.dumps({"format": FILE_FORMAT, "version": 1, "records": list(records)}))
    monkeypatch.setenv("TRITONPLUG_TUNING_FILE", str(file))


def auto_scaled_add(x, y):
    return scaled_add(x, y, inline="auto")


@cuda
def test_auto_follows_the_path_record(sm90, monkeypatch, tmp_path):
    launched, path = lower_for_cuda(auto_scaled_add, SPEC, SPEC)
    assert launched and "no path record" in path.reason
    use_records(monkeypatch, tmp_path, scaled_add_record("inline", times_us={"launch": 9.0, "inline": 4.0}))
    launched, path = lower_for_cuda(auto_scaled_add, SPEC, SPEC)
    assert not launched and path.path == "inlined", path
    assert "measured inlined faster (inline 4.0 us, launch 9.0 us)" in path.reason
    assert path.unfusible == {"gather": 0, "scatter": 0, "while": 0} and path.times_us == {"launch": 9.0,
                                                                                          "inline": 4.0}
    use_records(monkeypatch, tmp_path, scaled_add_record("launch", times_us={"launch": 4.0, "inline": 9.0}))
    launched, path = lower_for_cuda(auto_scaled_add, SPEC, SPEC)
    assert launched and "the path record says launch: measured faster launched" in path.reason, path
    # the record is for these shapes only: another length has none
    other = jax.ShapeDtypeStruct((N + 1,), jnp.float32)
    launched, path = lower_for_cuda(lambda x, y: tritonplug.triton_call(
        x, y, N + 1, 2.0, kernel=scaled_add_kernel, out_type=other, grid=(8,), BLOCK=128, inline="auto"), other, other)
    assert launched and "no path record" in path.reason


@cuda
def test_auto_launches_where_no_backend_translates_and_true_names_the_plugin(sm90, monkeypatch, tmp_path):
    """A GPU process without the CPU backend's plugin: ``"auto"`` launches, even where a record says inline, and
    says why; ``inline=True`` is refused naming the plugin to install."""
    from tritonplug.process.state import state

    use_records(monkeypatch, tmp_path, scaled_add_record("inline", times_us={"launch": 9.0, "inline": 4.0}))
    monkeypatch.setenv("TRITONPLUG_DISABLE_PLUGINS", "interpret")
    state.reset(plugins=True)
    try:
        launched, path = lower_for_cuda(auto_scaled_add, SPEC, SPEC)
        assert launched and path.path == "launched", path
        assert "no loaded backend translates kernels" in path.reason and path.reason.endswith("; launched"), path
        with pytest.raises(PluginError, match=r"inline=True needs .* tritonplug-interpret"):
            lower_for_cuda(lambda x, y: scaled_add(x, y, inline=True), SPEC, SPEC)
    finally:
        monkeypatch.delenv("TRITONPLUG_DISABLE_PLUGINS")
        state.reset(plugins=True)


@cuda
def test_auto_launches_a_translation_holding_a_gather_whatever_the_record_says(sm90, monkeypatch, tmp_path):
    args = {"x_ptr": "float32[1000]", "idx_ptr": "int32[1000]", "n": N, "out_ptr": "float32[1000]", "BLOCK": 128}
    use_records(monkeypatch, tmp_path, path_record(gather_kernel, "inline", args, ["float32", "int32", "float32"],
                                                   {"BLOCK": 128}))
    launched, path = lower_for_cuda(lambda x, i: gather(x, i, inline="auto"), SPEC, INDICES)
    assert launched and path.path == "launched", path
    assert "its translation holds 1 gather; launched" in path.reason and path.unfusible["gather"] == 1
    launched, path = lower_for_cuda(lambda x, i: gather(x, i, inline=True), SPEC, INDICES)  # asked for: inlined
    assert not launched and path.unfusible["gather"] == 1


@cuda
def test_auto_launches_an_untranslatable_kernel_that_true_refuses(sm90, monkeypatch, tmp_path):
    use_records(monkeypatch, tmp_path, path_record(cas_kernel, "inline", {"out_ptr": "int32[8]", "BLOCK": 8},
                                                   ["int32"], {"BLOCK": 8}))
    launched, path = lower_for_cuda(lambda: cas(inline="auto"))
    assert launched and "untranslatable" in path.reason and "tt.atomic_cas" in path.reason, path
    with pytest.raises(NotImplementedError, match=r"cannot be inlined on 'cuda'"):
        lower_for_cuda(lambda: cas(inline=True))


@cuda
def test_a_path_record_survives_the_store_and_a_tuning_file(sm90):
    """A record put in the store (as ``tune`` puts it) serves a fresh process state from the cache directory, and
    exports to a tuning file that reads back the same."""
    from tritonplug.process.state import state
    from tritonplug.tuning.records import parse_record

    assert state.tuning.put(parse_record(scaled_add_record("inline", times_us={"launch": 2.0, "inline": 1.0})))
    state.reset()  # as a new process: the record is read from the cache directory
    launched, path = lower_for_cuda(auto_scaled_add, SPEC, SPEC)
    assert not launched and path.times_us == {"launch": 2.0, "inline": 1.0}
    (stored,) = state.tuning.stored()
    (read,) = decode_file(encode_file([stored]))
    assert read == stored and read.key["choice"] == "path" and read.config == {"path": "inline"}


def test_a_path_record_with_a_bad_path_or_choice_is_refused(tmp_path):
    bad_path = scaled_add_record("sometimes")
    bad_choice = {**scaled_add_record("inline"), "key": {**scaled_add_record("inline")["key"], "choice": "what"}}
    for record, message in ((bad_path, "a path record's 'config' must be"), (bad_choice, "'key.choice' must be")):
        document = json.dumps({"format": FILE_FORMAT, "version": 1, "records": [record]}).encode()
        with pytest.raises(ValueError, match=message):
            decode_file(document)


def test_auto_on_the_cpu_is_its_backend_s_translation_with_nothing_to_choose():
    x = jax.device_put(jnp.arange(N, dtype=jnp.float32), jax.devices("cpu")[0])
    program = jax.jit(auto_scaled_add)
    text = program.lower(x, x).as_text()
    assert "tritonplug_host_kernel" not in text and not kernel_calls(text)
    path = paths()[-1]
    assert path.path == "inlined" and "nothing to choose" in path.reason and path.mode == "auto"
    assert jnp.allclose(program(x, x), 3 * x)
    report = tritonplug.tune(auto_scaled_add, x, x)  # nothing to time on the CPU
    assert report.calls == ()


@cuda
@requires_cuda_device
def test_tune_on_a_gpu_times_the_program_with_both_paths_and_the_lowering_follows(private_cache):
    """The GPU counterpart of ``test_inline_auto_program.py`` (which runs the decision on the CPU)."""
    x = jnp.arange(N, dtype=jnp.float32)  # on the GPU, JAX's default device
    (tuned,) = tritonplug.tune(auto_scaled_add, x, x).calls
    assert [t.description for t in tuned.timings] == ["launch", "inline"], tuned
    assert all(t.median_us is not None and t.median_us > 0 for t in tuned.timings) and tuned.persisted
    times = {t.description: t.median_us for t in tuned.timings}
    # medians only (the samples are not recorded): faster beyond noise implies a faster median
    winner = tuned.winner
    assert winner in ("launch", "inline") and tuned.key["choice"] == "path"
    assert winner == "launch" or times["inline"] < times["launch"]
    program = jax.jit(lambda x, y: auto_scaled_add(x, y))
    assert bool(kernel_calls(program.lower(x, x).as_text())) == (winner == "launch")
    path = paths()[-1]
    assert path.path == {"launch": "launched", "inline": "inlined"}[winner], path
    assert set(path.times_us) == {"launch", "inline"} and path.program.endswith("auto_scaled_add")
    assert jnp.allclose(program(x, x), 3 * x)
    (cas_tuned,) = tritonplug.tune(lambda: cas(inline="auto")).calls  # untranslatable: launched, untimed
    assert cas_tuned.winner == "launch" and cas_tuned.timings == ()


_launched_scaled_add = tritonplug.launch(scaled_add_kernel)


@tritonplug.torch_launcher
def _scaled_add_launcher(x, y):
    out = tritonplug.empty_like(x)
    _launched_scaled_add[(triton.cdiv(N, 128),)](x, y, N, 2.0, out, BLOCK=128)
    return out


@cuda
@pytest.mark.parametrize("call", [_scaled_add_launcher, scaled_add], ids=["launcher", "triton_call"])
def test_a_traced_repeat_follows_the_setting_as_it_changes(sm90, monkeypatch, call):
    """A call traced again after ``TRITONPLUG_INLINE`` changed takes the new mode: the memo's entry of the same
    call made before holds the old one (``eager.memo``; a kernel default set clears the memo)."""
    for setting in ("on", "off", "on", "auto", "off"):
        monkeypatch.setenv("TRITONPLUG_INLINE", setting)
        launched, path = lower_for_cuda(call, SPEC, SPEC)
        mode = {"on": True, "off": False}.get(setting, setting)
        assert (launched, path.mode, path.source) == (mode is not True, mode, "setting"), (setting, path)
