"""A windowed duplex stream keeps bounded inputs, and a preempted one recomputes its sinks and recent past only,
rebuilding the KV it held: the same tokens (fake runner and the real two-layer thinker) as when never preempted."""

import math

import torch

from kvtier import HostTierConfig, KVCacheManager, KVPoolConfig
from stages.config import SamplingParams, SchedulerConfig, WindowSpec
from stages.kv_residency import KVResidency
from stages.models.decoder_config import DecoderConfig
from stages.models.llama import LlamaForCausalLM
from stages.models.weights import init_deterministic
from stages.plan import RunnerOutput
from stages.requests import DuplexFrame, DuplexRequest, ThinkerRequest, TurnInput
from stages.runners.decoder import ThinkerRunner
from stages.scheduler import Scheduler
from tests.stages.scheduler_harness import FakeClock
from tests.stages.test_scheduler_window import WindowFakeRunner

BLOCK, LAYERS, HIDDEN = 4, 2, 64
WINDOW = WindowSpec(tokens=6, sinks=3)
HORIZON = WINDOW.tokens * LAYERS  # inputs a recomputation reads besides the sink blocks
FRAME_TOKENS, ANSWER_TOKENS = 3, 2


def make_kv(num_blocks: int, host_blocks: int | None = None, clock: FakeClock | None = None) -> KVCacheManager:
    """A pool of `num_blocks`, with an LRU host tier of `host_blocks` behind it (copies run when asked)."""
    config = KVPoolConfig(num_blocks=num_blocks, num_layers=LAYERS, num_kv_heads=2, head_dim=16, block_size=BLOCK)
    if host_blocks is None:
        return KVCacheManager(config)
    return KVCacheManager(config, HostTierConfig(host_blocks), "lru", clock, transfer_mode="inline")


def stream_request() -> DuplexRequest:
    sampling = SamplingParams(temperature=0.0, max_tokens=ANSWER_TOKENS)
    return DuplexRequest("s", 0.0, frozenset(), math.inf, sampling, prefix=[1, 2, 3, 4, 5])


def frame(index: int) -> DuplexFrame:
    gen = torch.Generator().manual_seed(index)
    return DuplexFrame(index, [index % 50 + 7] * FRAME_TOKENS, torch.randn(FRAME_TOKENS, HIDDEN, generator=gen))


class StreamRun:
    """One windowed stream on a fake clock, fed a frame whenever it has answered the last; optionally a
    neighbour arrives while the stream is idle and takes the pool, preempting it."""

    def __init__(self, num_blocks: int, runner_for, window: WindowSpec = WINDOW, host_blocks: int | None = None,
                 max_num_batched_tokens: int = 8) -> None:
        self.clock = FakeClock()
        self.kv = make_kv(num_blocks, host_blocks, self.clock)
        self.scheduler = Scheduler(SchedulerConfig(max_num_batched_tokens=max_num_batched_tokens), self.kv,
                                   self.clock, residency=KVResidency(self.kv, window=window))
        self.runner = runner_for(self.kv)
        self.stream = stream_request()
        self.scheduler.add(self.stream)
        self.steps, self.planned, self.frames = [], [], 0

    def step(self) -> None:
        self.clock.t += 0.01
        if self.kv.tier.worker is not None:
            self.kv.tier.worker.run_all()
        plan = self.scheduler.schedule()
        self.scheduler.check_integrity()
        self.planned += [(c.start, c.end) for c in plan.chunks if c.request is self.stream]
        out = self.runner.execute(plan) if plan.chunks else RunnerOutput({})
        for output in self.scheduler.update_from_output(plan, out):
            assert output.error is None, output.error
            if output.request_id == "s" and output.payload is not None:
                self.steps.append(output.payload)
        self.scheduler.check_integrity()

    def feed(self, num_frames: int) -> None:
        """Run until `num_frames` more frames are answered."""
        goal = self.frames + num_frames
        while self.frames < goal or self.stream.is_generating:
            if not self.stream.is_generating and self.frames < goal:
                self.stream.append(frame(self.frames))
                self.frames += 1
            self.step()

    def neighbour(self, prompt_len: int) -> None:
        """A request that needs the pool the stream holds arrives, runs to its end and leaves."""
        self.scheduler.add(neighbour_request(self.clock.t, prompt_len))
        while "n" in self.scheduler.requests:
            self.step()


