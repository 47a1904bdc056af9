"""Engines simulated on the event loop: the real schedulers, KV managers and policies, priced steps."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from orchestrator.placement import Placement
from stages.shared_device import SharedDevice
from stages.sim.cost_model import DeviceSpec
from stages.sim.engine import SimulatedStage, build_simulated_engine
from stages.sim.virtual_engine import VirtualEngine


class SimulatedPlacement(Placement):
    """Each stage a VirtualEngine (see stages.sim) on the running loop, priced as `stages[kind]` says on
    `devices[stages[kind].device]`; the stages on one device take turns and share a SharedDevice board.
    `start` must run on the loop's thread (a loop whose executor runs inline, as the virtual-time loop's).
    """

    def __init__(self, stages: Mapping[str, SimulatedStage], devices: tuple[DeviceSpec, ...]) -> None:
        self.stages, self.devices = dict(stages), devices
        self.engines: dict[str, VirtualEngine] = {}
        self.tasks: list[asyncio.Task] = []

    def start(self, specs, sink, clock, view=None):
        asyncio.get_running_loop()  # a RuntimeError off the loop's thread: the tasks would never run
        locks = [asyncio.Lock() for _ in self.devices]
        boards = [SharedDevice() for _ in self.devices]
        for spec in specs:
            if spec.kind not in self.stages:
                raise ValueError(f"stage {spec.kind!r} has no simulated model (simulated: {', '.join(self.stages)})")
            stage = self.stages[spec.kind]
            woken: list[VirtualEngine] = []
            engine = build_simulated_engine(
                spec, stage.model, self.devices[stage.device], lambda outputs, kind=spec.kind: sink(kind, outputs),
                clock, view, boards[stage.device], lambda: woken[0].wake())
            woken.append(VirtualEngine(engine, locks[stage.device]))
            self.engines[spec.kind] = woken[0]
            woken[0].start()
        return dict(self.engines)

    def stop(self) -> None:
        """Cancel every engine's tasks (the loop finishes cancelling them; `tasks` lists them)."""
        for engine in self.engines.values():
            engine.stop()
            self.tasks.extend(engine.tasks)
        self.engines.clear()
