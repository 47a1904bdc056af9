"""A Qwen3-Omni model folder the deployer has on disk, checked before any stage starts: config.json, the
safetensors shards every part loads, the tokenizer (agreeing with config.json's ids) and the chat template
(laying a conversation out as LiveServe's context does). Nothing is downloaded."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

from jinja2.sandbox import ImmutableSandboxedEnvironment

from stages.models.model_folder import ModelFolder, ModelFolderError
from stages.models.qwen3_omni.audio_encoder import PREPROCESSOR
from stages.models.qwen3_omni.config import Qwen3OmniConfig
from stages.models.qwen3_omni.weights import SafetensorsFolder
from stages.models.tokenizer import TextTokenizer

PARTS = ("thinker.model.", "thinker.lm_head.", "thinker.audio_tower.", "talker.", "code2wav.")
ARCHITECTURE = "Qwen3OmniMoeForConditionalGeneration"
DEFAULT_HOP = 160


@dataclass(frozen=True)
class Qwen3OmniFolder:
    path: Path

    def config(self) -> Qwen3OmniConfig:
        """config.json's sizes and ids; ModelFolderError naming the file and field that do not fit."""
        data = ModelFolder(self.path).config()
        architectures = data.get("architectures") or [data.get("model_type")]
        if ARCHITECTURE not in architectures and data.get("model_type") != "qwen3_omni_moe":
            raise ModelFolderError(f"{self.path / 'config.json'}: architectures is {architectures!r}, not "
                                   f"[{ARCHITECTURE!r}] (a Qwen3-Omni folder)")
        try:
            config = Qwen3OmniConfig.from_json(data, str(self.path / "config.json"))
        except ValueError as exc:
            raise ModelFolderError(str(exc)) from None
        return replace(config, audio=replace(config.audio, hop_length=self._hop_length()))

    def _hop_length(self) -> int:
        """The feature extractor's hop (preprocessor_config.json's; Qwen3-Omni's 160 without one)."""
        file = self.path / PREPROCESSOR
        if not file.is_file():
            return DEFAULT_HOP
        try:
            hop = json.loads(file.read_text(encoding="utf-8")).get("hop_length", DEFAULT_HOP)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ModelFolderError(f"{file}: not JSON ({exc})") from None
        if not isinstance(hop, int) or isinstance(hop, bool) or hop <= 0:
            raise ModelFolderError(f"{file}: hop_length must be a positive integer, got {hop!r}")
        return hop

    def check(self, parts: tuple[str, ...] = PARTS, text: bool = True) -> Qwen3OmniConfig:
        """What the stages and the server read, without loading weights: config.json, every weights file the
        index names, the tensors of `parts` (their headers), and with `text` the tokenizer and chat template
        (ModelFolderError: the first problem, naming its file)."""
        config = self.config()
        self._check_weights(parts)
        if text:
            self.tokenizer(config)
        return config

    def _check_weights(self, parts: tuple[str, ...]) -> None:
        """Every file the index names is there, and each of `parts` has tensors (their headers read)."""
        try:
            weights = SafetensorsFolder(self.path)
        except (FileNotFoundError, ValueError, OSError) as exc:
            raise ModelFolderError(f"{self.path}: {exc}") from None
        missing = sorted({file.name for file in weights.file_of.values() if not file.is_file()})
        if missing:
            raise ModelFolderError(f"{self.path}: weights file {missing[0]} is missing (the index names it)")
        for prefix in parts:
            keys = weights.keys(prefix)
            if not keys:
                raise ModelFolderError(f"{self.path / weights.where_missing()}: no tensors under {prefix!r}")
            try:
                weights.shapes(keys)
            except (ValueError, OSError) as exc:
                raise ModelFolderError(f"{self.path}: {exc}") from None

    def tokenizer(self, config: Qwen3OmniConfig | None = None) -> TextTokenizer:
        """The folder's tokenizer, its special ids config.json's (the audio end is the token the chat
        template puts after the audio placeholder); ModelFolderError where the tokenizer, the template and
        config.json disagree."""
        config = config or self.config()
        tokens = config.tokens
        probe = ModelFolder(self.path).tokenizer()
        user, audio = self._render(probe, [{"role": "user", "content": "U"}]), self._render(
            probe, [{"role": "user", "content": [{"type": "audio", "audio": "clip.wav"}]}])
        if user[:2] != [tokens.im_start_token_id, tokens.user_token_id] or tokens.assistant_token_id not in user:
            raise self._disagree("im_start_token_id, user_token_id, assistant_token_id", user)
        start = audio.index(tokens.audio_start_token_id) if tokens.audio_start_token_id in audio else -1
        if start < 0 or audio[start + 1] != tokens.audio_token_id:
            raise self._disagree("thinker_config.audio_start_token_id, thinker_config.audio_token_id", audio)
        special_ids = {"<|im_start|>": tokens.im_start_token_id, "<|im_end|>": tokens.im_end_token_id,
                       "<|audio_start|>": tokens.audio_start_token_id, "<|audio_pad|>": tokens.audio_token_id,
                       "<|audio_end|>": audio[start + 2]}
        if max(special_ids.values()) >= probe.vocab_size or probe.vocab_size > config.thinker.vocab_size:
            raise ModelFolderError(f"{self.path / 'tokenizer.json'}: {probe.vocab_size} tokens do not fit "
                                   f"config.json's ids and vocab_size {config.thinker.vocab_size}")
        return TextTokenizer.from_file(self.path / "tokenizer.json", special_ids)

    def default_instructions(self) -> str:
        """The system message the chat template adds to a conversation without one ("": none); ModelFolderError
        unless it lays a conversation out in ChatML, as LiveServe's context does."""
        return ModelFolder(self.path).default_instructions()

    def _render(self, tokenizer: TextTokenizer, messages: list[dict]) -> list[int]:
        """The chat template's prompt for `messages` with the generation prompt, tokenized."""
        template = ModelFolder(self.path).chat_template()
        environment = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        try:
            text = environment.from_string(template).render(messages=messages, add_generation_prompt=True)
        except Exception as exc:
            raise ModelFolderError(f"{self.path}: the chat template does not render ({exc})") from None
        return tokenizer.encode(text)

    def _disagree(self, fields: str, ids: list[int]) -> ModelFolderError:
        return ModelFolderError(f"{self.path / 'config.json'}: {fields} disagree with what tokenizer.json makes "
                                f"of the chat template's prompt ({ids[:12]}...)")
