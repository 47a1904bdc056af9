"""Ray placement, run only inside a network namespace where nothing but loopback is up (made by
test_ray_placement.py): every Ray start here is pinned to 127.0.0.1, with logical GPUs."""

from __future__ import annotations

import asyncio
import ipaddress
import os
import socket
from pathlib import Path

import numpy as np
import pytest
import ray
from ray.cluster_utils import Cluster

from orchestrator.placement.base import Placement
from orchestrator.placement.deployment import StageDeployment
from orchestrator.placement.processes import ProcessPlacement
from orchestrator.placement.ray_launcher import RayLauncher
from orchestrator.placement.ray_layout import LOOPBACK, RaySettings
from orchestrator.session.events import AudioDelta, TextDelta
from tests.orchestrator.placement.test_process_placement import spoken_turn
from tests.orchestrator.placement.test_replicas import kill_one_replica_mid_turn, turns_on_two_replicas

if [name for _, name in socket.if_nameindex()] != ["lo"]:
    raise RuntimeError("refusing to start Ray outside a network namespace with only loopback up")
os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
LOGICAL = {"num_cpus": 2, "num_gpus": 4, "include_dashboard": False, "_node_ip_address": LOOPBACK,
           "_system_config": {"worker_niceness": 0}}
SHARING_GPU_1 = (StageDeployment("thinker", devices=((1, 2),), memory_fraction=0.5),  # Ray would show it one GPU
                 StageDeployment("talker", devices=((1,),), memory_fraction=0.5))


def listening_addresses() -> set[str]:
    """The local addresses of every listening TCP socket in this network namespace (IPv4-mapped as IPv4)."""
    addresses = set()
    for table in ("tcp", "tcp6"):
        for row in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            local, state = row.split()[1], row.split()[3]
            if state == "0A":  # LISTEN
                addresses.add(str(decode_address(local.split(":")[0])))
    return addresses


