"""Input shapes by the stages of a graph's input path (and the model family, where a family hears its own way):
a new shape is a new file and one line here."""

from __future__ import annotations

from typing import TYPE_CHECKING

from orchestrator.datapath.stage_graph import StageGraph
from orchestrator.session.hearing.asr import ASRHearing
from orchestrator.session.hearing.base import Hearing
from orchestrator.session.hearing.encoder import EncoderHearing
from orchestrator.session.hearing.qwen3_omni import Qwen3OmniHearing
from orchestrator.session.hearing.text_only import TextOnly
from stages.kinds import StageKind

if TYPE_CHECKING:
    from orchestrator.config import PipelineConfig

HEARING_SHAPES: dict[tuple[StageKind, ...], type[Hearing]] = {
    (): TextOnly,
    (StageKind.ENCODER,): EncoderHearing,
    (StageKind.ASR,): ASRHearing,
}
FAMILY_HEARING_SHAPES: dict[str, dict[tuple[StageKind, ...], type[Hearing]]] = {
    "qwen3-omni": {(StageKind.ENCODER,): Qwen3OmniHearing},
}


def hearing_shape(graph: StageGraph, family: str = "") -> type[Hearing]:
    """The shape of `graph`'s input, by the stages before the thinker (the model `family`'s own if it has
    one); ValueError for an input path no shape hears through."""
    stages = graph.input_path
    if stages in FAMILY_HEARING_SHAPES.get(family, {}):
        return FAMILY_HEARING_SHAPES[family][stages]
    if stages not in HEARING_SHAPES:
        raise ValueError(f"no input shape hears through {' -> '.join(stages)} -> thinker; "
                         f"known: {', '.join(' -> '.join((*path, 'thinker')) for path in HEARING_SHAPES)}")
    return HEARING_SHAPES[stages]


def hearing_of(config: PipelineConfig) -> Hearing:
    """The numbers of `config`'s input shape."""
    return hearing_shape(config.graph, config.model_family).of(config)