def neighbour_request(now: float, prompt_len: int) -> ThinkerRequest:
    """Request "n": a prompt of `prompt_len` tokens answered with one."""
    other = ThinkerRequest("n", now, frozenset(), max_position=math.inf)
    other.append(TurnInput([9] * prompt_len, sampling=SamplingParams(temperature=0.0, max_tokens=1)), close=True)
    return other


def kept_positions(request: DuplexRequest) -> int:
    return len(request.token_ids) - len(request.forgotten)


def test_a_windowed_stream_keeps_its_sinks_and_recent_inputs_however_long_it_runs():
    run = StreamRun(num_blocks=64, runner_for=lambda kv: WindowFakeRunner(kv, WINDOW))
    sink_end = BLOCK  # the sink block: positions 0-3
    bound = sink_end + HORIZON + BLOCK + FRAME_TOKENS + ANSWER_TOKENS
    for _ in range(40):
        run.feed(25)
        stream = run.stream
        assert kept_positions(stream) <= bound  # whatever the frames so far
        assert sum(len(rows) for _, rows in stream.embed_spans) <= bound
        assert run.kv.num_blocks_held("s") <= 2 + (WINDOW.tokens + 8) // BLOCK + 1
    assert run.frames == 1000 and len(run.stream.token_ids) == 5 + 1000 * (FRAME_TOKENS + ANSWER_TOKENS)
    assert run.stream.forgotten.start == sink_end and run.scheduler.num_preemptions == 0
    assert list(run.stream.token_ids[:sink_end]) == [1, 2, 3, 4]  # the sinks stay readable


def preempted_and_not(runner_for) -> tuple[StreamRun, StreamRun, int]:
    """The same stream twice: in a roomy pool, and in one where a neighbour preempts it after 60 frames."""
    runs = {}
    for name, num_blocks in (("roomy", 64), ("cramped", 7)):
        run = runs[name] = StreamRun(num_blocks, runner_for)
        run.feed(60)
        if name == "cramped":
            at = run.stream.num_computed
            run.neighbour(prompt_len=40)  # its window and chunk need more than the pool leaves beside the stream
            assert run.scheduler.num_preemptions == 1 and run.stream.num_computed == 0
        run.feed(40)
    return runs["roomy"], runs["cramped"], at


def test_a_preempted_stream_recomputes_its_sink_blocks_and_recent_past_only_and_answers_the_same():
    roomy, cramped, at = preempted_and_not(lambda kv: WindowFakeRunner(kv, WINDOW))
    resumed = cramped.planned[cramped.planned.index((0, BLOCK)):]  # from the recomputation on
    recomputed = sum(min(end, at) - start for start, end in resumed if start < at)
    assert resumed[0] == (0, BLOCK) and resumed[1][0] == (at - HORIZON) // BLOCK * BLOCK
    assert recomputed <= BLOCK + HORIZON + BLOCK  # not the 300 positions it ran
    assert [s.token_id for s in cramped.steps] == [s.token_id for s in roomy.steps]


def test_the_real_thinker_rebuilds_the_same_window_kv_after_a_preemption():
    """Two layers: the window's KV at the top layer reads the layer below over the last 2 x W positions.
    Recomputing from W positions back only, the first hidden state after the resumption is off by ~1e-3;
    from 2 x W, by float rounding (~5e-7)."""
    config = DecoderConfig(vocab_size=300, hidden_size=HIDDEN, num_layers=LAYERS, num_heads=4, num_kv_heads=2,
                           head_dim=16, intermediate_size=128, max_position=64)
    model = LlamaForCausalLM(config)
    init_deterministic(model, seed=3)
    with torch.no_grad():  # attention outweighs the residual stream: what a position saw shows downstream
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.mul_(8)
    roomy, cramped, _ = preempted_and_not(lambda kv: ThinkerRunner(model, kv, WINDOW))
    assert [s.token_id for s in cramped.steps] == [s.token_id for s in roomy.steps]
    torch.testing.assert_close(torch.stack([s.hidden for s in cramped.steps]),
                               torch.stack([s.hidden for s in roomy.steps]), atol=1e-5, rtol=0)
