"""The Llama example's decoder (``examples/llama/model.py``, reused, not copied) with a Mixture-of-Experts MLP
in every layer (``layer.moe_mlp``) and the load-balancing loss added to the next-token loss."""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from examples.llama import model as llama
from examples.llama.ops import Ops
from examples.llama.step import PARAM_SPECS as LLAMA_SPECS

from . import layer, parallel, ragged
from .config import MoEConfig

#: the layer's choices, and two with the experts split over the mesh's ``model`` axis (or ``data``:
#: :func:`expert_axis`), the tokens over ``data`` and ``model``: ``tritonplug-ep`` exchanges capacity buffers by
#: all-to-all (``parallel.py``; on one device: ``tritonplug``'s kernels behind GShard's capacity dispatch),
#: ``tritonplug-ep-ragged`` the tokens sorted by expert by a ragged all-to-all (``ragged.py``: nothing dropped)
EXPERT_PARALLEL = {"tritonplug-ep": parallel.moe_mlp_expert_parallel, "tritonplug-ep-ragged": ragged.moe_mlp_ragged}
CHOICES = (*layer.CHOICES, *EXPERT_PARALLEL)
#: ``compare``'s choices on a mesh: ``tritonplug``'s kernels are not partitioned (``tritonplug-ep`` partitions them)
MESH_CHOICES = tuple(c for c in CHOICES if c != "tritonplug")

def _experts_split_over(axis: str) -> dict[str, P]:
    """The experts' stacked weights ``(layers, experts, ...)`` split over ``axis`` by expert."""
    return {"w_gate_up": P(None, axis, None, None), "w_down": P(None, axis, None, None)}


#: On a mesh the experts' weights are split over ``model`` by expert (expert parallelism, ``parallel.py``).
PARAM_SPECS = {**{k: v for k, v in LLAMA_SPECS.items() if k not in ("w_gate", "w_up", "w_down")},
               "router": P(None, None, None), **_experts_split_over("model")}


def expert_axis(mesh: jax.sharding.Mesh | None) -> str:
    """The mesh axis the experts are split over: ``model`` where it has several devices, else ``data``: on a
    data-parallel mesh (``--mesh data=N``) each device holds ``E / N`` experts and the tokens are exchanged within
    ``data`` (attention stays data-parallel: no tensor-parallel all-reduces), as DeepSpeed-MoE and GShard place
    them."""
    return "data" if mesh is not None and mesh.shape["model"] == 1 and mesh.shape["data"] > 1 else "model"


def param_specs(mesh: jax.sharding.Mesh | None) -> dict[str, P]:
    """:data:`PARAM_SPECS` with the experts' weights split over :func:`expert_axis`."""
    return {**PARAM_SPECS, **_experts_split_over(expert_axis(mesh))}


@dataclasses.dataclass(frozen=True)
class MoEOps:
    """One model's op choice: the MoE MLP's (:data:`CHOICES`) and the Llama ops' for the rest (XLA's by default:
    the MoE choice is what is compared). ``mesh``: the training's mesh, which the expert-parallel choices split
    the experts over (``None``: one device)."""

    moe: str
    dense: Ops = dataclasses.field(default_factory=lambda: Ops.of("jax"))
    mesh: jax.sharding.Mesh | None = dataclasses.field(default=None, compare=False, repr=False)

    def __post_init__(self):
        if self.moe not in CHOICES:
            raise ValueError(f"--ops: {self.moe!r}; expected one of {CHOICES} or 'compare'")

    @property
    def choice(self) -> dict[str, str]:
        return {"moe": self.moe, **self.dense.choice}

    def label(self) -> str:
        dense = self.dense.label()
        return self.moe if dense == "jax" else f"{self.moe}+{dense}"


def init(cfg: MoEConfig, key: jax.Array) -> dict:
    """The Llama model's params with each layer's MLP replaced: a router and the experts' stacked weights."""
    dense_key, key = jax.random.split(key)
    params = llama.init(cfg.replace(ffn=1), dense_key)
    for name in ("w_gate", "w_up", "w_down"):
        del params["layers"][name]
    L, d, f, E = cfg.layers, cfg.hidden, cfg.expert_ffn, cfg.experts
    k_router, k_gate_up, k_down = jax.random.split(key, 3)
    params["layers"].update(
        router=0.02 * jax.random.normal(k_router, (L, d, E), jnp.float32),
        w_gate_up=0.02 * jax.random.normal(k_gate_up, (L, E, d, 2 * f), jnp.float32),
        w_down=0.02 / (2 * L) ** 0.5 * jax.random.normal(k_down, (L, E, f, d), jnp.float32))
    return params


def _mlp(h, p, cfg: MoEConfig, dense_ops: Ops, choice: str, mesh=None):
    if choice in EXPERT_PARALLEL:
        return EXPERT_PARALLEL[choice](h, p, cfg, mesh, expert_axis(mesh), ("data", "model"))
    return layer.moe_mlp(h, p, cfg, choice)


def loss(params: dict, tokens: jax.Array, targets: jax.Array, cfg: MoEConfig, ops: MoEOps,
         constrain=None) -> jax.Array:
    """Mean next-token cross entropy plus ``cfg.aux_loss`` times the layers' mean load-balancing loss."""
    h, aux = llama.hidden_states_and_aux(params, tokens, cfg, ops.dense, constrain,
                                         mlp=functools.partial(_mlp, choice=ops.moe, mesh=ops.mesh))
    head = params["embed"] if cfg.tied else params["lm_head"]
    ce = ops.dense.loss(h.reshape(-1, cfg.hidden), head.astype(cfg.compute_dtype), targets.reshape(-1))
    return ce + cfg.aux_loss * aux / cfg.layers
