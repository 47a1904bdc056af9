"""One stage replica: a scheduler, a model runner and the thread that drives them."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from stages.commands import (
    AbortRequest, AddRequest, AppendInput, Command, KVProtectHint, StopGeneration, TurnEndingHint, Wake, queued_batches,
)
from stages.engine_thread import EngineThread
from stages.plan import RunnerOutput, SchedulerPlan, StageOutput
from stages.runners.base import ModelRunner
from stages.scheduler import Scheduler
from stages.step_trace import StepTrace

log = logging.getLogger(__name__)
IDLE_WAIT_S = 0.05
HELD_WAIT_S = 0.005  # ready work all held by the policy: look again this soon unless a command comes


@dataclass(frozen=True)
class StageStatus:
    """A point-in-time view of one engine for metrics and tests."""

    name: str
    num_requests: int
    num_ready: int
    num_preemptions: int
    kv_blocks_used: int
    kv_blocks_free: int
    kv_blocks_peak: int
    kv_block_seconds: float  # device blocks held, integrated over the scheduler's clock
    last_batch_size: int
    num_steps: int  # steps that ran a batch
    num_step_tokens: int  # positions computed in them
    busy_s: float  # wall time spent executing them
    is_idle: bool
    policy_counters: dict[str, int] = field(default_factory=dict)  # cumulative, named by the policy
    kv_counters: dict[str, float] = field(default_factory=dict)  # cumulative tier, transfer and reload figures
    resident_tokens: dict[str, int] = field(default_factory=dict)  # per request id, positions with KV on the device


@dataclass
class EngineStats:
    """Counters of one engine, read by metrics (plain ints and floats)."""

    num_steps: int = 0
    num_tokens: int = 0
    busy_s: float = 0.0
    last_batch_size: int = 0
    last_step_s: float = 0.0
    kv_block_seconds: float = 0.0


class StageEngine(EngineThread):
    """Applies commands, then `plan = schedule(); out = execute(plan); update(plan, out)`.

    Every request lives on the engine's thread: other threads only `submit` commands
    and receive outputs through `emit`, called on the engine thread after each step.
    With `num_threads`, that thread's torch ops use that many intra-op threads (the
    setting is per thread); otherwise the process default. With a `trace`, every step
    that did something is written to it (see StepTrace).
    A command that a request rejects and a runner failure become error outputs for
    the requests concerned; the engine itself keeps running.
    """

    def __init__(self, name: str, scheduler: Scheduler, runner: ModelRunner, emit: Callable[[list[StageOutput]], None],
                 num_threads: int | None = None, trace: StepTrace | None = None) -> None:
        super().__init__(name)
        self.num_threads = num_threads
        self.trace = trace
        self.scheduler = scheduler
        self.runner = runner
        self.emit = emit
        self.stats = EngineStats()
        self._resident_tokens: dict[str, int] = {}  # replaced, never mutated: other threads copy it
        self._held_since: float | None = None

    def step(self) -> list[StageOutput]:
        plan = self.plan_step()
        started = time.perf_counter()
        output = self.execute(plan)
        return self.commit_step(plan, output, time.perf_counter() - started)

    def plan_step(self) -> SchedulerPlan:
        """A step's first part: apply the queued commands and schedule a round."""
        self._integrate_residency()
        self._apply_commands()
        return self.scheduler.schedule()

    def execute(self, plan: SchedulerPlan) -> RunnerOutput:
        """Run the plan's chunks (nothing for an empty plan)."""
        return self._execute(plan) if plan.chunks else RunnerOutput({})

    def commit_step(self, plan: SchedulerPlan, output: RunnerOutput, elapsed: float) -> list[StageOutput]:
        """A step's last part: record it as `elapsed` seconds of execution and commit its output."""
        self._record(plan.num_tokens, len(plan.chunks), elapsed)
        if self.trace is not None:
            self.trace.record(plan.now, elapsed, plan)
        outputs = self.scheduler.update_from_output(plan, output)
        self._resident_tokens = self.scheduler.resident_tokens()
        return outputs

    def _integrate_residency(self) -> None:
        """Add the blocks held since the last call, times the time since, to `kv_block_seconds` (before
        every change: a step's scheduling, a batch of commands)."""
        now = self.scheduler.clock()
        if self._held_since is not None:
            used, _, _ = self.scheduler.residency.block_counts()
            self.stats.kv_block_seconds += used * (now - self._held_since)
        self._held_since = now

    def _execute(self, plan) -> RunnerOutput:
        try:
            return self.runner.execute(plan)
        except Exception as exc:  # a model failure fails its batch, not the engine
            log.exception("stage %s: runner failed", self.name)
            for chunk in plan.chunks:
                self.scheduler.fail(chunk.request, f"{self.name} failed: {exc}")
            plan.chunks.clear()
            return RunnerOutput({})

    def _record(self, num_tokens: int, batch_size: int, elapsed: float) -> None:
        if batch_size:
            self.stats.num_steps += 1
            self.stats.num_tokens += num_tokens
            self.stats.busy_s += elapsed
            self.stats.last_step_s = elapsed
        self.stats.last_batch_size = batch_size

    def _apply_commands(self, wait_s: float = 0.0) -> None:
        for number, batch in enumerate(queued_batches(self._commands, wait_s)):
            if not number:
                self._integrate_residency()  # commands may free blocks: what was held until now counts first
            for command in batch:
                self._apply(command)

    def _apply(self, command: Command) -> None:
        scheduler = self.scheduler
        try:
            if isinstance(command, Wake):
                return
            if isinstance(command, AddRequest):
                scheduler.add(command.request)
                self.runner.attach(command.request)
            elif isinstance(command, AbortRequest):
                scheduler.abort(command.request_id)
            elif isinstance(command, KVProtectHint):
                scheduler.speech_started(command.request_id, command.lead_s)
            elif isinstance(command, TurnEndingHint):
                scheduler.speech_paused(command.request_id, command.lead_s)
            elif command.request_id in scheduler.requests:
                self._apply_to_request(command)
        except Exception as exc:  # a bad command fails its request, never the engine
            if not isinstance(exc, ValueError):
                log.exception("stage %s: command %s failed", self.name, type(command).__name__)
            self.emit([StageOutput(command.request_id, error=str(exc))])

    def _apply_to_request(self, command: AppendInput | StopGeneration) -> None:
        request = self.scheduler.requests[command.request_id]
        if isinstance(command, AppendInput):
            request.append(command.data, command.close)
            return
        request.stop_generation()
        if command.keep_tokens is not None:
            self.scheduler.truncate(command.request_id, command.keep_tokens)

    @property
    def down_reason(self) -> str | None:
        """None while the engine's thread runs (or before it starts), else why it does not."""
        return None if self._thread is None or self._thread.is_alive() or self._stop.is_set() else "its thread stopped"

    def status(self) -> StageStatus:
        """Read from any thread; the numbers may be one step stale."""
        used, free, peak = self.scheduler.residency.block_counts()
        return StageStatus(
            name=self.name,
            num_requests=len(self.scheduler.requests),
            num_ready=self.scheduler.num_ready,
            num_preemptions=self.scheduler.num_preemptions,
            kv_blocks_used=used,
            kv_blocks_free=free,
            kv_blocks_peak=peak,
            kv_block_seconds=self.stats.kv_block_seconds,
            last_batch_size=self.stats.last_batch_size,
            num_steps=self.stats.num_steps,
            num_step_tokens=self.stats.num_tokens,
            busy_s=self.stats.busy_s,
            is_idle=self._is_idle,
            policy_counters=self.scheduler.policy.counters,
            kv_counters=self.scheduler.residency.kv_counters(),
            resident_tokens=dict(self._resident_tokens),
        )

    def run(self) -> None:
        """The engine thread's loop: sleep on the command queue while nothing is ready."""
        if self.num_threads is not None:
            torch.set_num_threads(self.num_threads)
        while not self._stop.is_set():
            if self.mark_idle():
                self._apply_commands(wait_s=IDLE_WAIT_S)
            outputs = self.step()
            if outputs:
                self.emit(outputs)
            elif self.stats.last_batch_size == 0:  # ready work planned nothing: KV transfers or held work
                self._apply_commands(wait_s=IDLE_WAIT_S if self.scheduler.is_waiting_on_kv else HELD_WAIT_S)

    def mark_idle(self) -> bool:
        """True (and idle is recorded) when no command is queued and nothing is ready."""
        with self._idle_lock:
            self._is_idle = self._commands.empty() and self.scheduler.num_ready == 0
            return self._is_idle

    def stop(self) -> None:
        super().stop()
        self.scheduler.residency.close()
        if self.trace is not None:
            self.trace.close()
