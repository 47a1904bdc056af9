"""Builds a stage engine (model, weights, KV pool, scheduler, runner) from its spec."""

from __future__ import annotations

import logging
from collections.abc import Callable

import torch

from kvtier import KVCacheManager, KVPoolConfig
from kvtier.config import DTYPES
from stages import qwen3_omni_parts
from stages.commands import Wake
from stages.engine import StageEngine
from stages.grammar import ConstraintCompiler
from stages.interaction import InteractionView
from stages.kv_residency import KVResidency
from stages.models import asr_whisper, tts_piper
from stages.models.asr_whisper import WhisperASR
from stages.models.audio_encoder import AudioEncoder
from stages.models.decoder_config import DecoderConfig
from stages.models.gguf_llama import GGUFLlama
from stages.models.llama import LlamaForCausalLM, add_history, is_history_name
from stages.models.model_folder import ModelFolder
from stages.models.model_package import package_files
from stages.models.packed_linear import pack_linears
from stages.models.talker import TalkerConfig, TalkerModel
from stages.models.tokenizer import TextTokenizer
from stages.models.tts_piper import PiperTTS
from stages.models.vocoder import Vocoder
from stages.models.weights import check_checkpoint, init_deterministic, load_checkpoint, require_fit, tensor_shapes
from stages.no_kv_residency import NoKVResidency
from stages.plan import StageOutput
from stages.policies import make_policy
from stages.runners.asr import ASRRunner
from stages.runners.base import ModelRunner
from stages.runners.decoder import TalkerRunner, ThinkerRunner
from stages.runners.encoder import EncoderRunner
from stages.runners.on_device import OnDeviceRunner
from stages.runners.tts import TTSRunner
from stages.runners.vocoder import VocoderRunner
from stages.scheduler import Scheduler
from stages.shared_device import SharedDevice
from stages.stage_spec import PACKAGED, StageSpec
from stages.step_trace import StepTrace

log = logging.getLogger(__name__)
MODELS = {"encoder": AudioEncoder, "thinker": LlamaForCausalLM, "talker": TalkerModel, "vocoder": Vocoder}


def check_weights(spec: StageSpec) -> None:
    """Raise FileNotFoundError, GGUFError or CheckpointMismatch now if the stage's weights would not load
    (reads the file's header only; the model is built on the meta device, which holds no data),
    ModelPackageError if a packaged model's package or files are missing (not read), ModelFolderError if a
    Hugging Face folder is missing or does not fit (its config.json, tokenizer and chat template are read)."""
    if spec.kind == "asr":
        package_files(asr_whisper.WHAT, *asr_whisper.PACKAGE, *asr_whisper.MODEL_FILES)
    elif spec.kind == "tts":
        package_files(tts_piper.WHAT, *tts_piper.PACKAGE, *tts_piper.VOICE_FILES)
    elif spec.is_qwen3_omni:
        qwen3_omni_parts.check(spec)
    elif spec.folder is not None:
        ModelFolder(spec.folder).check(spec.model)
    elif spec.checkpoint is not None or spec.gguf is not None:
        with torch.device("meta"):
            model = MODELS[spec.kind](spec.model)
        if spec.gguf is not None:
            require_fit(model, GGUFLlama.read(spec.gguf).shapes, spec.gguf)
        else:
            check_checkpoint(model, spec.checkpoint, part=lambda name: not is_history_name(name))
            if spec.window is not None and spec.window.history is not None:
                add_history(model, spec.seed)
                if tensor_shapes(spec.checkpoint, is_history_name):
                    check_checkpoint(model, spec.checkpoint, part=is_history_name)


def build_model(spec: StageSpec) -> torch.nn.Module:
    """The stage's model with the GGUF file's weights, the checkpoint's, or seeded ones (a Qwen3-Omni stage's:
    its part of the folder, loaded onto its device), on its device in its dtype (seeded ones are built on the
    CPU first: they are the same wherever they compute)."""
    if spec.is_qwen3_omni:
        return qwen3_omni_parts.model(spec)
    model = MODELS[spec.kind](spec.model)
    if spec.gguf is not None:
        GGUFLlama.read(spec.gguf).load_into(model)
    else:
        init_deterministic(model, spec.seed)
    if spec.checkpoint is not None:
        load_checkpoint(model, spec.checkpoint, part=lambda name: not is_history_name(name))
    if spec.window is not None and spec.window.history is not None:
        add_history(model, spec.seed, spec.checkpoint)
    model.to(spec.device, DTYPES[spec.dtype])
    int4 = spec.linear_dtype == "int4"
    pack_linears(model, None if int4 else DTYPES[spec.linear_dtype or spec.dtype], int4=int4)
    return model.eval()


