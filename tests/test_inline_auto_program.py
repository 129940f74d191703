"""``tritonplug.tune`` decides ``inline="auto"`` paths by timing the whole program (``tuning/program_paths.py``).

On the CPU the interpret backend runs every kernel as its translation, so ``"auto"`` has nothing to choose there.
These tests give the CPU a launching backend instead: ``host_interpreter``, registered at run time
(``tritonplug.register_plugin``) and picked by ``TRITONPLUG_BACKENDS``, which launches a kernel as a host call
running Triton's interpreter (as the example backend of ``tests/plugins`` does), while ``inline=True`` lowers the
interpret backend's translation. Both are real compiled CPU programs, timed by the real tuner:

* ``cheap_kernel`` (``2x+1``): in the interpreter each of its many small programs costs Python's walk through it;
  inlined, one fused XLA loop. Inlining makes the program several times faster.
* ``first_program_kernel``: only program 0 runs ``ROUNDS`` rounds of ``sin``/``exp`` on ``WORK`` values (an ``if``
  on the program id); the translation runs every program at once under ``vmap`` and so computes both sides of the
  ``if`` for all of them: ``GRID`` times the interpreter's work. Inlining makes the program several times slower.

Effects of several times, so that a loaded machine (other tests, XLA's threads) does not flip them; the reports'
medians are asserted to say so before the decision is.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import triton
import triton.language as tl
from helpers import requires_backend
from hypothesis import given
from hypothesis import strategies as st

import tritonplug
from tritonplug.hookspecs import hookimpl
from tritonplug.inspection import paths
from tritonplug.process.state import state
from tritonplug.records import BackendInfo, Binary, HostKernel, Options, Target
from tritonplug.tuner import Tuner, _path_reason
from tritonplug.tuning import program_paths
from tritonplug.tuning.path_records import trying
from tritonplug.tuning.records import decode_file, encode_file

pytestmark = [requires_backend("interpret")]
#: first_program_kernel: GRID programs of BLOCK elements; program 0 alone runs ROUNDS rounds of sin/exp on WORK
#: values; inlined, every program computes them (both sides of the if): GRID times the interpreter's work.
GRID, BLOCK, WORK, ROUNDS = 32, 256, 65536, 10
N = GRID * BLOCK
CHEAP_BLOCK = 64  # cheap_kernel: N // CHEAP_BLOCK programs, each walked in Python by the interpreter


class HostInterpreter:
    """A CPU backend that launches: each kernel a host call running Triton's interpreter."""

    @hookimpl
    def tritonplug_backend_info(self):
        return BackendInfo("host_interpreter", ("cpu",), "0", "launches kernels in Triton's interpreter",
                           ir_stages=(), cache_binaries=False, compile_in_worker=False, autotune="first")

    @hookimpl
    def tritonplug_detect_target(self, platform, device, requested):
        return Target("host_interpreter", "cpu", "host", 1, None) if platform == "cpu" else None

    @hookimpl
    def tritonplug_parse_options(self, target, call_options):
        return Options()

    @hookimpl
    def tritonplug_compile(self, job):
        return Binary(job.kernel_name, "source", {}, {})

    @hookimpl
    def tritonplug_make_kernel(self, target, binary, launch):
        from tritonplug_interpret import runner

        return HostKernel(launch.kernel_name, runner.prepare(launch).run, launch)


@pytest.fixture
def launching_cpu(private_cache, monkeypatch):
    """The CPU with ``host_interpreter`` as its backend, for this test only."""
    tritonplug.register_plugin(HostInterpreter())
    monkeypatch.setenv("TRITONPLUG_BACKENDS", "cpu:host_interpreter")
    monkeypatch.delenv("TRITONPLUG_TUNING_FILE", raising=False)
    yield private_cache
    state.reset(plugins=True)  # the next use loads the installed plugins only


@triton.jit
def cheap_kernel(x_ptr, n, out_ptr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2.0 + 1.0, mask=mask)