def decode_address(hex_address: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """/proc/net/tcp* print an address as 32-bit words, each in host (little-endian) order."""
    raw = b"".join(bytes.fromhex(hex_address[i:i + 8])[::-1] for i in range(0, len(hex_address), 8))
    address = ipaddress.ip_address(raw)
    return getattr(address, "ipv4_mapped", None) or address


class SeenAtStop(Placement):
    """Another placement, noting just before it stops the GPUs each stage process sees and its niceness, and
    where this namespace's sockets listen."""

    def __init__(self, inner: Placement) -> None:
        self.inner = inner

    def start(self, *args):
        self.handles = self.inner.start(*args)
        return self.handles

    def stop(self) -> None:
        self.visible_devices = {name: handle.process.visible_devices for name, handle in self.handles.items()}
        self.reported_devices = {name: handle.visible_devices for name, handle in self.handles.items()}
        self.niceness = {os.getpriority(os.PRIO_PROCESS, handle.process.pid) for handle in self.handles.values()}
        self.listening = listening_addresses()
        self.inner.stop()


def test_a_turn_on_ray_actors_equals_the_same_turn_on_stage_processes_and_ray_listens_on_loopback_only(
        pipeline, speech_16k):
    launcher = RayLauncher(RaySettings(num_cpus=2, num_gpus=4), SHARING_GPU_1)  # starts Ray, stops it after
    on_ray = SeenAtStop(ProcessPlacement(1, launcher))
    turns = [asyncio.run(spoken_turn(pipeline, speech_16k, placement))
             for placement in (on_ray, ProcessPlacement(1))]
    for events, done, requests, blocks in turns:
        assert done.status == "incomplete" and done.usage.text_tokens == 8
        assert requests == [0, 0, 0, 0] and blocks == [0, 0, 0, 0]
    text = [[e.text for e in events if isinstance(e, TextDelta)] for events, *_ in turns]
    audio = [np.concatenate([e.pcm for e in events if isinstance(e, AudioDelta)]) for events, *_ in turns]
    assert text[0] == text[1]
    assert audio[0].shape == audio[1].shape and np.allclose(audio[0], audio[1], atol=1e-4)
    # the config's devices, not Ray's choice: thinker and talker share GPU 1, the others see none
    assert on_ray.visible_devices == {"encoder": "", "thinker": "1,2", "talker": "1", "vocoder": ""}
    assert on_ray.reported_devices == on_ray.visible_devices  # what each engine's process reports at its start
    assert on_ray.niceness == {os.nice(0)}  # as the server's, not Ray's nice 15 for workers
    boards = {name: [id(slots) for slots, _ in args.boards] for name, args in launcher.stage_args.items()}
    assert boards["encoder"] == boards["vocoder"] != boards["talker"]  # the CPU's board; GPU 1's
    assert len(boards["thinker"]) == 2 and boards["thinker"][:1] == boards["talker"]  # GPU 1's and GPU 2's
    assert on_ray.listening and on_ray.listening <= {LOOPBACK}  # Ray's and the stages' sockets alike
    assert not ray.is_initialized()  # the launcher shut down the Ray it started


@pytest.fixture(scope="module")
def ray_node():
    ray.init(**LOGICAL)
    yield
    ray.shutdown()


def test_two_thinker_replicas_on_two_gpus_keep_each_session_on_its_replica(pipeline, ray_node):
    deployments = (StageDeployment("thinker", replicas=2, devices=((0,), (2,))), StageDeployment("vocoder", replicas=2))
    homes, results, vocoder_steps = asyncio.run(
        turns_on_two_replicas(pipeline, 2, ProcessPlacement(1, RayLauncher(RaySettings(), deployments))))
    assert all(done.error is None and done.usage.audio_samples > 0 for _, done in results)
    assert all(len(home) == 1 for home in homes[0]) and homes[0] == homes[1]
    assert sorted(home[0] for home in homes[0]) == [0, 0, 1, 1] and all(steps > 0 for steps in vocoder_steps)
    groups = ray.util.placement_group_table().values()
    assert [group["state"] for group in groups] == ["REMOVED"]  # node 0's group, given back at stop


def test_a_killed_thinker_actor_fails_only_its_sessions(pipeline, ray_node):
    deployments = (StageDeployment("thinker", replicas=2, devices=1),)
    victim, survivor, (lost, kept) = asyncio.run(
        kill_one_replica_mid_turn(pipeline, ProcessPlacement(1, RayLauncher(RaySettings(), deployments))))
    assert survivor == 1 - victim
    assert lost.status == "failed" and f"stage thinker-{victim} is down: its Ray actor died" in lost.error
    assert kept.status == "incomplete" and kept.error is None and kept.usage.text_tokens == 400


def test_thinker_replicas_on_two_nodes_serve_their_sessions_over_loopback(pipeline):
    ray.shutdown()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "num_gpus": 2, "node_ip_address": LOOPBACK,
                                                            "include_dashboard": False})
    try:
        cluster.add_node(num_cpus=1, num_gpus=2, node_ip_address=LOOPBACK)
        deployments = (StageDeployment("thinker", replicas=2, devices=((0,), (2,))),)  # GPU 2: node 1's first
        launcher = RayLauncher(RaySettings(address=cluster.address), deployments)
        seen = SeenAtStop(ProcessPlacement(1, launcher))
        homes, results, _ = asyncio.run(turns_on_two_replicas(pipeline, 2, seen))
        assert all(done.error is None for _, done in results) and homes[0] == homes[1]
        assert seen.listening <= {LOOPBACK}  # both nodes' Ray, and node 1's stage connected over TCP
        assert launcher.node_ids["thinker-0"] != launcher.node_ids["thinker-1"]
        assert launcher.node_ids["thinker-0"] == launcher.node_ids["encoder"]  # node 0 is the server's
    finally:
        cluster.shutdown()
