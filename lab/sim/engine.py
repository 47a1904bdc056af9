"""A simulated stage engine: the real scheduler, policy and KV manager (a meta pool of the modelled
shape, a host tier over the device's link) over a SimulatedRunner."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from kvtier import KVCacheManager, KVPoolConfig
from lab.sim.cost_model import DeviceSpec, ModelShape
from lab.sim.link_copier import LinkCopier
from lab.sim.runner import Placeholders, SimulatedRunner
from lab.sim.step_noise import StepJitter
from stages.engine import StageEngine
from stages.factory import build_residency, thinker_text
from stages.interaction import InteractionView
from stages.models.audio_encoder import AudioEncoderConfig
from stages.models.vocoder import VocoderConfig
from stages.no_kv_residency import NoKVResidency
from stages.plan import StageOutput
from stages.scheduler import Scheduler
from stages.shared_device import SharedDevice
from stages.stage_spec import StageSpec
from stages.step_trace import StepTrace

FILLER_WORD = " the"  # every token a simulated thinker generates


@dataclass(frozen=True)
class SimulatedStage:
    """How one stage is simulated: the shape it is priced as, the index of the device each of its
    replicas runs on (one replica per entry), its own step, row and token overheads (None: the device's),
    and `jitter`: the spread of its steps around their price (see step_noise)."""

    model: ModelShape
    devices: tuple[int, ...] = (0,)
    step_overhead_s: float | None = None
    row_overhead_s: float | None = None
    token_overhead_s: float | None = None
    jitter: StepJitter = StepJitter()

    def __post_init__(self) -> None:
        if not self.devices or any(device < 0 for device in self.devices):
            raise ValueError(f"{self.model.name}: devices must list a device index >= 0 per replica, "
                             f"got {list(self.devices)}")

    @property
    def replicas(self) -> int:
        return len(self.devices)

    def priced_on(self, device: DeviceSpec) -> DeviceSpec:
        """`device` with this stage's overheads where it has its own."""
        own = {name: getattr(self, name) for name in ("step_overhead_s", "row_overhead_s", "token_overhead_s")
               if getattr(self, name) is not None}
        return replace(device, **own)


def build_simulated_engine(spec: StageSpec, model: ModelShape, device: DeviceSpec,
                           emit: Callable[[list[StageOutput]], None], clock: Callable[[], float],
                           view: InteractionView | None, board: SharedDevice | None,
                           on_transfer_done: Callable[[], None], jitter: StepJitter = StepJitter(),
                           seed: str = "") -> StageEngine:
    """The engine of `spec` with its KV pool shaped as `model` (bf16, no bytes: the meta device) and its
    host tier's transfers run by the caller (`tier.worker.run_chunk`), priced at the device's link rate; its
    steps spread by `jitter` (drawn from `seed`: runs with one seed meet the same machine). With the spec's
    `trace_path` (`runtime.trace_dir`) it writes its step timeline there as a real engine does, in virtual time."""
    kv, residency = None, NoKVResidency()
    if spec.kv is not None:
        pool = KVPoolConfig(num_blocks=spec.kv.num_blocks, block_size=spec.kv.block_size, num_layers=model.num_layers,
                            num_kv_heads=model.num_kv_heads, head_dim=model.head_dim, dtype="bfloat16", device="meta")
        host = spec.kv.host
        if host is not None:
            host = replace(host, emulated_link_gbps=device.host_link_gbytes_per_s * 8)
        kv = KVCacheManager(pool, host, spec.kv.eviction, clock, on_transfer_done, transfer_mode="inline",
                            copier_type=LinkCopier)
        residency = build_residency(spec, kv, view)
    runner = SimulatedRunner(spec.kind, model, device, placeholders(spec), spec.window, jitter, seed)
    trace = StepTrace(spec.trace_path) if spec.trace_path is not None else None
    return StageEngine(spec.name, Scheduler(spec.scheduler, kv, clock, view, residency, board), runner, emit,
                       trace=trace)


def placeholders(spec: StageSpec) -> Placeholders:
    if isinstance(spec.model, AudioEncoderConfig):
        return Placeholders(width=spec.model.output_size)
    if isinstance(spec.model, VocoderConfig):
        return Placeholders(samples_per_frame=spec.model.samples_per_frame, left_context=spec.model.left_context_frames)
    decoder = getattr(spec.model, "decoder", spec.model)
    filler = thinker_text(spec)[0].encode(FILLER_WORD)[-1] if spec.kind == "thinker" else 0
    return Placeholders(width=decoder.hidden_size, filler_token=filler)
