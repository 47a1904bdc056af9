"""A stage engine driven on the event loop: a step takes the cost model's time on the loop's clock."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from lab.sim.link_copier import LinkCopier
from lab.sim.runner import SimulatedRunner
from stages.commands import Command
from stages.engine import HELD_WAIT_S, IDLE_WAIT_S, StageEngine, StageStatus


class VirtualEngine:
    """Runs `engine` (over a SimulatedRunner) as a task of the running loop, not a thread: the loop of
    StageEngine.run, where executing a plan is a sleep of the runner's `last_step_s` while holding
    `device` (the stages on one device take turns). Its host tier's transfers (inline mode) run one
    chunk after another, each a sleep of the link's time. Meant for a loop whose clock is virtual,
    where sleeping costs no wall time. A stage handle: `submit`, `submit_all`, `status`, `down_reason`.
    """

    def __init__(self, engine: StageEngine, device: asyncio.Lock) -> None:
        if not isinstance(engine.runner, SimulatedRunner):
            raise TypeError(f"stage {engine.name}: a VirtualEngine drives a SimulatedRunner")
        self.engine, self.device = engine, device
        self.down_reason: str | None = None
        self._woken = asyncio.Event()
        self._transfers_due = asyncio.Event()
        self.tasks: list[asyncio.Task] = []

    def wake(self) -> None:
        self._woken.set()

    def submit(self, command: Command) -> None:
        self.submit_all((command,))

    def submit_all(self, commands: Sequence[Command]) -> None:
        self.engine.submit_all(commands)
        self._woken.set()

    def status(self) -> StageStatus:
        return self.engine.status()

    def start(self) -> None:
        self.tasks = [asyncio.ensure_future(self._run())]
        kv = self.engine.scheduler.kv
        worker = getattr(kv.tier, "worker", None) if kv is not None else None
        if worker is not None:
            self.tasks.append(asyncio.ensure_future(self._transfer(worker)))

    def stop(self) -> None:
        for task in self.tasks:
            task.cancel()
        self.engine.scheduler.residency.close()
        if self.engine.trace is not None:
            self.engine.trace.close()

    async def _run(self) -> None:
        engine = self.engine
        while True:
            if engine.mark_idle():
                await self._wait(IDLE_WAIT_S)
            async with self.device:
                plan = engine.plan_step()
                output = engine.execute(plan)
                step_s = engine.runner.last_step_s if plan.chunks else 0.0
                if step_s:
                    await asyncio.sleep(step_s)
                outputs = engine.commit_step(plan, output, step_s)
            self._transfers_due.set()
            if outputs:
                engine.emit(outputs)
            elif not plan.chunks:
                await self._wait(IDLE_WAIT_S if engine.scheduler.is_waiting_on_kv else HELD_WAIT_S)

    async def _wait(self, timeout_s: float) -> None:
        """Until a command (or a finished transfer) comes, at most `timeout_s`."""
        try:
            await asyncio.wait_for(self._woken.wait(), timeout_s)
        except asyncio.TimeoutError:
            pass
        self._woken.clear()

    async def _transfer(self, worker) -> None:
        copier: LinkCopier = worker.copier
        while True:
            num_blocks = worker.next_chunk_blocks()
            if not num_blocks:
                await self._transfers_due.wait()
                self._transfers_due.clear()
                continue
            await asyncio.sleep(copier.seconds(num_blocks))
            worker.run_chunk()
