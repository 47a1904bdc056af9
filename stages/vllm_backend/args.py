"""A vLLM thinker's engine arguments, checked without vLLM (the server's interpreter need not have it)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from stages.validation import require_number, require_positive_ints

CPU_DTYPES = ("float32", "bfloat16")  # what vLLM's CPU platform computes in
GPU_DTYPES = ("bfloat16", "float16", "float32")
CPU_BLOCK_MULTIPLE = 32  # vLLM's CPU attention takes KV blocks of a multiple of 32 tokens
CPU_HEAD_SIZES = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)  # and these head sizes (cpu_attn.py:70)
GPU_BLOCK_MULTIPLE = 16
EVICTIONS = ("none", "lru", "next_use")


@dataclass(frozen=True)
class VllmOffload:
    """vLLM's KV offload to host memory, as a stage's `kv` section sets it: `eviction` none (off: vLLM keeps the
    KV on its GPUs only), lru (vLLM's own CachePolicy) or next_use (LiveServe's, cache_policy.py) orders the
    host cache of `host_mib` MiB (all of a replica's GPUs together)."""

    eviction: str = "none"
    host_mib: int | None = None

    def __post_init__(self) -> None:
        if self.eviction not in EVICTIONS:
            raise ValueError(f"eviction must be one of {EVICTIONS}, got {self.eviction!r}")
        if self.is_on:
            require_positive_ints(self, "host_mib")
        elif self.host_mib is not None:
            raise ValueError("host_mib sizes the host cache of eviction lru or next_use; eviction is none")

    @property
    def is_on(self) -> bool:
        return self.eviction != "none"


@dataclass(frozen=True)
class VllmArgs:
    """vLLM's `EngineArgs` as a stage's YAML sets them; the budgets (`max_num_seqs`,
    `max_num_batched_tokens`) come from the stage's scheduler section.

    `python` is the interpreter (a venv with vLLM) that runs the stage's process;
    `cache_dir` holds the HF folder converted from a GGUF file at first use
    (None on either: the caller fills them in). `block_size` is vLLM's KV block in tokens,
    `max_model_len` the longest context a session may hold (None: the model's).
    On the CPU (`gpu_memory_utilization` None), `kv_cache_mib` is vLLM's KV cache
    (`kv_cache_memory_bytes`) and `tensor_parallel_size` 1. On GPUs, the stage's deployment
    gives `dtype`, `tensor_parallel_size` (its GPUs a replica) and `gpu_memory_utilization` (its
    memory_fraction), and vLLM's KV takes what the weights and activations leave of that share
    (`kv_cache_mib` None), and `offload` may move KV to host memory (GPUs only: vLLM's transfer worker is).
    """

    dtype: str = "float32"
    block_size: int = 32
    kv_cache_mib: int | None = 256
    max_model_len: int | None = 2048
    enable_prefix_caching: bool = True
    enforce_eager: bool = True
    python: Path | None = None
    cache_dir: Path | None = None
    tensor_parallel_size: int = 1
    gpu_memory_utilization: float | None = None
    offload: VllmOffload = VllmOffload()

    def __post_init__(self) -> None:
        dtypes, multiple = (GPU_DTYPES, GPU_BLOCK_MULTIPLE) if self.on_gpus else (CPU_DTYPES, CPU_BLOCK_MULTIPLE)
        where = "on GPUs" if self.on_gpus else "vLLM's CPU build"
        if self.dtype not in dtypes:
            raise ValueError(f"dtype must be one of {dtypes} ({where}), got {self.dtype!r}")
        require_positive_ints(self, "block_size", "tensor_parallel_size")
        if self.block_size % multiple:
            raise ValueError(f"block_size must be a multiple of {multiple} ({where}), got {self.block_size}")
        if self.max_model_len is not None:
            require_positive_ints(self, "max_model_len")
        for name in ("enable_prefix_caching", "enforce_eager"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be true or false, got {getattr(self, name)!r}")
        if self.on_gpus:
            require_number(self, "gpu_memory_utilization", lambda v: 0 < v <= 1, "a number in (0, 1]")
            if self.kv_cache_mib is not None:
                raise ValueError("kv_cache_mib is the CPU's; on GPUs the KV takes what memory_fraction leaves")
        elif self.tensor_parallel_size != 1 or self.kv_cache_mib is None or self.offload.is_on:
            raise ValueError("on the CPU vLLM runs without tensor parallelism or KV offload, in kv_cache_mib of KV")
        else:
            require_positive_ints(self, "kv_cache_mib")

    @property
    def on_gpus(self) -> bool:
        return self.gpu_memory_utilization is not None
