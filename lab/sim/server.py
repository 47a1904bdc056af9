"""The real RealtimeServer on a virtual-time loop over simulated stages, reached by in-memory connections."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from lab.prometheus import parse_metrics
from lab.server_target import ServedConfig
from lab.sim.memory_socket import ClientEnd, socket_pair
from lab.sim.placement import SimulatedPlacement
from lab.sim.server_loop import ServerLoop
from lab.sim.spec import SimSpec
from liveserve.config.document import Override
from liveserve.config.loader import LiveServeConfig
from liveserve.realtime.server import RealtimeServer
from orchestrator.placement.replicated import ReplicatedPlacement

SIM_URL = "sim://liveserve/v1/realtime"


@dataclass(frozen=True)
class SimulatedConfig:
    """The served config of a simulation: the file, the spec's overrides, the run's, then the KV pools the
    spec sizes to its devices' memory (those neither the spec's nor the run's overrides size)."""

    served: ServedConfig
    spec: SimSpec

    @classmethod
    def load(cls, config, overrides: Sequence[Override], spec: SimSpec) -> SimulatedConfig:
        first = ServedConfig.load(config, (*spec.overrides, *overrides))
        given = {override.key for override in (*spec.overrides, *overrides)}
        kv = tuple(o for o in spec.kv_overrides(first.config.pipeline) if o.key not in given)
        return cls(ServedConfig.load(config, (*spec.overrides, *overrides, *kv)), spec)

    @property
    def config(self) -> LiveServeConfig:
        return self.served.config

    def describe(self) -> dict[str, Any]:
        return self.served.describe()

    def simulated(self, wall_s: float, server_loop: dict[str, Any]) -> dict[str, Any]:
        """The result's `simulated` field: what was simulated, on what, resting on which calibration, and what the
        server's loop was given and how long its work waited (`ServerLoop.figures`)."""
        spec = self.spec
        return {"spec": spec.name, "calibration": spec.calibration, "devices": [d.name for d in spec.devices],
                "stages": {kind: {"model": s.model.name, "devices": list(s.devices), "params": s.model.total_params}
                           for kind, s in spec.stages.items()},
                "server_loop": server_loop, "wall_s": round(wall_s, 3)}


class SimulatedServer:
    """Must be made and used on a running VirtualTimeLoop. A stage the spec places on several devices
    runs as that many replicas behind the real ReplicatedPlacement (session-sticky thinker routing); the
    spec's replicas, not the served config's, are what run. The server's own loop is priced as the spec's
    `server` says (`server_loop`): the clients' messages, the stages' outputs, the events sent and the VAD
    batches (on their thread, which the server's VadBatcher is given) wait for it."""

    def __init__(self, sim: SimulatedConfig) -> None:
        loop = asyncio.get_running_loop()
        self.server_loop = ServerLoop(sim.spec.server)
        self.placement = SimulatedPlacement(sim.spec.stages, sim.spec.devices, sim.spec.machine_seed,
                                            self.server_loop)
        replicas = {kind: stage.replicas for kind, stage in sim.spec.stages.items() if stage.replicas > 1}
        placement = ReplicatedPlacement(self.placement, replicas) if replicas else self.placement
        self.server = RealtimeServer(sim.config, placement=placement, clock=loop.time)
        self.server.orch.vad_batcher.run = self.server_loop.score_vad
        self.clock = loop.time
        self._tasks: set[asyncio.Task] = set()
        self._watch: asyncio.Task | None = None

    async def start(self) -> None:
        await self.server.orch.start()
        self._watch = asyncio.ensure_future(self.server.watch())

    async def stop(self) -> None:
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._watch.cancel()
        await asyncio.gather(self._watch, return_exceptions=True)
        await self.server.orch.stop()
        await asyncio.gather(*self.placement.tasks, return_exceptions=True)

    async def connect(self, url: str) -> ClientEnd:
        """A new connection, served as RealtimeServer serves a websocket."""
        server_end, client_end = socket_pair(self.server_loop)
        task = asyncio.ensure_future(self.server.serve_connection(server_end))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return client_end

    def metrics(self) -> dict[str, float]:
        return parse_metrics(self.server.metrics.render().decode())
