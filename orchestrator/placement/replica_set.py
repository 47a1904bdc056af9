"""Several replicas of one stage behind one StageHandle: each request to one replica, a session's resident
context always to the same one."""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import fields, replace

from orchestrator.placement.base import StageHandle
from stages.commands import AbortRequest, AddRequest, Command
from stages.engine import StageStatus
from stages.plan import StageOutput


class ReplicaSet:
    """A StageHandle over `replicas` of one stage.

    A new request goes to the replica that serves, holds the fewest live requests, has the most free KV
    blocks and has been given the fewest requests, in that order; every later command for its id goes
    to the same replica, until the request finishes, fails or is aborted. With `sticky` (the stage
    holding sessions' resident contexts), the choice is made once per session (the request id's
    `session`) and holds for all its requests while any lives there. A replica that is down fails its
    own requests (its handle does); the set is down only when every replica is. `track_outputs` must
    see every output of the replicas before the orchestrator does.
    """

    def __init__(self, name: str, replicas: Sequence[StageHandle], sticky: bool) -> None:
        self.name, self.replicas, self.sticky = name, tuple(replicas), sticky
        self._replica_of: dict[str, int] = {}  # live request id -> replica
        self._session_of: dict[str, str] = {}  # live request id -> its session (sticky only)
        self._session_replica: dict[str, int] = {}
        self._session_live: dict[str, int] = defaultdict(int)
        self._live = [0] * len(self.replicas)
        self._given = [0] * len(self.replicas)
        self._lock = threading.Lock()

    @property
    def down_reason(self) -> str | None:
        reasons = [replica.down_reason for replica in self.replicas]
        return None if None in reasons else "; ".join(reasons)

    def replica_of(self, request_id: str) -> int | None:
        """Which replica holds a live request (None: none)."""
        return self._replica_of.get(request_id)

    def submit(self, command: Command) -> None:
        self.submit_all((command,))

    def submit_all(self, commands: Sequence[Command]) -> None:
        batches: dict[int, list[Command]] = defaultdict(list)
        with self._lock:
            for command in commands:
                for replica in self._route(command):
                    batches[replica].append(command)
        for replica, batch in sorted(batches.items()):
            self.replicas[replica].submit_all(batch)

    def _route(self, command: Command) -> Sequence[int]:
        request_id = command.request_id
        if not request_id:  # a wake-up: every replica
            return range(len(self.replicas))
        if isinstance(command, AddRequest) and request_id not in self._replica_of:
            return (self._place(request_id),)
        replica = self._replica_of.get(request_id)
        if replica is None:
            replica = self._session_replica.get(self._session(request_id), 0)
        if isinstance(command, AbortRequest):
            self._release(request_id)
        return (replica,)

    def _place(self, request_id: str) -> int:
        session = self._session(request_id)
        replica = self._session_replica.get(session) if self.sticky else None
        if replica is None:
            replica = min(range(len(self.replicas)), key=self._load)
        if self.sticky:
            self._session_replica[session] = replica
            self._session_live[session] += 1
            self._session_of[request_id] = session
        self._replica_of[request_id] = replica
        self._live[replica] += 1
        self._given[replica] += 1
        return replica

    def _load(self, replica: int) -> tuple:
        handle = self.replicas[replica]
        if handle.down_reason is not None:
            return (1,)
        return (0, self._live[replica], -handle.status().kv_blocks_free, self._given[replica], replica)

    def _session(self, request_id: str) -> str:
        return getattr(request_id, "session", request_id)

    def _release(self, request_id: str) -> None:
        replica = self._replica_of.pop(request_id, None)
        if replica is None:
            return
        self._live[replica] -= 1
        session = self._session_of.pop(request_id, None)
        if session is not None:
            self._session_live[session] -= 1
            if not self._session_live[session]:
                del self._session_live[session], self._session_replica[session]

    def track_outputs(self, outputs: Sequence[StageOutput]) -> None:
        """Let go of the requests that finished or failed in `outputs`."""
        with self._lock:
            for output in outputs:
                if output.is_finished or output.error is not None:
                    self._release(output.request_id)

    def status(self) -> StageStatus:
        """The serving replicas' statuses summed under the stage's name (idle only when all are)."""
        statuses = [replica.status() for replica in self.replicas if replica.down_reason is None]
        return replace(merge_statuses(statuses), name=self.name)


def merge_statuses(statuses: Sequence[StageStatus]) -> StageStatus:
    merged = statuses[0]
    for status in statuses[1:]:
        changes = {}
        for field in fields(StageStatus):
            mine, theirs = getattr(merged, field.name), getattr(status, field.name)
            if isinstance(mine, dict):
                changes[field.name] = {key: mine.get(key, 0) + theirs.get(key, 0) for key in mine.keys() | theirs}
            elif isinstance(mine, bool):
                changes[field.name] = mine and theirs
            elif isinstance(mine, (int, float)):
                changes[field.name] = mine + theirs
        merged = replace(merged, **changes)
    return merged
