"""Issue 37's held-out bad inputs, refused at the call naming the argument and what was expected (or warned about,
naming the setting): ``@tritonplug.partitioned`` misused (a rule of the wrong type, a str where a tuple of factors
belongs, no rule, a closure over arrays, ``jax.grad``), a tuple passed to a kernel's scalar parameter,
``@torch_launcher("x")``, ``TRITONPLUG_*`` typos and unknown plugin names, ``TRITONPLUG_TUNING_FILE`` naming a
directory, a malformed ``--mesh`` of ``examples/llama/train.py``, and an all-gather XLA combined from several
operands in ``inspection.collectives``. The cases that need several devices are in ``test_bad_input_sharded.py``.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from bad_input_support import Case, call, check_refused, params, skip_without_backends, use_fresh_cache
from kernels import add_kernel, tuple_add_kernel

import tritonplug
from tritonplug import settings
from tritonplug.inspection import collectives

X = np.arange(4 * 8, dtype=np.float32).reshape(4, 8)


def add_rows(x, y):
    return x + y


# ----- @tritonplug.partitioned misused -------------------------------------------------------------------------

@pytest.mark.parametrize(("make", "match"), [
    (lambda: tritonplug.partitioned(["r c, r c -> r c"]), r"the rule is one str .*got the list \['r c, r c -> r c'\]"),
    (lambda: tritonplug.partitioned(("r c", "r c -> r c")), r"got the tuple .*write it as one str: 'r c, r c -> r c'"),
    (lambda: tritonplug.partitioned("... d, d -> ... d", need_replication="d"),
     r"need_replication takes a tuple of factor names, got the str 'd'; .*write need_replication=\('d',\)"),
    (lambda: tritonplug.partitioned("r c -> c", reduction_factors="r"),
     r"reduction_factors takes a tuple of factor names, got the str 'r'; .*reduction_factors=\('r',\)"),
    (lambda: tritonplug.sharding_rule("r c -> r c", need_replication_factors="c"),
     r"need_replication_factors takes a tuple of factor names, got the str 'c'"),
    (lambda: tritonplug.partitioned("r c -> r c", need_replication=("c", 1)), r"need_replication takes a tuple of "
                                                                               r"factor names such as \('d',\)"),
    (lambda: tritonplug.partitioned(), r"partitioned\(\) needs a sharding rule.*@tritonplug.partitioned\('b n, b n"),
])
def test_a_malformed_rule_is_refused_when_decorating(make, match):
    with pytest.raises(TypeError, match=match):
        make()


def test_a_bare_decorator_names_the_missing_rule_when_the_function_is_called():
    decorated = tritonplug.partitioned(add_rows)  # @tritonplug.partitioned without (rule)
    with pytest.raises(TypeError, match=r"add_rows was decorated with a bare @tritonplug.partitioned, which takes a "
                                        r"sharding rule: write @tritonplug.partitioned\('b n, b n -> b n'\)"):
        decorated(X, X)
    with pytest.raises(TypeError, match=r"partitioned\('r c -> r c'\) decorates one function, got \(ndarray\)"):
        tritonplug.partitioned("r c -> r c")(X)


def test_arrays_a_partitioned_function_closes_over_are_named():
    w = jnp.ones(8)

    @tritonplug.partitioned("r c -> r c")
    def scaled(x):
        return x * w

    match = r"partitioned scaled: the function closes over 1 array\(s\) \(w\): float32\[8\]. .*pass it as an argument"
    with pytest.raises(TypeError, match=match):
        scaled(X)  # eagerly
    with pytest.raises(TypeError, match=match):
        jax.jit(scaled)(X)

    @tritonplug.partitioned("r c -> r c")
    def shifted(x):
        return x + np.arange(8, dtype=np.float32)  # a NumPy array made inside is a constant of the trace too

    with pytest.raises(TypeError, match=r"closes over 1 array\(s\) \(none of its own names: .*a NumPy array it makes"):
        shifted(X)


@pytest.mark.parametrize("transform", [
    lambda f: jax.grad(lambda x: jnp.sum(f(x, x)))(X),
    lambda f: jax.jvp(lambda x: f(x, x), (X,), (X,)),
    lambda f: jax.jit(jax.linearize, static_argnums=0)(lambda x: f(x, x), X),
])
def test_differentiating_a_partitioned_function_names_the_fix_on_one_device(transform):
    f = tritonplug.partitioned("r c, r c -> r c")(add_rows)
    with pytest.raises(NotImplementedError, match=r"partitioned add_rows: jax.grad, jax.jvp and jax.linearize "
                                                  r"cannot differentiate .*jax.custom_vjp"):
        transform(f)


# ----- a tuple for a kernel's scalar parameter -----------------------------------------------------------------

CASES: dict[str, Case] = {
    "shape_tuple_for_a_scalar": Case(lambda x, y: call(x, y, x.shape), TypeError,
                                     r"argument 'n' of kernel 'add_kernel' is one value \(the kernel computes "
                                     r"`offs < n`\), but a tuple was passed: \(256,\); pass one number"),
    "stride_tuple_for_a_scalar": Case(lambda x, y: call(x, y, (32, 1)), TypeError,  # as a torch x.stride()
                                      r"argument 'n' of kernel 'add_kernel' is one value .*tuple was passed: "
                                      r"\(32, 1\)"),
    "tuple_of_arrays_for_a_pointer": Case(lambda x, y: call((x, x), y), TypeError,
                                          r"argument 'x_ptr' of kernel 'add_kernel' is one value \(the kernel "
                                          r"computes `x_ptr \+ offs`\)"),
}


@pytest.fixture
def fresh_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_state):
    return use_fresh_cache(tmp_path / "kernel-cache", monkeypatch, fresh_state)


@skip_without_backends
@pytest.mark.parametrize(("name", "stage", "platform"), params(CASES))
def test_a_tuple_for_a_scalar_parameter_is_refused_at_the_call(name, stage, platform, fresh_cache):
    check_refused(CASES[name], stage, platform, fresh_cache)


def test_tuples_still_bind_to_parameters_the_kernel_indexes():
    from tritonplug.calls import source_uses
    from tritonplug.process.state import state

    facts = state.kernels.get(tuple_add_kernel)
    assert "yz" not in source_uses.one_value_params(facts) and "n" in source_uses.one_value_params(facts)
    assert set(source_uses.one_value_params(state.kernels.get(add_kernel))) == {"x_ptr", "y_ptr", "n", "out_ptr"}


# ----- @torch_launcher("x") ------------------------------------------------------------------------------------

@pytest.mark.parametrize(("given", "match"), [
    ("x", r"torch_launcher decorates a function .*got str 'x'; .*@tritonplug.torch_launcher\(writes=\('x',\)\)"),
    (["x", "y"], r"got list .*writes=\('x', 'y'\)"),
    (3, r"torch_launcher decorates a function .*got int 3"),
])
def test_torch_launcher_given_names_positionally_points_to_writes(given, match):
    with pytest.raises(TypeError, match=match):
        tritonplug.torch_launcher(given)


# ----- the environment -----------------------------------------------------------------------------------------

@pytest.fixture
def reloaded(monkeypatch: pytest.MonkeyPatch):
    """The plugins loaded afresh (the first use of tritonplug in a process, when the environment is checked)."""
    from tritonplug.process.state import state

    def load() -> list[str]:
        state.reset(plugins=True)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            state.host()
        return [str(w.message) for w in caught if issubclass(w.category, UserWarning)]
    yield load
    monkeypatch.undo()
    state.reset(plugins=True)


def test_a_typo_in_a_variable_name_is_warned_about_with_the_closest_setting(reloaded, monkeypatch):
    monkeypatch.setenv("TRITONPLUG_CACHE_DRI", "/tmp/somewhere")
    monkeypatch.setenv("TRITONPLUG_COMPILE_WORKER", "2")
    monkeypatch.setenv("TRITONPLUG_SOME_TOOLS_OWN_VARIABLE", "1")  # close to no setting: left to `tritonplug info`
    said = reloaded()
    assert ("tritonplug: TRITONPLUG_CACHE_DRI is set, but no setting has that name, so it is ignored; did you mean "
            "TRITONPLUG_CACHE_DIR?") in said
    assert any("TRITONPLUG_COMPILE_WORKER is set" in s and "TRITONPLUG_COMPILE_WORKERS?" in s for s in said)
    assert not any("TOOLS_OWN" in s for s in said)


def test_an_unknown_plugin_to_disable_is_warned_about_with_the_known_ones(reloaded, monkeypatch):
    monkeypatch.setenv("TRITONPLUG_DISABLE_PLUGINS", "interpet,jax")
    said = [s for s in reloaded() if "TRITONPLUG_DISABLE_PLUGINS" in s]
    assert len(said) == 1 and "names 'interpet', which no installed plugin is called" in said[0], said
    assert "the plugins are " in said[0] and "jax" in said[0].split("the plugins are ")[1]


def test_a_tuning_file_that_is_a_directory_is_an_error_naming_the_setting(reloaded, monkeypatch, tmp_path):
    monkeypatch.setenv("TRITONPLUG_TUNING_FILE", str(tmp_path))
    assert any(f"TRITONPLUG_TUNING_FILE names a directory ({tmp_path})" in s for s in reloaded())
    from tritonplug.process.state import state

    with pytest.raises(settings.SettingError, match=r"TRITONPLUG_TUNING_FILE names a directory .*it takes a file"):
        state.tuning.lookup("any identity")


# ----- examples/llama/train.py --mesh --------------------------------------------------------------------------

@pytest.mark.parametrize(("mesh", "says"), [
    ("data2", "argument --mesh: 'data2' is not axis=size; write e.g. 'data=2,model=2'"),
    ("data=x", "argument --mesh: the size of axis 'data' must be a positive integer, got 'x'"),
    ("data=2,foo=2", "argument --mesh: unknown axis 'foo'"),
    ("data=0", "argument --mesh: the size of axis 'data' must be a positive integer, got '0'"),
    ("data=1,data=1", "argument --mesh: axis 'data' is given twice"),
])
def test_a_malformed_mesh_is_an_argparse_error_naming_the_option(mesh, says, capsys):
    from examples.llama import train

    with pytest.raises(SystemExit) as exited:
        train.main(["--mesh", mesh, "--steps", "0"])
    assert exited.value.code == 2 and says in capsys.readouterr().err


def test_a_batch_the_data_axis_does_not_divide_is_refused_naming_the_option():
    from examples.llama import train

    with pytest.raises(SystemExit, match=r"error: argument --mesh: data=4 does not divide the batch \(6 sequences\): "
                                         r"give --batch a multiple of 4"):
        train.main(["--mesh", "data=4", "--batch", "6", "--steps", "0"])
    devices = len(jax.devices())
    with pytest.raises(SystemExit, match=rf"argument --mesh: data={2 * devices},model=1 is {2 * devices} devices, "
                                         rf"but {devices} are visible"):
        train.mesh_of((2 * devices, 1), batch=2 * devices)


# ----- inspection.collectives ----------------------------------------------------------------------------------

def test_an_all_gather_combined_from_several_operands_lists_each():
    text = ("  %all-gather = (f32[8,4]{1,0}, f32[16]{0}) all-gather(f32[1,4]{1,0} %a, f32[2]{0} %b), channel_id=2, "
            "replica_groups=[1,8]<=[8], dimensions={0}, use_global_device_ids=true\n"
            "  %ags = ((f32[1,4]{1,0}, bf16[2]{0}), (f32[8,4]{1,0}, bf16[16]{0})) all-gather-start(f32[1,4]{1,0} %a, "
            "bf16[2]{0} %b), channel_id=3, dimensions={0}\n"
            "  %cps = (f32[4]{0}, f32[4]{0}, u32[], u32[]) collective-permute-start(f32[4]{0} %q), channel_id=4\n"
            "  %ars = (f32[48]{0}, bf16[8]{0}) all-reduce-start(f32[48]{0} %x, bf16[8]{0} %y), to_apply=%add\n")
    assert collectives(text) == [
        {"op": "all-gather", "shape": (8, 4), "dtype": "f32", "bytes": 128},
        {"op": "all-gather", "shape": (16,), "dtype": "f32", "bytes": 64},
        {"op": "all-gather", "shape": (8, 4), "dtype": "f32", "bytes": 128},  # the async form's results
        {"op": "all-gather", "shape": (16,), "dtype": "bf16", "bytes": 32},
        {"op": "collective-permute", "shape": (4,), "dtype": "f32", "bytes": 16},  # not its u32[] contexts
        {"op": "all-reduce", "shape": (48,), "dtype": "f32", "bytes": 192},
        {"op": "all-reduce", "shape": (8,), "dtype": "bf16", "bytes": 16}]
