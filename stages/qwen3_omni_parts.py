"""The native Qwen3-Omni stages' parts, built from the spec's folder: the model of each stage kind in its runner."""

from __future__ import annotations

import torch

from kvtier import KVCacheManager
from kvtier.config import DTYPES
from stages.grammar import ConstraintCompiler
from stages.models.qwen3_omni.audio_encoder import Qwen3OmniAudio, build_audio_encoder
from stages.models.qwen3_omni.code2wav import Code2Wav, build_code2wav
from stages.models.qwen3_omni.config import MoeDecoderConfig, Qwen3OmniConfig
from stages.models.qwen3_omni.folder import Qwen3OmniFolder
from stages.models.qwen3_omni.talker import Qwen3OmniTalker
from stages.models.qwen3_omni.talker_logits import suppressed_codec_ids
from stages.models.qwen3_omni.thinker import Qwen3OmniThinker
from stages.models.qwen3_omni.weights import SafetensorsFolder
from stages.models.tokenizer import TextTokenizer
from stages.runners.base import ModelRunner
from stages.runners.code2wav import Code2WavRunner
from stages.runners.qwen3_talker import Qwen3TalkerRunner
from stages.runners.qwen3_thinker import Qwen3ThinkerRunner
from stages.runners.utterance import UtteranceRunner
from stages.stage_spec import StageSpec


def decoder(spec: StageSpec) -> MoeDecoderConfig:
    """The sizes of the decoder whose KV the stage keeps (thinker or talker)."""
    config: Qwen3OmniConfig = spec.model
    return config.thinker if spec.kind == "thinker" else config.talker.decoder


def num_parameters(spec: StageSpec) -> int:
    """How many weights the stage's part has, from its config (built on the meta device, which holds no data)."""
    config: Qwen3OmniConfig = spec.model
    parts = {"encoder": lambda: build_audio_encoder(config.audio), "thinker": lambda: Qwen3OmniThinker(config.thinker),
             "talker": lambda: Qwen3OmniTalker(config.talker), "vocoder": lambda: build_code2wav(config.code2wav)}
    with torch.device("meta"):
        module = parts[spec.kind]()
    return sum(parameter.numel() for parameter in module.parameters())


WEIGHTS = {"encoder": ("thinker.audio_tower.",), "thinker": ("thinker.model.", "thinker.lm_head."),
           "talker": ("talker.", "thinker.model.embed_tokens."), "vocoder": ("code2wav.",)}  # what each part reads


def check(spec: StageSpec) -> None:
    """ModelFolderError naming the file and field of the first problem of what the stage reads of its folder
    (the thinker's stage: the tokenizer and chat template too, which the server reads with it)."""
    Qwen3OmniFolder(spec.folder).check(WEIGHTS[spec.kind], text=spec.kind == "thinker")


def thinker_text(spec: StageSpec) -> tuple[TextTokenizer, str]:
    """The folder's tokenizer (its special ids config.json's) and its chat template's default system message."""
    folder = Qwen3OmniFolder(spec.folder)
    return folder.tokenizer(), folder.default_instructions()


def vllm_talker_rows(spec: StageSpec):
    """For the thinker on vLLM: the layer whose hidden states the talker reads, and where its rows come from
    (a TalkerRowSource over the thinker's embedding table, read from the folder)."""
    from stages.vllm_backend.talker_rows import TalkerRowSource

    key = "thinker.model.embed_tokens.weight"
    table = SafetensorsFolder(spec.folder).read([key])[key].to(getattr(torch, spec.vllm.dtype))
    return spec.model.talker.accept_hidden_layer, TalkerRowSource(table)


PARTS = {"encoder": Qwen3OmniAudio, "thinker": Qwen3OmniThinker, "talker": Qwen3OmniTalker, "vocoder": Code2Wav}


def model(spec: StageSpec):
    """The stage's part of the folder, its weights loaded onto the stage's device in its dtype (the folder's on
    the CPU in float32)."""
    dtype = None if (spec.device, spec.dtype) == ("cpu", "float32") else DTYPES[spec.dtype]
    return PARTS[spec.kind].from_folder(spec.folder, device=spec.device, dtype=dtype)


def runner(spec: StageSpec, part, kv: KVCacheManager | None) -> ModelRunner:
    """`part` (see `model`) in the stage's runner; `kv` for a decoder's."""
    config: Qwen3OmniConfig = spec.model
    if spec.kind == "encoder":
        return UtteranceRunner(part)
    if spec.kind == "thinker":
        constraints = ConstraintCompiler(thinker_text(spec)[0])
        return Qwen3ThinkerRunner(part, kv, config.talker.accept_hidden_layer, constraints)
    if spec.kind == "talker":
        return Qwen3TalkerRunner(part, kv, suppressed_codec_ids(config.talker))
    return Code2WavRunner(part)
