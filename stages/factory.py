"""Builds a stage engine (model, weights, KV pool, scheduler, runner) from its spec."""

from __future__ import annotations

import logging
from collections.abc import Callable

import torch

from kvtier import KVCacheManager, KVPoolConfig
from stages.commands import Wake
from stages.engine import StageEngine
from stages.interaction import InteractionView
from stages.kv_residency import KVResidency
from stages.models import asr_whisper, tts_piper
from stages.models.asr_whisper import WhisperASR
from stages.models.audio_encoder import AudioEncoder
from stages.models.decoder_config import DecoderConfig
from stages.models.gguf_llama import GGUFLlama
from stages.models.llama import LlamaForCausalLM
from stages.models.model_package import package_files
from stages.models.packed_linear import pack_linears
from stages.models.talker import TalkerConfig, TalkerModel
from stages.models.tokenizer import TextTokenizer
from stages.models.tts_piper import PiperTTS
from stages.models.vocoder import Vocoder
from stages.models.weights import check_checkpoint, init_deterministic, load_checkpoint, require_fit
from stages.no_kv_residency import NoKVResidency
from stages.plan import StageOutput
from stages.policies import make_policy
from stages.policies import make_policy
from stages.runners.asr import ASRRunner
from stages.runners.base import ModelRunner
from stages.runners.decoder import TalkerRunner, ThinkerRunner
from stages.runners.encoder import EncoderRunner
from stages.runners.tts import TTSRunner
from stages.runners.vocoder import VocoderRunner
from stages.scheduler import Scheduler
from stages.shared_device import SharedDevice
from stages.stage_spec import PACKAGED, StageSpec
from stages.step_trace import StepTrace

log = logging.getLogger(__name__)
<<<<<<< HEAD
=======
KINDS = ("encoder", "thinker", "talker", "vocoder", "asr", "tts")
PACKAGED = {"asr": WhisperConfig, "tts": PiperVoiceConfig}  # kinds whose model ships in an installed package
BACKENDS = ("native", "vllm")


@dataclass(frozen=True)
class KVSpec:
    """A stage's KV: device blocks, and the host tier behind them; block shapes come from the model.

    `eviction` names the tier policy: `none` (no host tier: memory pressure preempts
    and recomputes), `lru` or `next_use` (a host tier of `host_blocks` blocks, 0 =
    4x the device pool; copies paced to `emulated_link_gbps` gigabits/s when set).
    `preload` loads offloaded KV back once the user goes quiet before the end of a turn
    (`preload_at` "pause", the default: a speaking user's KV stays off the device until
    then) or as soon as they start speaking ("speech_start"); warmed KV stays protected
    for at most `warm_protect_s`. `idle_offload_s` (next_use with preload
    only; null: off) moves a dormant session's KV to the host whenever its next use
    is predicted further away than that, memory pressure or not.
    """

    num_blocks: int = 1024
    block_size: int = 16
    eviction: str = "none"
    host_blocks: int = 0
    emulated_link_gbps: float | None = None
    preload: bool = False
    preload_at: str = "pause"
    warm_protect_s: float = 5.0
    idle_offload_s: float | None = None

    def __post_init__(self) -> None:
        require_positive_ints(self, "num_blocks", "block_size")
        if self.eviction not in EVICTION_POLICIES.names():
            raise ValueError(f"eviction must be one of {EVICTION_POLICIES.names()}, got {self.eviction!r}")
        if not isinstance(self.host_blocks, int) or isinstance(self.host_blocks, bool) or self.host_blocks < 0:
            raise ValueError(f"host_blocks must be an integer >= 0, got {self.host_blocks!r}")
        require_number(self, "warm_protect_s", lambda v: 0 <= v < math.inf, "a finite number >= 0")
        if self.emulated_link_gbps is not None:
            require_number(self, "emulated_link_gbps", lambda v: 0 < v < math.inf, "a finite number > 0 or null")
        if not isinstance(self.preload, bool):
            raise ValueError(f"preload must be true or false, got {self.preload!r}")
        if self.preload_at not in PRELOAD_TRIGGERS:
            raise ValueError(f"preload_at must be one of {PRELOAD_TRIGGERS}, got {self.preload_at!r}")
        if self.eviction == "none" and (self.preload or self.host_blocks):
            raise ValueError("preload and host_blocks need a host tier: set eviction to lru or next_use")
        if self.idle_offload_s is not None:
            require_number(self, "idle_offload_s", lambda v: 0 <= v < math.inf, "a finite number >= 0 or null")
            if self.eviction != "next_use" or not self.preload:
                raise ValueError("idle_offload_s needs eviction next_use with preload (speech brings the KV back)")

    @property
    def host(self) -> HostTierConfig | None:
        if self.eviction == "none":
            return None
        return HostTierConfig(self.host_blocks or 4 * self.num_blocks, self.emulated_link_gbps, self.warm_protect_s)


