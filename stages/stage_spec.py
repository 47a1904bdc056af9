"""What one replica of one stage is: its kind, model, scheduler, KV pool, window, threads and backend."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

from kvtier import EVICTION_POLICIES, HostTierConfig, blocks_for
from kvtier.config import DTYPES
from stages.config import SchedulerConfig, WindowSpec
from stages.kv_residency import PRELOAD_TRIGGERS
from stages.models.asr_whisper import WhisperConfig
from stages.models.audio_encoder import AudioEncoderConfig
from stages.models.decoder_config import DecoderConfig
from stages.models.history import STATE_SIZE, state_blocks
from stages.models.qwen3_omni.config import Qwen3OmniConfig
from stages.models.talker import TalkerConfig
from stages.models.tts_piper import PiperVoiceConfig
from stages.models.vocoder import VocoderConfig
from stages.validation import require_number, require_positive_ints
from stages.vllm_backend.args import CPU_HEAD_SIZES, VllmArgs

KINDS = ("encoder", "thinker", "talker", "vocoder", "asr", "tts")
LINEAR_DTYPES = ("float32", "bfloat16", "int4")  # how linears keep their weights (stages/models/packed_linear.py)
PACKAGED = {"asr": WhisperConfig, "tts": PiperVoiceConfig}  # kinds whose model ships in an installed package
BACKENDS = ("native", "vllm")
CUDA_DEVICE = re.compile(r"cuda(:\d+)?")


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
    and keeps in KV; the pool must hold one request's sinks, window and largest chunk
    (and its history state, with one: the thinker's only). `gguf` (thinker only): a Llama
    GGUF file whose weights (and shape, in `model`) the thinker takes, instead of seeded ones
    or a `checkpoint`. `threads` is how many intra-op threads the stage's steps compute with
    (None: the process default): stages computing at once on a few cores each with all of
    them oversubscribe the cores (for asr and tts, CTranslate2's and
    onnxruntime's threads, fixed when the model loads). `trace_path`: where the engine
    writes its step timeline (see StepTrace; None: no trace). An asr or tts stage loads
    its model from its installed package: it takes no checkpoint, KV or window.
    `backend` vllm (a thinker with `gguf` weights, or a Hugging Face `folder` the deployer has on disk whose
    shape `model` declares; `vllm` its engine arguments) computes the stage on vLLM's engine, in a process of
    the interpreter `vllm.python`; vLLM keeps the KV, so the stage has no `kv` or window; its scheduler
    section gives the budgets and the policy: fcfs is vLLM's own scheduler, another orders vLLM's queues
    every step (stages/vllm_backend/vllm_api.py, PolicyOrdering). `folder` is checked when the stage starts
    (stages/models/model_folder.py), not here: a plan is made where the weights are not. A stage whose
    `model` is a Qwen3OmniConfig runs its part of that Qwen3-Omni `folder` natively (encoder: the audio
    tower, thinker, talker, vocoder: code2wav), without a window. `device` is where a native stage computes:
    `cpu`, or `cuda` (its process's first visible GPU, `cuda:N` one of them), its weights and KV in `dtype`
    (a config gives float32 on the CPU, where the C kernels compute; bfloat16 there checks a GPU's dtypes).
    `linear_dtype` (native stages on the CPU): the dtype their oneDNN-packed linears keep their weights in and
    multiply in (None: `dtype`); bfloat16 halves the bytes a decode step reads, while norms, attention and KV
    stay in `dtype`; int4 packs them in bfloat16 and also keeps 4-bit groups of 32 inputs that steps of up to
    6 rows (decoding) read instead, a quarter of bfloat16's bytes. An output head gives its highest logits in
    `dtype` (OutputHead). Where the CPU has no bfloat16 GEMM, the linears stay in `dtype`.
    """

    name: str
    kind: str
    model: (AudioEncoderConfig | DecoderConfig | TalkerConfig | VocoderConfig | WhisperConfig | PiperVoiceConfig
            | Qwen3OmniConfig)
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
    folder: Path | None = None
    device: str = "cpu"
    dtype: str = "float32"
    linear_dtype: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {self.kind!r}")
        if self.backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, got {self.backend!r}")
        if self.backend == "vllm":
            self._check_vllm()
            return
        if self.is_qwen3_omni:
            if self.folder is None or self.window is not None or self.checkpoint is not None:
                raise ValueError(f"stage {self.name!r}: a Qwen3-Omni stage runs its part of the folder (model.folder), "
                                 "without a window or a checkpoint")
        elif self.folder is not None:
            raise ValueError(f"folder: stage {self.name}'s Hugging Face folder is loaded by vLLM; set its "
                             "backend: vllm")
        if self.threads is not None:
            require_positive_ints(self, "threads")
        self._check_device()
        if self.gguf is not None and (self.kind != "thinker" or self.checkpoint is not None):
            raise ValueError(f"stage {self.name!r}: gguf weights are a thinker's, instead of a checkpoint")
        if self.kind in ("thinker", "talker") and self.kv is None:
            raise ValueError(f"stage {self.name!r} ({self.kind}) needs a kv section")
        if self.kind in PACKAGED:
            self._check_packaged()
        if self.window is not None:
            self._check_window()

    def _check_vllm(self) -> None:
        if self.kind != "thinker" or (self.gguf is None) == (self.folder is None):
            weights = " with both" if self.gguf and self.folder else "" if self.gguf or self.folder else " without them"
            raise ValueError(f"backend: vllm serves a thinker with gguf weights (model.thinker.gguf) or a Hugging "
                             f"Face folder (model.thinker.folder); stage {self.name} is a {self.kind}{weights}")
        if self.vllm is None or self.vllm.python is None or self.vllm.cache_dir is None:
            raise ValueError(f"backend: stage {self.name} on vllm needs its vllm arguments with python and cache_dir")
        if self.linear_dtype is not None:
            raise ValueError(f"linear_dtype: stage {self.name} runs on vllm, which keeps its weights in its own dtype")
        for name in ("kv", "window", "checkpoint"):
            if getattr(self, name) is not None:
                raise ValueError(f"{name}: stage {self.name} runs on vllm, which keeps its own KV "
                                 "(set vllm.kv_cache_mib, vllm.block_size)")
        if self.is_qwen3_omni and self.vllm.tensor_parallel_size != 1:
            raise ValueError(f"backend: stage {self.name} taps the hidden states Qwen3-Omni's talker reads out of "
                             "vLLM's worker in its own process: one GPU a replica (no tensor parallelism)")
        head_dim = (self.model.thinker if self.is_qwen3_omni else self.model).head_dim
        if not self.vllm.on_gpus and head_dim not in CPU_HEAD_SIZES:
            raise ValueError(f"backend: vLLM's CPU attention takes head sizes {CPU_HEAD_SIZES}; stage {self.name}'s "
                             f"model has head_dim {head_dim} (run it on the native backend)")

    @property
    def is_qwen3_omni(self) -> bool:
        return isinstance(self.model, Qwen3OmniConfig)

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

    def _check_device(self) -> None:
        if not (self.device == "cpu" or CUDA_DEVICE.fullmatch(self.device)):
            raise ValueError(f"device: stage {self.name!r} computes on cpu, cuda or cuda:N, not {self.device!r}")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype: stage {self.name!r} computes in one of {sorted(DTYPES)}, not {self.dtype!r}")
        if self.device != "cpu" and self.kind in PACKAGED:
            raise ValueError(f"device: stage {self.name!r} ({self.kind}) computes on the CPU in this build")
        if self.linear_dtype is not None and (self.linear_dtype not in LINEAR_DTYPES or self.device != "cpu"
                                              or self.kind in PACKAGED):
            raise ValueError(f"linear_dtype: stage {self.name} packs its linears in one of {', '.join(LINEAR_DTYPES)}, "
                             f"natively on the CPU only; got {self.linear_dtype!r} ({self.kind} on {self.device})")

    def _check_window(self) -> None:
        if self.kv is None:
            raise ValueError(f"window: stage {self.name!r} ({self.kind}) has no KV to bound")
        if self.window.history is not None and self.kind != "thinker":
            raise ValueError(f"window.history: a history branch is built for the thinker, not the {self.kind}")
        size, window, chunk = self.kv.block_size, self.window, self.scheduler.max_num_batched_tokens
        need = blocks_for(window.sinks, size) + blocks_for(window.tokens + chunk, size) + 1
        need += 0 if window.history is None else state_blocks(STATE_SIZE, size)
        if need > self.kv.num_blocks:
            raise ValueError(f"window: sinks {window.sinks} + tokens {window.tokens} + a chunk of "
                             f"scheduler.max_num_batched_tokens ({chunk}) need {need} KV blocks; "
                             f"kv.num_blocks is {self.kv.num_blocks}")
