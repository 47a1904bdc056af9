"""A Hugging Face model folder the deployer has on disk, for a thinker on vLLM: config.json (checked against
the shape the config declares, which the plan sizes memory with), safetensors weights (vLLM loads them),
tokenizer.json and the chat template (LiveServe tokenizes and lays out the context, in ChatML). A folder is
read where it is: nothing is downloaded."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from stages.models.chatml import chatml_default_instructions
from stages.models.decoder_config import DecoderConfig
from stages.models.tokenizer import TextTokenizer

SHAPE_KEYS = {  # DecoderConfig field: its key in config.json
    "vocab_size": "vocab_size", "hidden_size": "hidden_size", "num_layers": "num_hidden_layers",
    "num_heads": "num_attention_heads", "num_kv_heads": "num_key_value_heads", "head_dim": "head_dim",
    "intermediate_size": "intermediate_size",
}


class ModelFolderError(ValueError):
    """A model folder that is missing, or not one the thinker can run; the message names the folder."""


@dataclass(frozen=True)
class ModelFolder:
    path: Path

    def check(self, shape: DecoderConfig) -> None:
        """Everything a stage and the server read, without loading weights: the shape, weights, tokenizer and
        a ChatML template."""
        self.check_shape(shape)
        if not any(self.path.glob("*.safetensors")):
            raise ModelFolderError(f"{self.path} has no *.safetensors weights")
        self.tokenizer()
        self.default_instructions()

    def check_shape(self, shape: DecoderConfig) -> None:
        """ModelFolderError unless the folder has a config.json of `shape`'s sizes."""
        config = self.config()
        found = {"num_key_value_heads": config.get("num_attention_heads"),
                 "head_dim": config.get("hidden_size", 0) // max(1, config.get("num_attention_heads", 1)), **config}
        for field, key in SHAPE_KEYS.items():
            if found.get(key) != getattr(shape, field):
                raise ModelFolderError(f"{self.path / 'config.json'} has {key} {found.get(key)!r}, the config's "
                                       f"model.thinker.{field} is {getattr(shape, field)}")

    def config(self) -> dict:
        if not self.path.is_dir():
            raise ModelFolderError(f"no folder at {self.path} (the deployer puts the model's Hugging Face folder "
                                   "there: config.json, *.safetensors, tokenizer.json)")
        file = self.path / "config.json"
        if not file.is_file():
            raise ModelFolderError(f"{self.path} has no config.json (not a Hugging Face model folder)")
        try:
            return json.loads(file.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ModelFolderError(f"{file}: not JSON ({exc})") from None

    def tokenizer(self) -> TextTokenizer:
        try:
            return TextTokenizer.from_file(self.path / "tokenizer.json")
        except (FileNotFoundError, ValueError) as exc:
            raise ModelFolderError(str(exc).splitlines()[0]) from None

    def default_instructions(self) -> str:
        """The system message the model's chat template adds to a conversation without one ("": none);
        ModelFolderError unless the template lays a conversation out in ChatML."""
        try:
            return chatml_default_instructions(self.chat_template())
        except ValueError as exc:
            raise ModelFolderError(f"{self.path}: {exc}") from None

    def chat_template(self) -> str:
        """The folder's Jinja chat template (chat_template.jinja, or tokenizer_config.json's)."""
        jinja, settings = self.path / "chat_template.jinja", self.path / "tokenizer_config.json"
        if jinja.is_file():
            return jinja.read_text(encoding="utf-8")
        template = json.loads(settings.read_text(encoding="utf-8")).get("chat_template") if settings.is_file() else None
        if not isinstance(template, str):
            raise ModelFolderError(f"{self.path}: no chat template (chat_template.jinja, or chat_template in "
                                   "tokenizer_config.json); LiveServe lays out ChatML")
        return template