@dataclass(frozen=True)
class StageSpec:
    """Everything needed to start one replica of one stage.

    `window` (thinker and talker; None: unbounded) bounds what each request attends to
    and keeps in KV; it takes no host tier, and the pool must hold one request's sinks,
    window and largest chunk. `gguf` (thinker only): a Llama GGUF file whose weights (and shape, in
    `model`) the thinker takes, instead of seeded ones or a `checkpoint`. `threads` is how many intra-op threads the stage's steps
    compute with (None: the process default): stages computing at once on a few cores
    each with all of them oversubscribe the cores (for asr and tts, CTranslate2's and
    onnxruntime's threads, fixed when the model loads). `trace_path`: where the engine
    writes its step timeline (see StepTrace; None: no trace). An asr or tts stage loads
    its model from its installed package: it takes no checkpoint, KV or window.
    `backend` vllm (a thinker with `gguf` weights; `vllm` its engine arguments) computes the stage on
    vLLM's engine, in a process of the interpreter `vllm.python`; vLLM keeps the KV, so the stage has no
    `kv` or window; its scheduler section gives the budgets and the policy: fcfs is vLLM's own scheduler,
    another orders vLLM's queues every step (stages/vllm_backend/vllm_api.py, PolicyOrdering).
    """

    name: str
    kind: str
    model: AudioEncoderConfig | DecoderConfig | TalkerConfig | VocoderConfig | WhisperConfig | PiperVoiceConfig
    scheduler: SchedulerConfig
    kv: KVSpec | None = None
    seed: int = 0
    checkpoint: Path | None = None
    gguf: Path | None = None
    window: WindowSpec | None = None
    threads: int | None = None
    trace_path: Path | None = None
    backend: str = "native"
    vllm: VllmArgs | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {self.kind!r}")
        if self.backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, got {self.backend!r}")
        if self.backend == "vllm":
            self._check_vllm()
            return
        if self.threads is not None:
            require_positive_ints(self, "threads")
        if self.gguf is not None and (self.kind != "thinker" or self.checkpoint is not None):
            raise ValueError(f"stage {self.name!r}: gguf weights are a thinker's, instead of a checkpoint")
        if self.kind in ("thinker", "talker") and self.kv is None:
            raise ValueError(f"stage {self.name!r} ({self.kind}) needs a kv section")
        if self.kind in PACKAGED:
            self._check_packaged()
        if self.window is not None:
            self._check_window()

    def _check_vllm(self) -> None:
        if self.kind != "thinker" or self.gguf is None:
            raise ValueError(f"backend: vllm serves a thinker with gguf weights (model.thinker.gguf); "
                             f"stage {self.name} is a {self.kind}{'' if self.gguf else ' without them'}")
        if self.vllm is None or self.vllm.python is None or self.vllm.cache_dir is None:
            raise ValueError(f"backend: stage {self.name} on vllm needs its vllm arguments with python and cache_dir")
        for name in ("kv", "window", "checkpoint"):
            if getattr(self, name) is not None:
                raise ValueError(f"{name}: stage {self.name} runs on vllm, which keeps its own KV "
                                 "(set vllm.kv_cache_mib, vllm.block_size)")

    @property
    def interpreter(self) -> Path | None:
        """The Python that must run this stage's process (None: any process of the server's)."""
        return self.vllm.python if self.backend == "vllm" else None

    def _check_packaged(self) -> None:
        if not isinstance(self.model, PACKAGED[self.kind]):
            raise ValueError(f"model: stage {self.name!r} ({self.kind}) takes a {PACKAGED[self.kind].__name__}, "
                             f"got {type(self.model).__name__}")
        for name in ("checkpoint", "kv", "window"):
            if getattr(self, name) is not None:
                raise ValueError(f"{name}: stage {self.name!r} ({self.kind}) loads its model from its package "
                                 f"and has no {name}")

    def _check_window(self) -> None:
        if self.kv is None:
            raise ValueError(f"window: stage {self.name!r} ({self.kind}) has no KV to bound")
        if self.kv.eviction != "none":
            raise ValueError(f"window cannot be combined with kv.eviction {self.kv.eviction!r} (a host KV tier); "
                             "set kv.eviction to none or remove the window")
        size, window, chunk = self.kv.block_size, self.window, self.scheduler.max_num_batched_tokens
        need = blocks_for(window.sinks, size) + blocks_for(window.tokens + chunk, size) + 1
        if need > self.kv.num_blocks:
            raise ValueError(f"window: sinks {window.sinks} + tokens {window.tokens} + a chunk of "
                             f"scheduler.max_num_batched_tokens ({chunk}) need {need} KV blocks; "
                             f"kv.num_blocks is {self.kv.num_blocks}")


