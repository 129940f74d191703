"""The lowering pipeline for one platform: backend → target → configurations → kernels.

Data path: host picks the backend for the platform → detect target → the environment's fingerprint (once) →
the call's resolved configurations (``compile.resolver``, derived at the call) → per configuration: parse options,
check the grid against the backend's limits, specialise, cache lookup, compile on a miss → the binaries that fit the
target (``fitting``: under ``autotune="first"`` the later configurations are compiled one at a time until one fits)
→ kernel objects → emitter.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tritonplug import settings
from tritonplug.adapters import jax_compat, jaxlib_compat, triton_compat
from tritonplug.adapters.triton_compat import KernelFacts
from tritonplug.calls import sharding_rules as rules
from tritonplug.calls import source_uses
from tritonplug.calls.call import BoundArgs, CallSpec, DescriptorArg
from tritonplug.calls.options import check_grid_limits
from tritonplug.compile import frontend, kernel_abi, resolver
from tritonplug.compile.backends import Backend
from tritonplug.compile.compiler import CompileRequest
from tritonplug.lowering import emitters, fitting, fusion, inline_choice
from tritonplug.process.state import state
from tritonplug.records import BufferSpec, CompileJob, JaxKernel, Launch, Options, Target
from tritonplug.tuning import select as tuning_select


@dataclass(frozen=True)
class LoweringPlan:
    """What lowering one call for one target needs: a launch and a compile request per configuration."""

    backend: Backend
    target: Target
    launches: tuple[Launch, ...]
    requests: tuple[CompileRequest, ...]
    tuned: bool = False  # a tuning record chose the one configuration
    #: Under ``autotune="first"``: the configurations after the planned one, planned and compiled in order, one at
    #: a time, only while none compiled so far fits the target (``lowering.fitting``).
    rest: tuple[resolver.Configuration, ...] = ()


def lower_call(ctx: Any, args: Sequence[Any], call: CallSpec, platform: str) -> Sequence[Any]:
    check_not_partitioned(ctx, call)
    device = _device_of(ctx, platform)
    operands = tuple(BufferSpec(tuple(a.shape), a.dtype.name) for a in ctx.avals_in)
    environment = fingerprint()
    decision = inline_choice.decide(call, platform, device, operands)
    kernels, choice = kernels_on_path(decision, call, platform, device, operands, environment)
    state.paths.append(choice)
    return emitters.emit(ctx, args, kernels, call, platform, environment.tritonplug)


def kernels_on_path(decision: inline_choice.Decision, call: CallSpec, platform: str, device: Any | None,
                    operands: tuple[BufferSpec, ...], environment: Environment | None = None
                    ) -> tuple[list[Any], inline_choice.PathChoice]:
    """The kernel objects of the decided path, and the choice as taken: an ``"auto"`` inlining whose translation
    is missing or holds a gather, scatter or while loop (``fusion``) is launched instead. A translation made for
    ``inline=True`` or ``"auto"`` has its counts in the choice."""
    check_backend_runs(decision.backend, call, platform)
    try:
        kernels, skipped = fitting_kernel_objects(decision.backend, decision.target, call, operands, environment)
    except NotImplementedError as exc:
        if not decision.check:
            raise
        return kernels_on_path(inline_choice.launch_instead(decision, call, platform, device, f"untranslatable: {exc}"),
                               call, platform, device, operands, environment)
    inlined = len(kernels) == 1 and isinstance(kernels[0], JaxKernel)
    counts = fusion.translation_ops(kernels[0]) if inlined and (decision.check or call.options.inline is True) \
        else None
    if decision.check and counts and any(counts.values()):
        why = f"its translation holds {fusion.describe(counts)}"
        kernels, choice = kernels_on_path(inline_choice.launch_instead(decision, call, platform, device, why),
                                          call, platform, device, operands, environment)
        return kernels, dataclasses.replace(choice, unfusible=counts)
    path = inline_choice.INLINED if inlined else inline_choice.LAUNCHED
    return kernels, dataclasses.replace(decision.choice, path=path, unfusible=counts, skipped=skipped)


@dataclass(frozen=True)
class Environment:
    """The variables that change what a lowering makes, read once per lowering: ``TRITON_*`` (options, generated
    code: part of every cache key) and the ``TRITONPLUG_*`` a backend may read (part of a host kernel's identity)."""

    triton: tuple[tuple[str, str], ...]
    tritonplug: tuple[tuple[str, str], ...]


def fingerprint() -> Environment:
    """The environment's fingerprint now (counted in ``resolver.DERIVATIONS["environment"]``)."""
    resolver.DERIVATIONS["environment"] += 1
    return Environment(triton_compat.environment_key(), tuple(settings.kernel_environment()))


def kernel_objects(backend: Backend, target: Target, call: CallSpec, operands: tuple[BufferSpec, ...],
                   environment: Environment | None = None) -> list[Any]:
    """The backend's kernel objects for every configuration of ``call`` on ``target`` that fits it, compiled (or
    read from the cache) on the way: everything a lowering does but emitting the custom call."""
    return fitting_kernel_objects(backend, target, call, operands, environment)[0]


def fitting_kernel_objects(backend: Backend, target: Target, call: CallSpec, operands: tuple[BufferSpec, ...],
                           environment: Environment | None = None) -> tuple[list[Any], tuple[str, ...]]:
    """:func:`kernel_objects`, and the configurations left out because their binary does not fit ``target``
    (``"[description] why"``). Under ``autotune="first"`` that is the first configuration that fits, the later
    ones compiled one at a time only while none has; none fitting is an ``OutOfResourcesError``."""
    environment = environment or fingerprint()
    plan = state.plans.take(plan_key(backend, target, call, operands, environment)) \
        or plan_call(backend, target, call, operands, environment)
    if plan.tuned:
        state.tuning.note_hit()
    kept: list[tuple[Any, Launch]] = []
    skipped: list[str] = []

    def sort(binaries: Sequence[Any], launches: Sequence[Launch]) -> None:
        for binary, launch in zip(binaries, launches, strict=True):
            why = fitting.misfit(target, binary)
            if why is None:
                kept.append((binary, launch))
            else:
                skipped.append(f"[{launch.description}] {why}")

    sort(state.compiler.compile(backend, target, plan.requests), plan.launches)
    for config in plan.rest:
        if kept:
            break
        launch, request = _plan_config(backend, target, call, operands, environment, config)
        sort(state.compiler.compile(backend, target, [request]), [launch])
    if not kept:
        raise fitting.none_fits(call.kernel.name, target, skipped)
    if len(kept) > 1:
        state.compiler.note_runtime_autotuned()
    return [backend.make_kernel(target, b, launch) for b, launch in kept], tuple(skipped)


def plan_key(backend: Backend, target: Target, call: CallSpec, operands: tuple[BufferSpec, ...],
             environment: Environment) -> tuple:
    """What a plan depends on: an early compile's plan serves the one lowering of the same key
    (``state.plans``). The environment is part of it: ``TRITON_*`` and ``TRITONPLUG_*`` variables change
    options and cache keys, and a plan made before one changed must not serve a lowering after."""
    return (backend.name, target, call, operands, environment)


def plan_call(backend: Backend, target: Target, call: CallSpec, operands: tuple[BufferSpec, ...],
              environment: Environment | None = None) -> LoweringPlan:
    """The configurations to compile for ``target`` (a tuning record's winner when there is one), each with
    its launch and its compile request; nothing is compiled yet. The configurations are the call's resolution
    (``compile.resolver``), made at the call and read here."""
    environment = environment or fingerprint()
    configs = list(resolver.resolve(call, operands).configs)
    configs, tuned = tuning_select.select(state.tuning, backend.name, target, call, operands, configs)
    rest: tuple[resolver.Configuration, ...] = ()
    if "first" in (backend.info.autotune, call.options.autotune):  # a tuning record has chosen one already
        configs, rest = configs[:1], tuple(configs[1:])
    planned = [_plan_config(backend, target, call, operands, environment, config) for config in configs]
    return LoweringPlan(backend, target, tuple(p[0] for p in planned), tuple(p[1] for p in planned), tuned, rest)


def _plan_config(backend: Backend, target: Target, call: CallSpec, operands: tuple[BufferSpec, ...],
                 environment: Environment, config: resolver.Configuration) -> tuple[Launch, CompileRequest]:
    """One configuration's launch and compile request."""
    kernel = call.kernel
    options = backend.parse_options(target, dict(config.call_options))
    check_grid_limits(config.grid, backend.info)
    spec = frontend.specialize(call.bound, dict(config.metaparams), operands, call.out_specs, config.zeroed,
                               backend.info)
    description = f"kernel {kernel.name!r} [{config.description}]"
    params, names = spec.params, call.bound.names
    order = None
    if backend.info.buffer_order == "operands_first":
        order = kernel_abi.argument_order(params, names, len(operands))
        if order is not None:
            params, names = kernel_abi.ordered_params(params, names, order)
    launch = Launch(kernel.name, config.grid, params, names, operands, call.out_specs, call.bound.aliases, kernel.fn,
                    config.description)
    key = frontend.cache_key(backend.info, target, options, kernel.fn, spec, environment.triton, order)
    make_job = _job_maker(backend, kernel, target, options, spec, description, call.bound, order)
    return launch, CompileRequest(key, make_job, description)


def check_backend_runs(backend: Backend, call: CallSpec, platform: str) -> None:
    """Refuse, before anything is compiled, a call the backend's declared capabilities cannot run.

    The kernel's front end must emit an IR stage the backend compiles (a backend that compiles no IR
    runs ``@triton.jit`` kernels from their source, so not Gluon's); host-side tensor descriptors need
    a backend that passes them and, through jaxlib's runtime, a jaxlib that can.
    """
    kernel, info = call.kernel, backend.info
    if kernel.ir_stage not in info.ir_stages and (info.ir_stages or kernel.language != "triton"):
        accepted = f"compiles {list(info.ir_stages)}" if info.ir_stages else "compiles no IR (it runs Triton source)"
        what = "Gluon kernels need a GPU backend" if kernel.language == "gluon" else "the backend cannot run it"
        raise NotImplementedError(
            f"{what}: kernel {kernel.name!r} is a {kernel.language} kernel whose front end emits "
            f"{kernel.ir_stage.upper()}, but backend {backend.name!r} serving platform {platform!r} {accepted}")
    if _has_descriptor(call.bound.nodes):
        named = ", ".join(repr(n) for n, node in zip(call.bound.names, call.bound.nodes, strict=True)
                          if _has_descriptor((node,)))  # the argument, should the descriptor be a mistake
        if info.tensor_descriptors == "none":
            raise NotImplementedError(f"kernel {kernel.name!r} takes a TensorDescriptor (host-side TMA descriptor) "
                                      f"as argument {named}, but backend {backend.name!r} serving platform "
                                      f"{platform!r} cannot pass one")
        problem = jaxlib_compat.tensor_descriptor_problem() if info.tensor_descriptors == "jaxlib" else None
        if problem:
            raise NotImplementedError(f"kernel {kernel.name!r} on platform {platform!r}, argument {named} (a "
                                      f"TensorDescriptor): {problem}")


def _has_descriptor(nodes: Sequence[Any]) -> bool:
    return any(_has_descriptor(n) if isinstance(n, tuple) else isinstance(n, DescriptorArg) for n in nodes)


#: Triton's front end is not known to be thread-safe, and early compiles run it off the main thread.
_FRONTEND_LOCK = threading.Lock()


def _job_maker(backend: Backend, kernel: KernelFacts, target: Target, options: Options,
               spec: frontend.Specialization, description: str, bound: BoundArgs,
               order: tuple[int, ...] | None) -> Callable[[], CompileJob]:
    """The job for one configuration, made only on a cache miss: the front end runs then, if the backend
    compiles IR at all, and the entry point's arguments are put in ``order`` (``kernel_abi``) if given."""
    def make() -> CompileJob:
        if not backend.info.ir_stages:
            return CompileJob(backend.name, kernel.name, target, options, "", "", description)
        with _FRONTEND_LOCK:
            ir = frontend.make_ir(kernel, target, options, spec, bound)
        if order is not None:
            ir = kernel_abi.permute_entry_arguments(ir, order, kernel.name)
        return CompileJob(backend.name, kernel.name, target, options, ir, kernel.ir_stage, description)
    return make


def _device_of(ctx: Any, platform: str) -> Any | None:
    """The device this computation runs on, when this process has devices of ``platform``.

    The primitive is registered in ``prim_requires_devices_during_lowering``, so JAX hands
    the lowering the real device assignment (not just device 0): the devices of a jit's
    arguments, or the mesh of a ``shard_map``/``pmap``. One program has one kernel binary,
    so every device it runs on must be the same kind of device.
    """
    devices = [d for d in jax_compat.assigned_devices(ctx) if getattr(d, "platform", None) == platform]
    kinds = {(getattr(d, "device_kind", None), getattr(d, "compute_capability", None)) for d in devices}
    if len(kinds) > 1:
        raise ValueError(f"triton_call: this program runs on devices of different kinds {sorted(map(str, kinds))}, "
                         f"but one program carries one compiled kernel; run it on devices of one kind")
    if devices:
        return devices[0]
    try:
        import jax

        local = jax.devices(platform)
    except RuntimeError:
        return None
    return local[0] if local else None


def check_not_partitioned(ctx: Any, call: CallSpec) -> None:
    """Refuse a call XLA would have to partition: a kernel sees whole buffers, never shards.

    Inside ``shard_map`` (and ``pmap``, built on it) and inside a ``tritonplug.partitioned`` function
    the axes are manual: each device runs the kernel on its own block. A jit over several devices
    outside them (a sharded ``jax.Array``, eager or jitted) would leave XLA to split an opaque custom
    call, so it is an error that names the decorator and a rule that fits the call's shapes.
    """
    partitions = jax_compat.partition_count(ctx)
    if partitions > 1:
        auto = jax_compat.automatic_mesh_axes(ctx)
        if auto is not None:
            where = f"over the mesh axes {sorted(auto)} that the enclosing shard_map leaves automatic"
        else:
            where = "by jit (its operands are sharded or placed on several devices)"
        raise ValueError(
            f"triton_call: kernel {call.kernel.name!r}: the computation is partitioned over {partitions} devices "
            f"{where}, but a Triton kernel works on whole buffers and XLA cannot split it. Decorate the function "
            f"that makes this call with @tritonplug.partitioned(RULE), which runs it on each device's shard "
            f"with the shard's shapes; {_suggested_rule(ctx, call)}. "
            f"Or call it inside jax.shard_map, or put the operands on a single device.")


def _suggested_rule(ctx: Any, call: CallSpec) -> str:
    """The groups that fit the call's arrays, and the way to find out which factors may be split: a rule that lets
    XLA split a factor the kernel reduces over is silently wrong, so none is offered bare. Where the kernel reduces,
    the factors each program covers whole (no grid axis has their size) are named to keep whole."""
    shapes = [tuple(a.shape) for a in ctx.avals_in], [tuple(a.shape) for a in ctx.avals_out]
    rule = rules.suggest(*shapes)
    reductions = source_uses.reductions(call.kernel)
    grid = call.options.grid
    whole = rules.whole_per_program(rule, *shapes, grid) if reductions and isinstance(grid, tuple) else []
    check = (f"tritonplug.check_rule(your_function, *example_args, rule={rule!r}) runs it with each factor split "
             f"over the devices and proposes a rule that holds (docs/partitioned.md, 'Checking a rule')")
    if not whole:
        return (f"this call's arrays fit the groups {rule!r}, but which factors may be split depends on the kernel "
                f"(one it reduces or normalises over must stay whole: need_replication); {check}")
    used = ", ".join(f"tl.{r}" for r in reductions)
    return (f"this call's arrays fit the groups {rule!r}; the kernel reduces ({used}) and each program "
            f"covers {', '.join(map(repr, whole))} whole, so keep at least those whole: "
            f"@tritonplug.partitioned({rule!r}, need_replication={tuple(whole)!r}); {check}")
