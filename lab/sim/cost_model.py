"""A roofline cost model of one stage's step on one device: compute- or memory-bound, plus a fixed overhead.

Model and device figures are frozen dataclasses; a step is described by its chunks, each (new tokens,
context before them, sampled rows). Units: FLOPs, bytes, seconds.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ModelShape:
    """A decoder's shape (a dense or mixture-of-experts transformer, untied LM head).

    `intermediate` is each expert's width when `num_experts` > 0 (MoE: `num_active_experts` per
    token), else each layer's MLP width; with experts, `num_dense_layers` of the layers have one MLP of
    `dense_intermediate` instead. MLPs are gated (gate, up, down) unless `gated_mlp` is False (up, down).
    `extra_flops_per_token` and `extra_params` stand for what is not a transformer layer (a vocoder's
    convolutions, a multi-token codebook predictor, a shared expert): computed per token, read per step.
    """

    name: str
    num_layers: int
    hidden: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    num_experts: int = 0
    num_active_experts: int = 0
    bytes_per_param: int = 2
    bytes_per_kv: int = 2
    extra_flops_per_token: float = 0.0
    extra_params: int = 0
    gated_mlp: bool = True
    num_dense_layers: int = 0
    dense_intermediate: int = 0

    def __post_init__(self) -> None:
        for name in ("num_layers", "hidden", "num_heads", "num_kv_heads", "head_dim", "intermediate", "vocab"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{self.name}: {name} must be > 0, got {getattr(self, name)!r}")
        if self.num_experts and not 0 < self.num_active_experts <= self.num_experts:
            raise ValueError(f"{self.name}: num_active_experts must be in 1..num_experts ({self.num_experts}), "
                             f"got {self.num_active_experts!r}")
        if self.num_dense_layers and not (self.num_experts and self.num_dense_layers <= self.num_layers):
            raise ValueError(f"{self.name}: num_dense_layers must be in 0..num_layers ({self.num_layers}), with "
                             f"experts, got {self.num_dense_layers!r}")
        if self.num_dense_layers and self.dense_intermediate <= 0:
            raise ValueError(f"{self.name}: dense_intermediate must be > 0 with dense layers, "
                             f"got {self.dense_intermediate!r}")

    @property
    def attention_params(self) -> int:
        """Per layer: Q and O projections, K and V projections."""
        return 2 * self.hidden * self.num_heads * self.head_dim + 2 * self.hidden * self.num_kv_heads * self.head_dim

    @property
    def expert_params(self) -> int:
        """One MLP of `intermediate` (an expert, or a dense layer's MLP without experts)."""
        return self._mlp_params(self.intermediate)

    @property
    def router_params(self) -> int:
        return self.hidden * self.num_experts

    def layer_params(self, experts: float) -> float:
        """All layers' weights with `experts` experts' MLPs in each layer that has experts (1: the dense MLP
        where there are none)."""
        sparse = (self.num_layers - self.num_dense_layers) * (self.expert_params * experts + self.router_params)
        dense = self.num_dense_layers * self._mlp_params(self.dense_intermediate)
        return self.num_layers * self.attention_params + sparse + dense

    @property
    def total_params(self) -> int:
        """Every weight: layers (all experts), embedding, LM head, extras."""
        return self.layer_params(max(1, self.num_experts)) + 2 * self.vocab * self.hidden + self.extra_params

    @property
    def active_layer_params(self) -> int:
        """Per token, all layers: the weights a token multiplies by (its experts only), LM head excluded."""
        return self.layer_params(max(1, self.num_active_experts))

    @property
    def kv_bytes_per_token(self) -> int:
        """K and V of one position, every layer."""
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * self.bytes_per_kv

    def experts_touched(self, num_tokens: int) -> float:
        """Expected distinct experts a layer reads for `num_tokens` tokens routed uniformly at random."""
        if not self.num_experts:
            return 1.0
        return self.num_experts * (1 - (1 - self.num_active_experts / self.num_experts) ** num_tokens)

    def _mlp_params(self, width: int) -> int:
        return (3 if self.gated_mlp else 2) * self.hidden * width


@dataclass(frozen=True)
class DeviceSpec:
    """One accelerator: dense bf16 peak, HBM bandwidth and size, and its link to host memory.

    `compute_efficiency` and `bandwidth_efficiency` (0..1] scale the peaks to what kernels reach;
    `step_overhead_s` is paid by every step (launches, scheduling), `row_overhead_s` by every request
    in a step (its host-side work: inputs, sampling, outputs; a talker's sequential codebook passes),
    `token_overhead_s` by every new position (per-position work outside the roofline: a CPU's
    interpreter-bound small kernels). With `stages_take_turns` the stages on the device compute one at a
    time; without, at once (step times fitted to that sharing, as on a CPU whose stages run on threads).
    """

    name: str
    peak_tflops: float
    hbm_tbps: float
    memory_gb: float
    host_link_gbytes_per_s: float = 55.0
    compute_efficiency: float = 1.0
    bandwidth_efficiency: float = 1.0
    step_overhead_s: float = 0.0
    row_overhead_s: float = 0.0
    token_overhead_s: float = 0.0
    stages_take_turns: bool = True

    def __post_init__(self) -> None:
        for name in ("peak_tflops", "hbm_tbps", "memory_gb", "host_link_gbytes_per_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{self.name}: {name} must be > 0, got {getattr(self, name)!r}")
        for name in ("compute_efficiency", "bandwidth_efficiency"):
            if not 0 < getattr(self, name) <= 1:
                raise ValueError(f"{self.name}: {name} must be in (0, 1], got {getattr(self, name)!r}")
        for name in ("step_overhead_s", "row_overhead_s", "token_overhead_s"):
            if getattr(self, name) < 0:
                raise ValueError(f"{self.name}: {name} must be >= 0, got {getattr(self, name)!r}")

    @property
    def flops_per_s(self) -> float:
        return self.peak_tflops * 1e12 * self.compute_efficiency

    @property
    def bytes_per_s(self) -> float:
        return self.hbm_tbps * 1e12 * self.bandwidth_efficiency

    def transfer_s(self, num_bytes: float) -> float:
        """Seconds to move `num_bytes` between host and device memory."""
        return num_bytes / (self.host_link_gbytes_per_s * 1e9)


H200 = DeviceSpec("H200", peak_tflops=989.0, hbm_tbps=4.8, memory_gb=141.0)
H100 = DeviceSpec("H100", peak_tflops=989.0, hbm_tbps=3.35, memory_gb=80.0)
DEVICES = {device.name: device for device in (H200, H100)}


@dataclass(frozen=True)
class ChunkCost:
    """One request's part of a step: `num_tokens` new positions after `context` cached ones,
    `num_sampled` of them run through the LM head."""

    num_tokens: int
    context: int
    num_sampled: int = 1


@dataclass(frozen=True)
class StepCost:
    flops: float
    bytes: float
    seconds: float


def step_flops(model: ModelShape, chunks: list[ChunkCost]) -> float:
    """FLOPs of one batched step: 2 per active weight per token, 2 per LM-head weight per sampled row,
    4 x heads x head_dim per (query, key) pair of attention, and the extras."""
    num_tokens = sum(c.num_tokens for c in chunks)
    num_sampled = sum(c.num_sampled for c in chunks)
    pairs = sum(_attended_pairs(c) for c in chunks)
    return (2 * model.active_layer_params * num_tokens + 2 * model.vocab * model.hidden * num_sampled
            + 4 * model.num_layers * model.num_heads * model.head_dim * pairs
            + model.extra_flops_per_token * num_tokens)


def step_cost(model: ModelShape, device: DeviceSpec, chunks: list[ChunkCost]) -> StepCost:
    """The roofline of one batched step: max(FLOPs / compute, bytes / bandwidth) + the step overhead
    + the row overhead per chunk + the token overhead per new position.

    FLOPs: see step_flops. Bytes: the weights read once per step (the experts the batch touches, the
    LM head, the extras) and the KV each chunk attends to, its own new positions' included.
    """
    num_tokens = sum(c.num_tokens for c in chunks)
    flops = step_flops(model, chunks)
    layers = model.layer_params(model.experts_touched(num_tokens))
    weights = (layers + model.vocab * model.hidden + model.extra_params) * model.bytes_per_param
    kv = sum(c.context + c.num_tokens for c in chunks) * model.kv_bytes_per_token
    seconds = (max(flops / device.flops_per_s, (weights + kv) / device.bytes_per_s) + device.step_overhead_s
               + device.row_overhead_s * len(chunks) + device.token_overhead_s * num_tokens)
    return StepCost(flops, weights + kv, seconds)


def _attended_pairs(chunk: ChunkCost) -> int:
    """Causal (query, key) pairs: the query at position p reads keys 0..p."""
    start, end = chunk.context, chunk.context + chunk.num_tokens
    return (end * (end + 1) - start * (start + 1)) // 2
