"""One op choice's training state and its jitted, donating step (optax AdamW), on one device or a mesh."""

from __future__ import annotations

import functools
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from . import model
from .config import Config
from .ops import Ops

#: Megatron-style tensor parallelism over the mesh's ``model`` axis: attention heads and the MLP's hidden
#: units are split, their output projections split on the input side; batches split over ``data``.
PARAM_SPECS = {
    "embed": P(None, None), "lm_head": P(None, None), "final_norm": P(None),
    "wq": P(None, None, "model"), "wk": P(None, None, "model"), "wv": P(None, None, "model"),
    "wo": P(None, "model", None), "w_gate": P(None, None, "model"), "w_up": P(None, None, "model"),
    "w_down": P(None, "model", None), "attn_norm": P(None, None), "mlp_norm": P(None, None),
}


def specs_for(ops: Ops) -> dict:
    """:data:`PARAM_SPECS` for this op choice: the ``tritonplug`` loss (vocabulary-parallel under ``model=N``)
    takes the output projection split along the vocabulary, ``P("model", None)``; the ``jax`` and ``liger``
    losses keep it replicated, as before issue 39."""
    if ops.choice["loss"] == "tritonplug":
        return {**PARAM_SPECS, "lm_head": P("model", None)}
    return PARAM_SPECS


def optimizer(cfg: Config) -> optax.GradientTransformation:
    schedule = optax.warmup_cosine_decay_schedule(0.0, cfg.lr, warmup_steps=cfg.warmup, decay_steps=10_000)
    return optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(schedule, b1=0.9, b2=0.95, weight_decay=0.1))


class Trainer:
    """``loss(params, tokens, targets, cfg, ops, constrain)`` and ``param_specs`` (a leaf's name → its
    ``PartitionSpec`` on a mesh) default to this model's (:func:`specs_for` ``ops``); ``examples/moe`` passes its
    own. The step is traced under ``jax.set_mesh(mesh)``, so that an op may ask for the mesh (the
    vocabulary-parallel loss). ``donate=False`` keeps the step from donating the parameters and optimizer state
    (more memory; ``train.py --no-donate``)."""

    def __init__(self, cfg: Config, ops: Ops, params: dict, mesh: jax.sharding.Mesh | None = None,
                 loss=model.loss, param_specs=None, donate: bool = True):
        self.cfg, self.ops, self.mesh, self.donate = cfg, ops, mesh, donate
        self.loss, self.param_specs = loss, param_specs if param_specs is not None else specs_for(ops)
        self.opt = optimizer(cfg)
        params = jax.tree.map(jnp.copy, params)  # our own buffers: the step donates them
        if mesh is not None:
            params = jax.device_put(params, self._param_shardings(params))
        self.params = params
        init = jax.jit(self.opt.init)
        if mesh is not None:  # each moment placed as its parameter (else XLA may replicate it and gather the
            init = jax.jit(self.opt.init, out_shardings=self._state_shardings(params))  # update every step)
        self.opt_state = init(params)
        self.losses: list[float] = []
        self.seconds: list[float] = []
        self.compiled = None

    def _param_shardings(self, params):
        def spec(path, _):
            return NamedSharding(self.mesh, self.param_specs[path[-1].key])
        return jax.tree_util.tree_map_with_path(spec, params)

    def _state_shardings(self, params):
        """The optimizer state's shardings: a leaf under a parameter's name (AdamW's moments) as that parameter,
        the rest (the step counters) replicated."""
        def spec(path, leaf):
            key = getattr(path[-1], "key", None) if path else None
            return NamedSharding(self.mesh, self.param_specs[key] if key in self.param_specs and leaf.ndim else P())
        return jax.tree_util.tree_map_with_path(spec, jax.eval_shape(self.opt.init, params))

    def _constrain(self, x):
        return jax.lax.with_sharding_constraint(x, NamedSharding(self.mesh, P("data", None, None)))

    def _step(self, params, opt_state, tokens, targets):
        loss_fn = functools.partial(self.loss, cfg=self.cfg, ops=self.ops,
                                    constrain=self._constrain if self.mesh is not None else None)
        loss, grads = jax.value_and_grad(loss_fn)(params, tokens, targets)
        updates, opt_state = self.opt.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    def tune(self, tokens, targets):
        """``tritonplug.tune`` of the step's gradient on these batch shapes: each autotuned kernel's configurations
        timed once, and each ``inline="auto"`` kernel of the ports (RMSNorm, RoPE, SwiGLU, cross entropy) timed
        launched and inlined on a GPU; the fastest recorded in the cache directory, which later compiles of the step
        use (one device; on a mesh the kernels run per shard, at other shapes, so nothing is tuned)."""
        import tritonplug

        if self.mesh is not None:
            return None
        loss_fn = functools.partial(self.loss, cfg=self.cfg, ops=self.ops, constrain=None)
        return tritonplug.tune(jax.value_and_grad(loss_fn), self.params, tokens, targets)

    def compile(self, tokens, targets) -> None:
        """Compile the step for these batch shapes (the first ``step`` does it otherwise)."""
        self.compiled = self._compile(tokens, targets)

    def _compile(self, tokens, targets):
        kwargs = {}
        if self.mesh is not None:
            state = jax.tree.map(lambda a: a.sharding, (self.params, self.opt_state))
            batch = NamedSharding(self.mesh, P("data", None))
            kwargs = {"in_shardings": (*state, batch, batch),
                      "out_shardings": (*state, NamedSharding(self.mesh, P()))}
        step = jax.jit(self._step, donate_argnums=(0, 1) if self.donate else (), **kwargs)
        if self.mesh is None:
            return step.lower(self.params, self.opt_state, tokens, targets).compile()
        with jax.set_mesh(self.mesh):
            return step.lower(self.params, self.opt_state, tokens, targets).compile()

    def step(self, tokens: np.ndarray, targets: np.ndarray) -> float:
        if self.compiled is None:
            self.compile(tokens, targets)
        start = time.perf_counter()
        self.params, self.opt_state, loss = self.compiled(self.params, self.opt_state, tokens, targets)
        loss = float(loss)  # waits for the step
        self.seconds.append(time.perf_counter() - start)
        self.losses.append(loss)
        return loss

    def summary(self) -> dict:
        timed = self.seconds[1:] or self.seconds
        tokens = self.cfg.batch * self.cfg.seq
        mem = self.compiled.memory_analysis() if self.compiled is not None else None
        out = {
            "ops": dict(self.ops.choice),
            "losses": self.losses,
            "step_seconds_median": float(np.median(timed)) if timed else None,
            "tokens_per_s": tokens / float(np.median(timed)) if timed else None,
        }
        if mem is not None:
            out["plan_bytes"] = int(mem.argument_size_in_bytes + mem.output_size_in_bytes
                                    - mem.alias_size_in_bytes + mem.temp_size_in_bytes)
            out["temp_bytes"] = int(mem.temp_size_in_bytes)
        stats = jax.devices()[0].memory_stats() or {}
        if "peak_bytes_in_use" in stats:
            out["device_peak_bytes"] = int(stats["peak_bytes_in_use"])
        return out