>>>>>>> vllm2
MODELS = {"encoder": AudioEncoder, "thinker": LlamaForCausalLM, "talker": TalkerModel, "vocoder": Vocoder}


def check_weights(spec: StageSpec) -> None:
    """Raise FileNotFoundError, GGUFError or CheckpointMismatch now if the stage's weights would not load
    (reads the file's header only; the model is built on the meta device, which holds no data),
    ModelPackageError if a packaged model's package or files are missing (not read)."""
    if spec.kind == "asr":
        package_files(asr_whisper.WHAT, *asr_whisper.PACKAGE, *asr_whisper.MODEL_FILES)
    elif spec.kind == "tts":
        package_files(tts_piper.WHAT, *tts_piper.PACKAGE, *tts_piper.VOICE_FILES)
    elif spec.checkpoint is not None or spec.gguf is not None:
        with torch.device("meta"):
            model = MODELS[spec.kind](spec.model)
        if spec.gguf is not None:
            require_fit(model, GGUFLlama.read(spec.gguf).shapes, spec.gguf)
        else:
            check_checkpoint(model, spec.checkpoint)


def build_model(spec: StageSpec) -> torch.nn.Module:
    """The stage's model with the GGUF file's weights, the checkpoint's, or seeded ones."""
    model = MODELS[spec.kind](spec.model)
    if spec.gguf is not None:
        GGUFLlama.read(spec.gguf).load_into(model)
    else:
        init_deterministic(model, spec.seed)
    if spec.checkpoint is not None:
        load_checkpoint(model, spec.checkpoint)
    pack_linears(model)
    return model.eval()


def thinker_text(spec: StageSpec) -> tuple[TextTokenizer, str]:
    """The thinker's tokenizer, and the system message its model expects when a session gives none."""
    if spec.gguf is None:
        return TextTokenizer.default(), ""
    model = GGUFLlama.read(spec.gguf)
    return model.tokenizer(), model.default_instructions()


def decoder_of(spec: StageSpec) -> DecoderConfig:
    return spec.model.decoder if isinstance(spec.model, TalkerConfig) else spec.model


def num_parameters(spec: StageSpec) -> int | None:
    """How many weights the stage's model has (built on the meta device, which holds no data); None for a
    model loaded from its package, whose size this build does not know before loading it."""
    if spec.kind in PACKAGED:
        return None
    with torch.device("meta"):
        model = MODELS[spec.kind](spec.model)
    return sum(parameter.numel() for parameter in model.parameters())


