"""A Llama GGUF file as the Hugging Face folder vLLM loads: config.json and model.safetensors, its weights
dequantized to float32 exactly as the native thinker loads them (GGUFLlama.tensors), no tokenizer (LiveServe
tokenizes). Written once per file into a cache folder named by the file's content hash."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

from safetensors.torch import save_file

from stages.models.decoder_config import DecoderConfig
from stages.models.gguf_llama import GGUFLlama

HASH_CHUNK = 1 << 22


def hf_folder(gguf: Path, cache_dir: Path) -> Path:
    """The folder converted from `gguf` under `cache_dir`, converting it if it is not there yet."""
    folder = cache_dir / f"{gguf.stem}-{content_hash(gguf)[:16]}"
    if (folder / "config.json").is_file():
        return folder
    cache_dir.mkdir(parents=True, exist_ok=True)
    model = GGUFLlama.read(gguf)
    with tempfile.TemporaryDirectory(dir=cache_dir) as partial:
        save_file(model.state_dict(), os.path.join(partial, "model.safetensors"))
        Path(partial, "config.json").write_text(json.dumps(llama_config(model.config), indent=1))
        try:
            os.rename(partial, folder)  # atomic: another process converting the same file wins or loses whole
        except OSError:
            if not (folder / "config.json").is_file():
                raise
    return folder


def content_hash(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        while chunk := file.read(HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def llama_config(config: DecoderConfig) -> dict:
    """HF's LlamaConfig fields for a decoder of `config`'s shape."""
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": config.vocab_size,
        "hidden_size": config.hidden_size,
        "intermediate_size": config.intermediate_size,
        "num_hidden_layers": config.num_layers,
        "num_attention_heads": config.num_heads,
        "num_key_value_heads": config.num_kv_heads,
        "head_dim": config.head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": config.max_position,
        "rms_norm_eps": config.rms_norm_eps,
        "rope_theta": config.rope_theta,
        "rope_parameters": {"rope_type": "default", "rope_theta": config.rope_theta},
        "tie_word_embeddings": config.tie_word_embeddings,
        "attention_bias": False,
        "mlp_bias": False,
        "torch_dtype": "float32",
    }