def thinker_text(spec: StageSpec) -> tuple[TextTokenizer, str]:
    """The thinker's tokenizer, and the system message its model expects when a session gives none."""
    if spec.is_qwen3_omni:
        return qwen3_omni_parts.thinker_text(spec)
    if spec.folder is not None:
        folder = ModelFolder(spec.folder)
        return folder.tokenizer(), folder.default_instructions()
    if spec.gguf is None:
        return TextTokenizer.default(), ""
    model = GGUFLlama.read(spec.gguf)
    return model.tokenizer(), model.default_instructions()


def decoder_of(spec: StageSpec) -> DecoderConfig:
    if spec.is_qwen3_omni:
        return qwen3_omni_parts.decoder(spec)
    return spec.model.decoder if isinstance(spec.model, TalkerConfig) else spec.model


def num_parameters(spec: StageSpec) -> int | None:
    """How many weights the stage's model has (built on the meta device, which holds no data); None for a
    model loaded from its package, whose size this build does not know before loading it."""
    if spec.kind in PACKAGED:
        return None
    if spec.is_qwen3_omni:
        return qwen3_omni_parts.num_parameters(spec)
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
            num_kv_heads=decoder.num_kv_heads, head_dim=decoder.head_dim, dtype=spec.dtype, device=spec.device,
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
    """The thinker on vLLM's engine (in this process: it must have vLLM), over the deployer's HF folder (its
    shape checked first; a Qwen3-Omni folder's thinker with the rows its talker reads) or the GGUF file's
    converted one; a policy other than fcfs (vLLM's own) orders vLLM's scheduler, reading `view` and `device`;
    with offload eviction next_use, its host cache evicts by the next use `view` predicts. Tool calls are
    constrained over the thinker's tokenizer, except with the talker's tap or tensor parallelism."""
    from stages.vllm_backend import vllm_api
    from stages.vllm_backend.engine import VllmThinkerEngine
    from stages.vllm_backend.hf_folder import hf_folder

    talker_layer, talker_rows = None, None
    if spec.is_qwen3_omni:
        qwen3_omni_parts.check(spec)
        talker_layer, talker_rows = qwen3_omni_parts.vllm_talker_rows(spec)
    elif spec.folder is not None:
        ModelFolder(spec.folder).check_shape(spec.model)
    folder = spec.folder or hf_folder(spec.gguf, spec.vllm.cache_dir)
    constraints = None
    if talker_layer is None and spec.vllm.tensor_parallel_size == 1:
        constraints = ConstraintCompiler(thinker_text(spec)[0])
    engine = vllm_api.build_engine(folder, spec.vllm, spec.scheduler, spec.seed, talker_layer, constraints)
    policy = None
    if spec.scheduler.policy != "fcfs":
        policy = make_policy(spec.scheduler, view, vllm_api.pool_kv(vllm_api.scheduler_of(engine)), device)
        vllm_api.order_by(engine, policy, clock)
    if spec.vllm.offload.eviction == "next_use" and view is not None:
        vllm_api.evict_by_next_use(vllm_api.scheduler_of(engine), view.next_use)
    trace = StepTrace(spec.trace_path) if spec.trace_path is not None else None
    return VllmThinkerEngine(spec.name, engine, emit, policy, clock, trace, talker_rows, constraints)


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
    return runner_of(spec, build_model(spec), kv)


def runner_of(spec: StageSpec, model, kv: KVCacheManager | None) -> ModelRunner:
    """`model` (build_model's) in the stage's runner; `kv` for a decoder's (a thinker's constrains tool calls
    over its tokenizer). On a GPU (or in another dtype than float32), its results come back to host memory in
float32 (OnDeviceRunner)."""
    runner = _runner_of(spec, model, kv)
    return runner if (spec.device, spec.dtype) == ("cpu", "float32") else OnDeviceRunner(runner)


def _runner_of(spec: StageSpec, model, kv: KVCacheManager | None) -> ModelRunner:
    if spec.is_qwen3_omni:
        return qwen3_omni_parts.runner(spec, model, kv)
    if spec.kind in ("encoder", "vocoder"):
        return (EncoderRunner if spec.kind == "encoder" else VocoderRunner)(model)
    if spec.kind == "thinker":
        return ThinkerRunner(model, kv, spec.window, ConstraintCompiler(thinker_text(spec)[0]))
    return TalkerRunner(model, kv, spec.window)
