"""Stage replicas as Ray actors: Ray places them and tells when one dies; commands, outputs and status
travel as with stage processes, over a connection of their own between the server and each actor (a Unix
socket on the server's node, TCP to another node), never through Ray's object store. Measured on the
project's 2-core machine, a hidden state's round trip: 46 us over today's pipe, 46 us over a Unix socket,
48-51 us over TCP on loopback.

Every GPU node the config uses is one placement group of one bundle per GPU (STRICT_PACK, so on one
node), holding the whole node: a replica goes in the bundle of its first GPU, taking its memory fraction
of it (or all of it), and sees the GPUs the config gives it (the actor sets CUDA_VISIBLE_DEVICES from
`devices` over what Ray set, before anything starts CUDA). Replicas on the CPU run on the server's node;
node 0's group is asked for there. Each device of the server's node (its CPU, each GPU) has a SharedDevice
board in shared memory, on which every stage computing there reports (a replica spanning several GPUs on
each of theirs), so that the urgency policy yields across them, as with stage processes. A stage on another
node reads playback times in its own monotonic clock, not the server's: its urgency figures are off by the
clocks' difference (not corrected yet).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from multiprocessing.connection import Client

import ray
from ray.exceptions import GetTimeoutError, RayActorError
from ray.util.placement_group import PlacementGroup, placement_group, placement_group_table, remove_placement_group
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy, PlacementGroupSchedulingStrategy

from orchestrator.placement.deployment import StageDeployment
from orchestrator.placement.device_boards import SharedBoards
from orchestrator.placement.plan import PlanError
from orchestrator.placement.ray_layout import RaySettings, ReplicaSlot, lay_out
from orchestrator.placement.ray_stage_actor import StageActor
from orchestrator.placement.stage_handle import START_TIMEOUT_S
from orchestrator.placement.stage_launcher import StageLauncher
from orchestrator.placement.stage_process import StageProcessArgs
from orchestrator.placement.wire import Channel
from stages.shared_device import Board

log = logging.getLogger(__name__)
DEATH_CHECK_S = 10.0
RemoteStageActor = ray.remote(StageActor)


class RayLauncher(StageLauncher):
    """Starts each stage replica as a StageActor where `deployments` put it, in the Ray cluster of
    `settings` (joined, or started here and shut down at `close`). A stage missing from `deployments`
    runs one replica on the CPU. A replica that dies is started again by ProcessPlacement, in its slot."""

    def __init__(self, settings: RaySettings, deployments: Sequence[StageDeployment] = ()) -> None:
        self.settings, self.deployments = settings, tuple(deployments)
        self.stage_args: dict[str, StageProcessArgs] = {}  # what each stage's actor serves it with
        self._slots: dict[str, ReplicaSlot] = {}
        self._groups: dict[int, PlacementGroup] = {}
        self._boards = SharedBoards()
        self._starting: dict[str, tuple] = {}
        self._started_ray = False
        self._server_node = ""
        self.node_ids: dict[str, str] = {}  # the Ray node each stage's actor runs on

    def prepare(self, specs, torch_threads, log_level):
        self._connect()
        self._server_node = ray.get_runtime_context().get_node_id()
        gpus_per_node, num_nodes = gpu_nodes()
        try:
            self._slots = lay_out(self.deployments, gpus_per_node, num_nodes)
        except PlanError as exc:
            raise ValueError(f"stages.{exc.stage}.{exc.field}: {exc} (the Ray cluster has {num_nodes} GPU nodes "
                             f"of {gpus_per_node} GPUs)") from None
        on_gpus = {name: slot for name, slot in self._slots.items() if slot.node is not None}
        for node in sorted({slot.node for slot in on_gpus.values()}):
            self._groups[node] = self._reserve(node, gpus_per_node)
        if on_gpus:
            placed = ", ".join(f"{name} ({slot.node}: {slot.cuda_visible_devices})" for name, slot in on_gpus.items())
            log.warning("placed on GPUs (node: GPUs): %s; this build's engines compute on the CPU there", placed)
        boards = self._share_boards([spec.name for spec in specs])
        gpus = {spec.name: self._slots.get(spec.name, ReplicaSlot()).gpus for spec in specs}
        self.stage_args = {spec.name: StageProcessArgs(spec, boards[spec.name], torch_threads, log_level,
                                                       gpus[spec.name]) for spec in specs}
        self._starting = {spec.name: self._start_actor(spec.name) for spec in specs}  # all at once; spawn waits

    def _share_boards(self, names: list[str]) -> dict[str, tuple[Board, ...]]:
        """Each stage's SharedDevice boards and its slot on each: every device of the server's node (the CPU,
        each GPU) has a board in shared memory, with a slot for every stage computing there (on each of its
        GPUs, for a replica spanning several); a stage on another node has one of its own."""
        here = {}
        for name in names:
            slot = self._slots.get(name, ReplicaSlot())
            if slot.node is None or self._node_of_group(slot.node) == self._server_node:
                here[name] = slot.devices
        boards = {name: (([False], 0),) for name in names}
        boards.update(self._boards.seat(here))
        return boards

    def _node_of_group(self, node: int) -> str:
        return placement_group_table(self._groups[node])["bundles_to_node_id"][0]

    def _connect(self) -> None:
        if ray.is_initialized():
            return
        os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
        sizes = {} if self.settings.address is not None else {"num_cpus": self.settings.num_cpus,
                                                              "num_gpus": self.settings.num_gpus}
        if self.settings.address is None:  # Ray's workers run at nice 15 unless told: under load, 2x slower steps
            sizes["_system_config"] = {"worker_niceness": 0}
        ray.init(address=self.settings.address, _node_ip_address=self.settings.node_ip_address,
                 include_dashboard=False, configure_logging=False, **sizes)
        self._started_ray = True

    def _reserve(self, node: int, gpus_per_node: int) -> PlacementGroup:
        target = self._server_node if node == 0 else None
        group = placement_group([{"GPU": 1}] * gpus_per_node, strategy="STRICT_PACK", _soft_target_node_id=target)
        if not group.wait(START_TIMEOUT_S):
            remove_placement_group(group)
            raise TimeoutError(f"Ray found no node with {gpus_per_node} free GPUs for the config's node {node} "
                               f"within {START_TIMEOUT_S:g} s")
        return group

    def spawn(self, name):
        actor, listening, authkey = self._starting.pop(name, None) or self._start_actor(name)
        try:
            address, pid, self.node_ids[name], visible = ray.get(listening, timeout=START_TIMEOUT_S)
        except GetTimeoutError:
            ray.kill(actor)
            raise TimeoutError(f"stage {name!r}: Ray did not start its actor within {START_TIMEOUT_S:g} s") from None
        return RayStage(actor, pid, visible), Channel(Client(address, authkey=authkey))

    def _start_actor(self, name: str) -> tuple:
        """Ask Ray for the stage's actor, listening for the server with a fresh key; it starts meanwhile."""
        slot = self._slots.get(name, ReplicaSlot())
        actor = RemoteStageActor.options(num_cpus=0, num_gpus=slot.num_gpus, scheduling_strategy=self._strategy(slot)
                                         ).remote(self.stage_args[name].log_level, self.stage_args[name].environment)
        authkey = os.urandom(32)
        return actor, actor.serve.remote(self.stage_args[name], authkey, self._server_node), authkey

    def _strategy(self, slot: ReplicaSlot):
        if slot.node is None:
            return NodeAffinitySchedulingStrategy(self._server_node, soft=False)
        return PlacementGroupSchedulingStrategy(self._groups[slot.node], placement_group_bundle_index=slot.bundle)

    def close(self) -> None:
        for actor, *_ in self._starting.values():  # a start that failed part way
            ray.kill(actor)
        self._starting.clear()
        self._boards.close()
        if not ray.is_initialized():
            return
        for group in self._groups.values():
            remove_placement_group(group)
        self._groups.clear()
        if self._started_ray:
            ray.shutdown()


