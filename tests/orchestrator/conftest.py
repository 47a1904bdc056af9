"""A tiny-omni pipeline small enough that a whole turn takes a fraction of a second."""

from __future__ import annotations

import pytest

from orchestrator.config import PipelineConfig
from orchestrator.datapath.stage_graph import ChunkSizes, StageGraph
from stages.config import SamplingParams, SchedulerConfig
from stages.models.audio_encoder import AudioEncoderConfig
from stages.models.decoder_config import DecoderConfig
from stages.models.talker import TalkerConfig
from stages.models.tokenizer import TextTokenizer
from stages.models.vocoder import VocoderConfig
from stages.stage_spec import KVSpec, StageSpec

SCHED = SchedulerConfig(max_num_seqs=16, max_num_batched_tokens=256)


def tiny_pipeline(num_blocks: int = 256) -> PipelineConfig:
    vocab = TextTokenizer.default().vocab_size
    thinker = DecoderConfig(vocab_size=vocab, hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2,
                            head_dim=16, intermediate_size=128, max_position=2048)
    talker_decoder = DecoderConfig(vocab_size=65, hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1,
                                   head_dim=16, intermediate_size=64, max_position=4096)
    kv = KVSpec(num_blocks=num_blocks, block_size=16)
    return PipelineConfig(
        encoder=StageSpec("encoder", "encoder", AudioEncoderConfig(hidden_size=32, num_layers=1, num_heads=2,
                                                                   intermediate_size=64, output_size=64), SCHED),
        thinker=StageSpec("thinker", "thinker", thinker, SCHED, kv, seed=1),
        talker=StageSpec("talker", "talker", TalkerConfig(talker_decoder, 64, 64, 2), SCHED, kv, seed=2),
        vocoder=StageSpec("vocoder", "vocoder", VocoderConfig(codec_vocab_size=64, hidden_size=16), SCHED, seed=3),
        thinker_sampling=SamplingParams(temperature=0.8, top_k=20, max_tokens=12),
        talker_sampling=SamplingParams(temperature=0.9, top_k=20),
        graph=StageGraph.omni(thinker_to_talker=ChunkSizes(1, 1), talker_to_vocoder=ChunkSizes(4, 8)),
    )


@pytest.fixture
def pipeline() -> PipelineConfig:
    return tiny_pipeline()