@triton.jit
def first_program_kernel(x_ptr, n, out_ptr, BLOCK: tl.constexpr, WORK: tl.constexpr, ROUNDS: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    y = tl.load(x_ptr + offs, mask=mask)
    if pid == 0:
        w = tl.arange(0, WORK).to(tl.float32) / WORK + tl.sum(y)
        for _ in tl.static_range(ROUNDS):
            w = tl.sin(w) * 1.01 + tl.exp(-w * w)
        y = y + tl.sum(w) / WORK
    tl.store(out_ptr + offs, y, mask=mask)


@triton.jit
def gather_kernel(x_ptr, idx_ptr, n, out_ptr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + tl.load(idx_ptr + offs, mask=mask, other=0), mask=mask), mask=mask)


def cheap(x):
    return tritonplug.triton_call(x, N, kernel=cheap_kernel, out_type=jax.ShapeDtypeStruct(x.shape, x.dtype),
                                  grid=(N // CHEAP_BLOCK,), BLOCK=CHEAP_BLOCK, inline="auto")


def first_program(x):
    return tritonplug.triton_call(x, N, kernel=first_program_kernel, out_type=jax.ShapeDtypeStruct(x.shape, x.dtype),
                                  grid=(GRID,), BLOCK=BLOCK, WORK=WORK, ROUNDS=ROUNDS, inline="auto")


def program(x):
    return first_program(cheap(x))


def expected(x: np.ndarray) -> np.ndarray:
    y = x.astype(np.float64) * 2 + 1
    w = np.arange(WORK, dtype=np.float64) / WORK + y[:BLOCK].sum()
    for _ in range(ROUNDS):
        w = np.sin(w) * 1.01 + np.exp(-w * w)
    y[:BLOCK] += w.sum() / WORK
    return y


def quick_tuner(**kwargs) -> Tuner:
    return Tuner(runs=5, sample_seconds=0.05, warmup=1, **kwargs)


def lowered_paths(fn, *args) -> dict[str, object]:
    """The path of each kernel in a new lowering of ``fn``."""
    before = len(paths())
    jax.jit(lambda *a: fn(*a)).lower(*args)
    return {p.kernel: p for p in list(paths())[before:]}


def test_tune_keeps_the_inlining_that_speeds_the_program_and_drops_the_one_that_slows_it(launching_cpu):
    x = jnp.linspace(-1.0, 1.0, N, dtype=jnp.float32)
    assert {k: p.path for k, p in lowered_paths(program, x).items()} == {
        "cheap_kernel": "launched", "first_program_kernel": "launched"}  # no record yet
    report = quick_tuner().run(program, x)
    by_kernel = {c.kernel: c for c in report.calls}
    assert [c.kernel for c in report.calls] == ["cheap_kernel", "first_program_kernel"]  # the program's order
    cheap_call, slow_call = by_kernel["cheap_kernel"], by_kernel["first_program_kernel"]
    times = {c.kernel: {t.description: t.median_us for t in c.timings} for c in report.calls}
    assert cheap_call.winner == "inline" and times["cheap_kernel"]["inline"] < times["cheap_kernel"]["launch"] * 0.98
    assert slow_call.winner == "launch" and times["first_program_kernel"]["inline"] > \
        times["first_program_kernel"]["launch"], report
    assert "inlining it made test_inline_auto_program.program slower" in slow_call.reason, slow_call.reason
    # greedy: the second trial starts from the first one's choice (cheap inlined, the program as it then ran)
    assert times["first_program_kernel"]["launch"] == times["cheap_kernel"]["inline"]
    chosen = lowered_paths(program, x)
    assert chosen["cheap_kernel"].path == "inlined" and chosen["first_program_kernel"].path == "launched"
    for choice in chosen.values():
        assert choice.program is not None and choice.program.endswith("test_inline_auto_program.program")
        assert "times of the whole program" in choice.reason and set(choice.times_us) == {"launch", "inline"}
    np.testing.assert_allclose(np.asarray(jax.jit(program)(x)), expected(np.asarray(x)), rtol=2e-4, atol=2e-5)


def test_the_records_are_program_level_and_round_trip_through_the_cache_and_a_file(launching_cpu):
    x = jnp.linspace(-1.0, 1.0, N, dtype=jnp.float32)
    before = len(paths())
    jax.block_until_ready(program(x))  # eagerly: each call memoised with its program, launched (no record yet)
    assert [p.path for p in list(paths())[before:]] == ["launched", "launched"]
    report = quick_tuner().run(program, x)
    before = len(paths())
    np.testing.assert_allclose(np.asarray(program(x)), expected(np.asarray(x)), rtol=2e-4, atol=2e-5)
    assert [p.path for p in list(paths())[before:]] == ["inlined", "launched"]  # the memoised calls follow too
    stored = sorted(state.tuning.stored(), key=lambda r: r.kernel)
    assert [(r.kernel, r.config["path"]) for r in stored] == [("cheap_kernel", "inline"),
                                                              ("first_program_kernel", "launch")]
    for record, call in zip(stored, sorted(report.calls, key=lambda c: c.kernel), strict=True):
        assert record.info["timed"] == "program" and record.info["program"].endswith("program")
        assert record.info["times_us"] == {t.description: t.median_us for t in call.timings}
    assert decode_file(encode_file(stored)) == stored
    state.reset()  # as a new process: the records come from the cache directory
    chosen = lowered_paths(program, x)
    assert chosen["cheap_kernel"].path == "inlined" and chosen["first_program_kernel"].path == "launched"
    assert chosen["cheap_kernel"].times_us == stored[0].info["times_us"]
    # the same call in another program takes the path the last tuned program chose
    assert lowered_paths(lambda v: cheap(v) * 3.0, x)["cheap_kernel"].path == "inlined"


def test_calls_without_a_fusible_translation_are_never_tried_and_the_trials_are_capped(launching_cpu):
    x = jnp.linspace(-1.0, 1.0, N, dtype=jnp.float32)
    idx = jnp.arange(N, dtype=jnp.int32)[::-1]

    def with_gather(x, idx):
        spec = jax.ShapeDtypeStruct(x.shape, x.dtype)
        gathered = tritonplug.triton_call(x, idx, N, kernel=gather_kernel, out_type=spec, grid=(GRID,), BLOCK=BLOCK,
                                          inline="auto")
        return program(gathered)

    report = quick_tuner(path_trials=1).run(with_gather, x, idx)
    by_kernel = {c.kernel: c for c in report.calls}
    gather_call = by_kernel["gather_kernel"]
    assert gather_call.winner == "launch" and gather_call.timings == () and "1 gather" in gather_call.reason
    tried = by_kernel["cheap_kernel"]  # the one trial went to the first fusible call
    assert [t.description for t in tried.timings] == ["launch", "inline"] and tried.winner in ("launch", "inline")
    untried = by_kernel["first_program_kernel"]
    assert untried.timings == () and not untried.persisted and untried.reason.startswith("not tried:")
    assert "more than 1 inline='auto' calls" in untried.reason
    assert {r.kernel for r in state.tuning.stored()} == {"gather_kernel", "cheap_kernel"}  # none for the untried
    assert lowered_paths(with_gather, x, idx)["gather_kernel"].path == "launched"
    assert "no path record" in lowered_paths(program, x)["first_program_kernel"].reason


def test_a_trial_forces_paths_only_inside_its_context(launching_cpu):
    x = jnp.linspace(-1.0, 1.0, N, dtype=jnp.float32)
    report = quick_tuner(path_trials=0).run(cheap, x)  # collects the call's identity, tries nothing
    (call,) = report.calls
    with trying({call.identity: "inline"}):
        inside = lowered_paths(cheap, x)["cheap_kernel"]
    assert inside.path == "inlined" and "tritonplug.tune trial" in inside.reason
    assert lowered_paths(cheap, x)["cheap_kernel"].path == "launched"
    with pytest.raises(ValueError, match=r"trying\(paths\): every path must be one of"):
        with trying({call.identity: "fast"}):
            pass


def test_a_program_that_cannot_be_jitted_is_refused_naming_it_and_nothing_is_recorded(launching_cpu):
    x = jnp.linspace(-1.0, 1.0, N, dtype=jnp.float32)

    def branchy(x):
        return cheap(x) if float(x[0]) < 0 else x  # runs eagerly; a traced x has no float()

    with pytest.raises(RuntimeError, match=r"deciding the inline='auto' paths times \S*branchy as one jitted "
                                           r"program .*failed with all calls launched: .*Concretization"):
        quick_tuner().run(branchy, x)
    assert state.tuning.stored() == []


def test_the_tuner_refuses_a_bad_trial_bound():
    with pytest.raises(ValueError, match=r"path_trials must be an int >= 0, got -1"):
        Tuner(path_trials=-1)


@given(costs=st.lists(st.floats(-50.0, 50.0), min_size=0, max_size=8), noise=st.floats(0.0, 5.0),
       cap=st.integers(0, 8), together=st.floats(-60.0, 20.0))
def test_greedy_over_a_cost_function_keeps_only_inlinings_beyond_noise(costs, noise, cap, together):
    """The search alone, over a cost model (each inlined candidate adds its cost to 100 units, and ``together``
    more once the last two are both inlined: neighbours that pay only jointly) timed with ``noise`` either side of
    the cost: the assignment is never slower than all launched, an inlining is kept exactly when its samples all
    beat the program before it and its median by more than the least gain, at most ``cap`` candidates are tried,
    in order, those beyond stay launched, and the candidates not kept (two or more) get one joint trial, kept by
    the same rule."""
    names = [f"c{i}" for i in range(len(costs))]
    calls = []

    def cost(assignment):
        pair = len(names) >= 2 and all(assignment[n] == "inline" for n in names[-2:])
        return 100.0 + sum(c for n, c in zip(names, costs, strict=True) if assignment[n] == "inline") + (
            together if pair else 0.0)

    def time_us(assignment):
        calls.append(dict(assignment))
        return [cost(assignment) - noise, cost(assignment), cost(assignment) + noise]

    def beyond(trial):
        return (trial.inline_us + noise < trial.launch_us - noise
                and trial.inline_us < trial.launch_us * (1 - program_paths.MIN_GAIN))

    search = program_paths.greedy(names, time_us, max_trials=cap)
    first = search.trials[:min(cap, len(names))]
    assert [t.identity for t in first] == names[:cap]
    last_kept = max((i for i, t in enumerate(first) if t.kept), default=0)
    again = [t.identity for t in first[:last_kept] if not t.kept]  # tried before the program changed
    assert [t.identity for t in search.trials[len(first):]] == again
    latest = {t.identity: t for t in search.trials}
    not_kept = tuple(n for n in names[:cap] if not latest[n].kept)
    assert search.joined == (not_kept if len(not_kept) >= 2 else ())
    assert len(calls) == 1 + len(first) + len(again) + (1 if search.joined else 0)
    assert cost(search.chosen) <= 100.0
    for trial in search.trials:
        assert trial.kept == beyond(trial), trial
    if search.joint is not None:
        assert search.joint.identity == program_paths.JOINT and search.joint.kept == beyond(search.joint)
        greedy_choice = {**calls[-1], **dict.fromkeys(search.joined, "launch")}  # the joint trial ran last
        assert (search.joint.launch_us, search.joint.inline_us) == (cost(greedy_choice), cost(calls[-1]))
    joined = set(search.joined) if search.joint is not None and search.joint.kept else set()
    for trial in latest.values():
        assert search.chosen[trial.identity] == ("inline" if trial.kept or trial.identity in joined else "launch")
    assert all(search.chosen[n] == "launch" for n in names[cap:])


def test_two_inlinings_that_pay_only_together_are_kept_together():
    """Each of two neighbours slows the program inlined alone (+5) but together they speed it (-20, one fusion
    where two custom calls stood): the greedy trials keep neither, the joint trial both."""
    def time_us(assignment):
        inline = {n for n, p in assignment.items() if p == "inline"}
        cost = 100.0 + (-20.0 if inline == {"a", "b"} else 5.0 * len(inline))
        return [cost - 0.5, cost, cost + 0.5]

    search = program_paths.greedy(["a", "b"], time_us)
    assert [t.kept for t in search.trials] == [False, False] and search.joined == ("a", "b")
    assert search.joint == program_paths.Trial(program_paths.JOINT, 100.0, 80.0, True)
    assert search.chosen == {"a": "inline", "b": "inline"}
    alone = search.trials[0]
    assert _path_reason(alone, search.joint, 2, "step") == (
        "inlining it made step slower alone, but inlined with the 1 other calls not kept, step ran faster "
        "(100.0 -> 80.0 us): inlined together")
    slower = program_paths.Trial(program_paths.JOINT, 100.0, 130.0, False)
    assert _path_reason(alone, slower, 3, "step") == (
        "inlining it made step slower; inlined with the 2 other calls not kept, no faster either "
        "(100.0 -> 130.0 us)")
    assert _path_reason(alone, None, 1, "step") == "inlining it made step slower"
    kept = program_paths.Trial("a", 100.0, 80.0, True)
    assert _path_reason(kept, None, 0, "step") == ""


def test_a_candidate_that_pays_only_once_a_later_one_is_inlined_is_tried_again_and_kept():
    """A forward + backward (run 15 of bench/fusion.py, RMSNorm): the forward inlined alone slows the program
    (+2), the backward inlined speeds it (-20), both inlined speed it most (-30). The forward's first trial ran
    before the backward was kept; tried again against that program it pays, so both are inlined (the joint trial,
    for two or more not kept, never ran for one)."""
    def time_us(assignment):
        inline = {n for n, p in assignment.items() if p == "inline"}
        cost = {frozenset(): 100.0, frozenset("f"): 102.0, frozenset("b"): 80.0, frozenset("fb"): 70.0}[
            frozenset(inline)]
        return [cost - 0.5, cost, cost + 0.5]

    search = program_paths.greedy(["f", "b"], time_us)
    assert [(t.identity, t.kept) for t in search.trials] == [("f", False), ("b", True), ("f", True)]
    assert search.trials[2] == program_paths.Trial("f", 80.0, 70.0, True)
    assert search.chosen == {"f": "inline", "b": "inline"} and search.joint is None


def test_a_candidate_whose_inlining_failed_is_left_out_of_the_joint_trial():
    """The joint trial inlines the candidates not kept whose own trial ran: one that failed to compile would fail
    the joint program too."""
    def time_us(assignment):
        inline = {n for n, p in assignment.items() if p == "inline"}
        if "broken" in inline:
            raise RuntimeError("does not compile")
        return [100.0 + (-20.0 if inline == {"a", "b"} else 5.0 * len(inline))] * 3

    search = program_paths.greedy(["a", "broken", "b"], time_us)
    assert search.trials[1].error.startswith("RuntimeError: does not compile")
    assert search.joined == ("a", "b") and search.joint is not None and search.joint.kept
    assert search.chosen == {"a": "inline", "broken": "launch", "b": "inline"}


def test_an_inlining_within_the_noise_is_not_kept():
    """Samples that overlap are noise however the medians fall; separated ones count only past the least gain."""
    assert not program_paths.beats([90.0, 95.0, 101.0], [100.0, 102.0, 104.0])  # median 5 % faster, overlapping
    assert program_paths.beats([97.0, 98.0, 99.0], [100.0, 100.5, 101.0])  # 2.5 %, apart: a 2 % margin kept none
    assert not program_paths.beats([99.95], [100.0])  # apart, but below the least gain


def test_a_program_is_named_by_its_function_through_wrappers():
    import functools

    assert program_paths.name_of(program) == "test_inline_auto_program.program"
    assert program_paths.name_of(functools.partial(program)) == "partial(test_inline_auto_program.program)"
    assert program_paths.name_of(jax.jit(program)) == "test_inline_auto_program.program"
