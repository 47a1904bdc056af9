"""Shape of a Llama-style decoder (the thinker, and the talker's backbone)."""

from __future__ import annotations

from dataclasses import dataclass

from stages.validation import require_positive_ints


@dataclass(frozen=True)
class DecoderConfig:
    """Sizes of a decoder with RMSNorm, RoPE, grouped-query attention and SwiGLU."""

    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    rope_theta: float = 10000.0
    max_position: int = 8192
    rms_norm_eps: float = 1e-5
    tie_word_embeddings: bool = True

    def __post_init__(self) -> None:
        require_positive_ints(self, "vocab_size", "hidden_size", "num_layers", "num_heads", "num_kv_heads",
                              "head_dim", "intermediate_size", "max_position")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_heads ({self.num_heads}) must be a multiple of num_kv_heads ({self.num_kv_heads})")
        if self.head_dim % 2:
            raise ValueError(f"head_dim ({self.head_dim}) must be even for rotary embeddings")
        if not self.rope_theta > 0 or not self.rms_norm_eps > 0:
            raise ValueError("rope_theta and rms_norm_eps must be positive")
