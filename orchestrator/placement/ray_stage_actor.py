"""The Ray actor hosting one stage replica's engine, reached by the server over one connection of its own."""

from __future__ import annotations

import logging
import os
import threading
from multiprocessing.connection import Listener

import ray

from orchestrator.placement.stage_process import PROCESS_PREFIX, StageProcessArgs, name_process, run_stage
from orchestrator.placement.wire import Channel

log = logging.getLogger(__name__)


class StageActor:
    """Serves one stage engine (stage_process's protocol) to the one server that connects.

    It sees the GPUs its `environment` gives it (StageProcessArgs.environment), whatever Ray assigned. `serve`
    listens, on a Unix socket when the server runs on this node, else on TCP at this node's address;
    the engine is built and served on a thread once the server has connected (with `authkey`). The
    actor lives until it is killed: `wait_stopped` tells when the engine has stopped (told to, or its
    connection closed).
    """

    def __init__(self, log_level: int, environment: dict[str, str]) -> None:
        os.environ.update(environment)  # the config's GPUs, over Ray's; before CUDA starts
        logging.basicConfig(level=log_level, format="%(levelname)s:%(name)s:%(message)s")
        self._serving: threading.Thread | None = None
        if (niceness := os.nice(0)) > 0:
            log.warning("stage actor runs at niceness %d (Ray's worker_niceness): under load its steps slow down; "
                        "start Ray with RAY_worker_niceness=0", niceness)

    def serve(self, args: StageProcessArgs, authkey: bytes, server_node_id: str) -> tuple[object, int, str, str]:
        """Listen for the server; the address, this process's pid, its Ray node and the GPUs it sees."""
        node_id = ray.get_runtime_context().get_node_id()
        if node_id == server_node_id:
            listener = Listener(family="AF_UNIX", authkey=authkey)
        else:
            listener = Listener((ray.util.get_node_ip_address(), 0), "AF_INET", authkey=authkey)
        self._serving = threading.Thread(target=self._accept_then_serve, args=(listener, args),
                                         name=f"{PROCESS_PREFIX}{args.spec.name}", daemon=True)
        self._serving.start()
        return listener.address, os.getpid(), node_id, os.environ["CUDA_VISIBLE_DEVICES"]

    def _accept_then_serve(self, listener: Listener, args: StageProcessArgs) -> None:
        name_process(f"{PROCESS_PREFIX}{args.spec.name}")
        with listener:
            connection = listener.accept()
        run_stage(args, Channel(connection))

    def wait_stopped(self, timeout_s: float) -> bool:
        """Whether the engine has stopped, waiting up to `timeout_s` for it."""
        self._serving.join(timeout_s)
        return not self._serving.is_alive()
