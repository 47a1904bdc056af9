"""The thinker stage on vLLM: LiveServe's commands drive vLLM's engine, one vLLM request per generation."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import replace

import torch

from stages.commands import AbortRequest, AddRequest, AppendInput, Command, StopGeneration, queued_batches
from stages.engine import HELD_WAIT_S, IDLE_WAIT_S, StageStatus
from stages.engine_thread import EngineThread
from stages.grammar import ConstraintCompiler
from stages.plan import StageOutput
from stages.policies.base import SchedulingPolicy
from stages.requests.thinker import ThinkerRequest, ThinkerStep
from stages.requests.tool_call import ToolCallConstraint
from stages.step_trace import StepTrace
from stages.vllm_backend import vllm_api
from stages.vllm_backend.talker_rows import TalkerRowSource, prompt_embeds
from stages.vllm_backend.vllm_api import TokensOut

log = logging.getLogger(__name__)
NO_HIDDEN = torch.empty(0)  # vLLM hands out tokens, not the hidden states that produced them
SET_NUM_THREADS = torch.set_num_threads  # taken before vLLM's CPU worker replaces it with a no-op


class VllmThinkerEngine(EngineThread):
    """What a StageEngine offers its process (`submit_all`, `start`, `stop`, `status`), over vLLM's engine.

    Each session's context stays a ThinkerRequest here (its tokens, its generation, truncation to what was heard);
    each turn that generates becomes a vLLM request whose prompt is the whole context (prefix caching, when on,
    finds what earlier turns computed). The engine thread applies the queued commands, then steps vLLM while any
    generation runs; every token vLLM gives advances its request and goes out as a ThinkerStep (with no hidden
    state). A generation LiveServe ends (stop token, max_tokens, StopGeneration, AbortRequest) is aborted in vLLM;
    one vLLM ends first (its max_model_len) ends with vLLM's reason. A command a request rejects (a schema that does
    not compile, a turn constrained to a tool call on an engine without `constraints`), and a failed vLLM step,
    become error outputs; the engine keeps running. With `constraints` (the engine built with them: see
    vllm_api.build_engine), a constrained turn is masked inside vLLM by matchers of that compiler (its request
    compiles the constraint when appended, so a bad schema fails the turn, and keeps no matcher). KVProtectHint and
    TurnEndingHint change nothing: vLLM's own cache holds the KV. With a `policy` (the engine built `ordered`), it
    orders vLLM's scheduler every step (vllm_api.PolicyOrdering); when it leaves every generation out, the engine
    looks again HELD_WAIT_S later unless a command comes first. Without one, vLLM's scheduler is its own (fcfs). The
    engine thread computes with the thread count of the thread that builds this, as vLLM set it up: a new thread
    starts from OMP_NUM_THREADS, and vLLM's CPU attention refuses a step whose thread count differs from the one
    vLLM pinned. With a `trace`, each step is a line as a native stage writes it (by LiveServe request id; `ready`:
    the generations started since the step before), at `clock`'s time. With `talker_rows` (a Qwen3-Omni thinker, its
    engine built with a talker layer), turns may carry input embeddings (a mixed prompt), and every step carries the
    rows a native Qwen3-Omni thinker's would: the talker's prompt rows on a generation's first step, each token's
    input embedding.
    """

    def __init__(self, name: str, engine, emit: Callable[[list[StageOutput]], None],
                 policy: SchedulingPolicy | None = None, clock: Callable[[], float] = time.monotonic,
                 trace: StepTrace | None = None, talker_rows: TalkerRowSource | None = None,
                 constraints: ConstraintCompiler | None = None) -> None:
        super().__init__(name)
        self.engine, self.emit, self.policy, self.clock, self.trace = engine, emit, policy, clock, trace
        self.talker_rows, self.constraints = talker_rows, constraints
        self._started: list[str] = []  # generations started since the last step, for the trace
        self.num_threads = torch.get_num_threads()
        self.requests: dict[str, ThinkerRequest] = {}
        self._generations: dict[str, str] = {}  # LiveServe request id -> vLLM id of its running generation
        self._owners: dict[str, str] = {}  # the inverse
        self._num_generations = 0
        self._outputs: list[StageOutput] = []
        self._counts = {"num_steps": 0, "num_step_tokens": 0, "last_batch_size": 0, "kv_blocks_peak": 0,
                        "num_preemptions": 0}
        self._busy_s = 0.0
        self._kv_blocks = (0, 0)

    def run(self) -> None:
        SET_NUM_THREADS(self.num_threads)
        while not self._stop.is_set():
            with self._idle_lock:
                self._is_idle = self._commands.empty() and not self._generations
            self._apply_commands(IDLE_WAIT_S if self._is_idle else 0.0)
            if self._generations:
                self._step()
                if self.policy is not None and vllm_api.last_step(self.engine).num_tokens == 0:
                    self._apply_commands(HELD_WAIT_S)
            self._reap()
            if self._outputs:
                outputs, self._outputs = self._outputs, []
                self.emit(outputs)

    def step(self) -> list[StageOutput]:
        """One round on the caller's thread (tests): apply the queued commands, step vLLM, take the outputs."""
        self._apply_commands(0.0)
        if self._generations:
            self._step()
        self._reap()
        outputs, self._outputs = self._outputs, []
        return outputs

    def _apply_commands(self, wait_s: float) -> None:
        for batch in queued_batches(self._commands, wait_s):
            for command in batch:
                self._apply(command)

    def _apply(self, command: Command) -> None:
        try:
            if isinstance(command, AddRequest):
                self._add(command.request)
            elif isinstance(command, AbortRequest):
                self._end_generation(command.request_id)
                self.requests.pop(command.request_id, None)
            elif isinstance(command, AppendInput) and command.request_id in self.requests:
                self._append(self.requests[command.request_id], command)
            elif isinstance(command, StopGeneration) and command.request_id in self.requests:
                self._end_generation(command.request_id)
                request = self.requests[command.request_id]
                request.stop_generation()
                if command.keep_tokens is not None:
                    request.truncate(command.keep_tokens)
        except ValueError as exc:  # a bad command fails its request, never the engine
            self._outputs.append(StageOutput(command.request_id, error=str(exc)))

    def _add(self, request: ThinkerRequest) -> None:
        if not isinstance(request, ThinkerRequest):
            raise ValueError(f"stage {self.name} (vllm) serves thinker requests, got {type(request).__name__}")
        if request.request_id in self.requests:
            raise ValueError(f"request {request.request_id!r} already exists")
        request.compiler = self.constraints
        self.requests[request.request_id] = request

    def _append(self, request: ThinkerRequest, command: AppendInput) -> None:
        if command.data is not None and command.data.embeds and self.talker_rows is None:
            raise ValueError(f"stage {self.name} (vllm) takes token ids only; input embeddings need the native backend")
        constraint = command.data.constraint if command.data is not None else None
        if constraint is not None and self.constraints is None:
            raise ValueError(f"stage {self.name} (vllm) does not constrain tool calls with the talker's tap "
                             "(speculative decoding) or tensor parallelism")
        request.append(command.data, command.close)  # a constraint's schema is compiled (checked) here
        request.matcher = None  # vLLM's logits processor follows the tokens; one matcher a generation is enough
        if request.is_generating and request.request_id not in self._generations:
            self._start_generation(request, constraint)

    def _start_generation(self, request: ThinkerRequest, constraint: ToolCallConstraint | None) -> None:
        self._num_generations += 1
        vllm_id = f"{request.request_id}#{self._num_generations}"
        embeds, rows = None, None
        if self.talker_rows is not None:
            embeds = prompt_embeds(request, self.talker_rows.embed_table.shape[1])
            rows = self.talker_rows.start(request) if request.talker_context is not None else None
        vllm_api.add(self.engine, vllm_id, list(request.token_ids), request.sampling, request.stop_ids,
                     request.request_id, embeds, rows, constraint)
        request.num_computed = request.num_known
        self._generations[request.request_id], self._owners[vllm_id] = vllm_id, request.request_id
        self._started.append(request.request_id)

    def _end_generation(self, request_id: str) -> None:
        vllm_id = self._generations.pop(request_id, None)
        if vllm_id is not None:
            del self._owners[vllm_id]
            vllm_api.abort(self.engine, [vllm_id])

    def _step(self) -> None:
        now, started = self.clock(), time.perf_counter()
        try:
            produced = vllm_api.step(self.engine)
        except Exception as exc:  # a failed step fails the generations it ran, not the engine
            log.exception("stage %s: vLLM step failed", self.name)
            for request_id in list(self._generations):
                self._end_generation(request_id)
                self.requests.pop(request_id).stop_generation()
                self._outputs.append(StageOutput(request_id, is_finished=True, error=f"{self.name} failed: {exc}"))
            return
        self._record(produced, now, time.perf_counter() - started)
        if self.talker_rows is not None:
            for owner, positions, rows in vllm_api.take_rows():
                if owner in self.requests:
                    self.talker_rows.deliver(self.requests[owner], positions, rows)
        for out in produced:
            if out.request_id in self._owners:
                request = self.requests[self._owners[out.request_id]]
                try:
                    self._commit(request, out)
                except ValueError as exc:  # e.g. a talker row never came: that request fails, not the engine
                    self._end_generation(request.request_id)
                    request.stop_generation()
                    self._outputs.append(StageOutput(request.request_id, error=str(exc)))

    def _commit(self, request: ThinkerRequest, out: TokensOut) -> None:
        for i, token_id in enumerate(out.token_ids):
            row = NO_HIDDEN if self.talker_rows is None else self.talker_rows.token_row(token_id)
            step: ThinkerStep = request.advance(1, (token_id, row))
            if step.finish_reason is None and out.finish_reason is not None and i == len(out.token_ids) - 1:
                request.stop_generation()
                step = replace(step, finish_reason=out.finish_reason)
            self._outputs.append(StageOutput(request.request_id, step))
            if step.finish_reason is not None:
                self._end_generation(request.request_id)
                return
        if out.finish_reason is not None and request.is_generating:  # vLLM ended it without a token
            request.stop_generation()
            self._end_generation(request.request_id)

    def _reap(self) -> None:
        for request in [r for r in self.requests.values() if r.is_finished]:
            del self.requests[request.request_id]
            self._outputs.append(StageOutput(request.request_id, is_finished=True))

    def _record(self, produced: list[TokensOut], now: float, elapsed: float) -> None:
        if self.trace is not None:
            self._trace_step(now, elapsed)
        self._started = []
        counts = self._counts
        counts["num_steps"] += 1
        counts["num_step_tokens"] += sum(len(out.token_ids) for out in produced)
        counts["last_batch_size"] = len(produced)
        self._busy_s += elapsed
        self._kv_blocks = vllm_api.kv_block_counts(self.engine)
        counts["kv_blocks_peak"] = max(counts["kv_blocks_peak"], self._kv_blocks[0])
        counts["num_preemptions"] = vllm_api.num_preemptions(self.engine)

    def _trace_step(self, now: float, elapsed: float) -> None:
        step = vllm_api.last_step(self.engine)
        self.trace.write(now, elapsed, self._started, list(step.scheduled.items()), list(step.preempted))

    def stop(self) -> None:
        super().stop()
        if self.trace is not None:
            self.trace.close()

    def status(self) -> StageStatus:
        """Read from any thread; the numbers may be one step stale. KV figures are vLLM's blocks."""
        used, free = self._kv_blocks
        counts = dict(self._counts)
        return StageStatus(
            name=self.name, num_requests=len(self.requests), num_ready=len(self._generations),
            num_preemptions=counts["num_preemptions"],
            kv_blocks_used=used, kv_blocks_free=free, kv_blocks_peak=counts["kv_blocks_peak"], kv_block_seconds=0.0,
            last_batch_size=counts["last_batch_size"], num_steps=counts["num_steps"],
            num_step_tokens=counts["num_step_tokens"], busy_s=self._busy_s, is_idle=self._is_idle,
            policy_counters=self.policy.counters if self.policy is not None else {},
        )

    @property
    def down_reason(self) -> str | None:
        return None if self._thread is None or self._thread.is_alive() or self._stop.is_set() else "its thread stopped"