def build_engine(spec: StageSpec, emit: Callable[[list[StageOutput]], None], clock: Callable[[], float],
                 view: InteractionView | None = None, device: SharedDevice | None = None) -> StageEngine:
    """The stage's engine; its scheduler reads playback telemetry from `view` (None: none) and shares
    `device` (None: no one) with the other stages computing there."""
    if spec.backend == "vllm":
        return build_vllm_thinker(spec, emit, clock, view, device)
    engines: list[StageEngine] = []  # the KV tier wakes the engine, which does not exist yet
    kv, residency = None, NoKVResidency()
    if spec.kv is not None:
        decoder = decoder_of(spec)
        kv = KVCacheManager(KVPoolConfig(
            num_blocks=spec.kv.num_blocks, block_size=spec.kv.block_size, num_layers=decoder.num_layers,
            num_kv_heads=decoder.num_kv_heads, head_dim=decoder.head_dim,
        ), spec.kv.host, spec.kv.eviction, clock, on_transfer_done=lambda: engines[0].submit(Wake()))
        residency = build_residency(spec, kv, view)
        if kv.tier.link_gbps is not None:
            log.info("stage %s: %s KV eviction to %d host blocks; device-host link measured at %.1f Gbps",
                     spec.name, spec.kv.eviction, spec.kv.host.num_blocks, kv.tier.link_gbps)
    runner = build_runner(spec, kv)
    scheduler = Scheduler(spec.scheduler, kv, clock, view, residency, device)
    trace = StepTrace(spec.trace_path) if spec.trace_path is not None else None
    engines.append(StageEngine(spec.name, scheduler, runner, emit, num_threads=spec.threads, trace=trace))
    return engines[0]


def build_vllm_thinker(spec: StageSpec, emit: Callable[[list[StageOutput]], None], clock: Callable[[], float],
                       view: InteractionView | None, device: SharedDevice | None):
    """The thinker on vLLM's engine (in this process: it must have vLLM), over the GGUF file's HF folder; a
    policy other than fcfs (vLLM's own) orders vLLM's scheduler, reading `view` and `device`."""
    from stages.vllm_backend import vllm_api
    from stages.vllm_backend.engine import VllmThinkerEngine
    from stages.vllm_backend.hf_folder import hf_folder

    policy = make_policy(spec.scheduler, view, None, device) if spec.scheduler.policy != "fcfs" else None
    engine = vllm_api.build_engine(hf_folder(spec.gguf, spec.vllm.cache_dir), spec.vllm, spec.scheduler, spec.seed,
                                   ordered=policy is not None)
    if policy is not None:
        vllm_api.order_by(engine, policy, clock)
    return VllmThinkerEngine(spec.name, engine, emit, policy)


def build_residency(spec: StageSpec, kv: KVCacheManager, view: InteractionView | None) -> KVResidency:
    """The scheduler's side of a stage's KV, as its spec says (preload, protection, idle offload, window)."""
    return KVResidency(kv, view, spec.kv.preload, protect_speaking=spec.kv.eviction == "next_use",
                       idle_offload_s=spec.kv.idle_offload_s, preload_at=spec.kv.preload_at, window=spec.window)


def build_runner(spec: StageSpec, kv: KVCacheManager | None) -> ModelRunner:
    """The stage's model (loaded, or built with its weights) in its runner; `kv` for a decoder's."""
    if spec.kind == "asr":
        return ASRRunner(WhisperASR.load(spec.model, spec.threads))
    if spec.kind == "tts":
        return TTSRunner(PiperTTS.load(spec.model, spec.threads))
    model = build_model(spec)
    if spec.kind in ("encoder", "vocoder"):
        return (EncoderRunner if spec.kind == "encoder" else VocoderRunner)(model)
    return (ThinkerRunner if spec.kind == "thinker" else TalkerRunner)(model, kv, spec.window)
