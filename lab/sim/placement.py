"""Engines simulated on the event loop: the real schedulers, KV managers and policies, priced steps."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from lab.sim.cost_model import DeviceSpec
from lab.sim.engine import SimulatedStage, build_simulated_engine
from lab.sim.server_loop import ServerLoop
from lab.sim.virtual_engine import VirtualEngine
from orchestrator.placement.base import Placement
from stages.shared_device import SharedDevice


class SimulatedPlacement(Placement):
    """Each stage spec a VirtualEngine (see lab.sim) on the running loop, priced as `stages[kind]` says;
    the k-th spec of a kind (its replica k, as ReplicatedPlacement expands them) runs on device
    `stages[kind].devices[k]`. The engines on one device share a SharedDevice board and take turns (each
    its own turn where the device's `stages_take_turns` is off).
    Each engine's step noise is drawn from `machine_seed` and its spec's name. Their outputs reach the sink once
    `server_loop` has routed them.
    `start` must run on the loop's thread (a loop whose executor runs inline, as the virtual-time loop's).
    """

    def __init__(self, stages: Mapping[str, SimulatedStage], devices: tuple[DeviceSpec, ...],
                 machine_seed: int = 0, server_loop: ServerLoop | None = None) -> None:
        self.stages, self.devices, self.machine_seed = dict(stages), devices, machine_seed
        self.server_loop = server_loop or ServerLoop()
        self.engines: dict[str, VirtualEngine] = {}
        self.tasks: list[asyncio.Task] = []

    def start(self, specs, sink, clock, view=None):
        asyncio.get_running_loop()  # a RuntimeError off the loop's thread: the tasks would never run
        sink = self.server_loop.routing(sink)
        locks = [asyncio.Lock() for _ in self.devices]
        boards = [SharedDevice() for _ in self.devices]
        started: dict[str, int] = {}
        for spec in specs:
            device = self._device(spec.kind, started.get(spec.kind, 0))
            started[spec.kind] = started.get(spec.kind, 0) + 1
            woken: list[VirtualEngine] = []
            stage = self.stages[spec.kind]
            engine = build_simulated_engine(
                spec, stage.model, stage.priced_on(self.devices[device]),
                lambda outputs, kind=spec.kind: sink(kind, outputs), clock, view, boards[device],
                lambda: woken[0].wake(), stage.jitter, f"{self.machine_seed}/{spec.name}")
            lock = locks[device] if self.devices[device].stages_take_turns else asyncio.Lock()
            woken.append(VirtualEngine(engine, lock))
            self.engines[spec.name] = woken[0]
            woken[0].start()
        return dict(self.engines)

    def _device(self, kind: str, replica: int) -> int:
        if kind not in self.stages:
            raise ValueError(f"stage {kind!r} has no simulated model (simulated: {', '.join(self.stages)})")
        devices = self.stages[kind].devices
        if replica >= len(devices):
            raise ValueError(f"stage {kind!r}: replica {replica} has no device (the spec places {len(devices)})")
        return devices[replica]

    def stop(self) -> None:
        """Cancel every engine's tasks (the loop finishes cancelling them; `tasks` lists them)."""
        for engine in self.engines.values():
            engine.stop()
            self.tasks.extend(engine.tasks)
        self.engines.clear()