def gpu_nodes() -> tuple[int, int]:
    """GPUs a node, and how many alive nodes have that many, in the cluster joined."""
    counts = [int(node["Resources"].get("GPU", 0)) for node in ray.nodes() if node["Alive"]]
    most = max(counts, default=0)
    return most, sum(1 for count in counts if count == most and most > 0)


class RayStage:
    """A StageWorker over a StageActor, whose process sees `visible_devices` (CUDA_VISIBLE_DEVICES)."""

    def __init__(self, actor, pid: int, visible_devices: str) -> None:
        self.actor, self.pid, self.visible_devices = actor, pid, visible_devices
        self._ended = False

    def join(self, timeout_s: float) -> None:
        try:
            stopped = ray.get(self.actor.wait_stopped.remote(timeout_s), timeout=timeout_s + DEATH_CHECK_S)
        except (RayActorError, GetTimeoutError):
            stopped = True
        if stopped:
            self.terminate()

    def is_alive(self) -> bool:
        return not self._ended

    def terminate(self) -> None:
        ray.kill(self.actor, no_restart=True)
        self._ended = True

    def exit_reason(self) -> str:
        try:
            ray.get(self.actor.wait_stopped.remote(0), timeout=DEATH_CHECK_S)
        except (RayActorError, GetTimeoutError) as exc:
            self._ended = True
            return f"its Ray actor died ({type(exc).__name__})"
        self.terminate()
        return "its connection closed; its Ray actor was ended"
