"""A windowed duplex stream with an SSM history branch on the real two-layer thinker: what leaves the window
reaches the output; chunked equals whole; KV and state moved to the host and back equal resident; a neighbour
that needs the pool moves the stream to the host (never to a recomputation, which would lose its history);
memory stays flat however long the stream runs."""


import pytest
import torch

from stages.config import WindowSpec
from stages.models.decoder_config import DecoderConfig
from stages.models.llama import LlamaForCausalLM, add_history
from stages.models.weights import init_deterministic
from stages.runners.decoder import ThinkerRunner
from tests.stages.test_scheduler_window import WindowFakeRunner
from tests.stages.test_window_recompute import BLOCK, HIDDEN, LAYERS, WINDOW, StreamRun, neighbour_request

HISTORY = WindowSpec(tokens=WINDOW.tokens, sinks=WINDOW.sinks, history="ssm")
STATE_BLOCKS = 2  # 16 state rows of 2 x 16 channels, 2 x 4 rows a block


@pytest.fixture(scope="module")
def model() -> LlamaForCausalLM:
    config = DecoderConfig(vocab_size=300, hidden_size=HIDDEN, num_layers=LAYERS, num_heads=4, num_kv_heads=2,
                           head_dim=16, intermediate_size=128, max_position=64)
    model = LlamaForCausalLM(config)
    init_deterministic(model, seed=3)
    add_history(model, seed=3)
    with torch.no_grad():  # attention and the history outweigh the residual stream: both show downstream
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.mul_(8)
            layer.self_attn.history.c_proj.weight.mul_(20)
    return model


def run(model, window: WindowSpec = HISTORY, num_blocks: int = 64, frames: int = 40, **kwargs) -> StreamRun:
    stream = StreamRun(num_blocks, lambda kv: ThinkerRunner(model, kv, window), window, **kwargs)
    stream.feed(frames)
    return stream


def hiddens(stream: StreamRun) -> torch.Tensor:
    return torch.stack([step.hidden for step in stream.steps])


def same_answers(a: StreamRun, b: StreamRun, atol: float) -> None:
    assert [s.token_id for s in a.steps] == [s.token_id for s in b.steps]
    torch.testing.assert_close(hiddens(a), hiddens(b), atol=atol, rtol=0)


def test_what_leaves_the_window_reaches_the_output(model):
    with_history, without = run(model), run(model, WINDOW)
    gap = (hiddens(with_history) - hiddens(without)).abs().amax(dim=1)
    first_read = 2  # answers before any position left the window: identical
    assert gap[:first_read].max() == 0 and gap[first_read:].min() > 1e-3


def test_chunked_equals_whole(model):
    same_answers(run(model, max_num_batched_tokens=2), run(model, max_num_batched_tokens=16), atol=1e-5)


def test_kv_and_state_moved_to_the_host_between_frames_and_back_equal_resident(model):
    resident = run(model)
    moved = StreamRun(64, lambda kv: ThinkerRunner(model, kv, HISTORY), HISTORY, host_blocks=64)
    kv = moved.kv
    for _ in range(40):
        moved.feed(1)
        kv.tier.worker.run_all()  # the dormant stream's write-back
        kv.tier.poll()
        held = kv.num_blocks_held("s")
        assert kv.tier.evict(held) and kv.num_offloaded_blocks("s") == held >= STATE_BLOCKS + 1
    assert moved.scheduler.num_preemptions == 0 and kv.tier.stats["evictions"] >= 40 * (STATE_BLOCKS + 1)
    same_answers(moved, resident, atol=0)


def test_a_neighbour_moves_the_stream_to_the_host_instead_of_preempting_it(model):
    roomy = run(model, frames=60)
    roomy.feed(40)
    cramped = run(model, num_blocks=9, frames=60, host_blocks=32)
    cramped.neighbour(prompt_len=40)  # its history state, window and chunk need the stream's blocks
    assert cramped.scheduler.num_preemptions == 0 and cramped.kv.tier.stats["evictions"] > 0
    cramped.feed(40)
    same_answers(cramped, roomy, atol=0)


def test_without_a_host_tier_a_neighbour_waits_rather_than_preempt_the_stream(model):
    cramped = run(model, num_blocks=9, frames=10)
    held = cramped.kv.num_blocks_held("s")
    cramped.scheduler.add(neighbour_request(cramped.clock.t, prompt_len=40))
    for _ in range(20):
        cramped.step()
    assert cramped.scheduler.num_preemptions == 0 and cramped.kv.num_blocks_held("s") == held
    neighbour = cramped.scheduler.requests["n"]
    assert neighbour.num_computed < 40 and cramped.kv.num_free_blocks < STATE_BLOCKS + 3  # stuck for room


def test_memory_stays_flat_however_long_the_stream_runs(model):
    bound = STATE_BLOCKS + 1 + (WINDOW.tokens + 8) // BLOCK + 1  # state, sink block, window and a chunk
    fake = StreamRun(64, lambda kv: WindowFakeRunner(kv, HISTORY), HISTORY)
    for _ in range(40):
        fake.feed(25)
        assert fake.kv.num_blocks_held("s") <= bound
    real = run(model, frames=10)
    held = []
    for _ in range(60):
        real.feed(1)
        held.append(real.kv.num_blocks_held("s"))
    assert max(held) <= bound and real.kv.peak_used_blocks <= bound
