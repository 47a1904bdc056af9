"""One edge of a reply's path: what its source stage produced, chunked into its target stage's request."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from orchestrator.datapath.chunk_stream import ChunkStream
from orchestrator.datapath.request_id import RequestId
from orchestrator.datapath.stage_bus import OutputHandler, StageBus
from orchestrator.datapath.stage_graph import Edge
from stages.commands import AbortRequest, AddRequest, AppendInput, StopGeneration
from stages.kinds import Payload
from stages.requests.base import StageRequest

PACKERS: dict[Payload, Callable[[list], Any]] = {
    Payload.HIDDEN_STATES: torch.stack,  # [tokens, hidden]
    Payload.CODEC_FRAMES: list,
    Payload.TEXT: "".join,
}


class ReplyHop:
    """The target stage's request of one reply, fed along `edge` in its chunks (see ChunkStream): a new
    request `start` adds, or the id of one already there. A `resident` request (a session's, living on after
    the reply) is only stopped by `abort`, never dropped."""

    def __init__(self, edge: Edge, request: StageRequest | RequestId, bus: StageBus, resident: bool = False) -> None:
        self.edge, self.bus, self.resident = edge, bus, resident
        self.request_id: RequestId = request if isinstance(request, RequestId) else request.request_id
        self.stream: ChunkStream = ChunkStream(edge.chunks)
        self._pack = PACKERS[edge.carries]
        self._request = None if isinstance(request, RequestId) else request

    @property
    def kind(self):
        return self.edge.target

    def start(self, owner: OutputHandler) -> None:
        self.bus.own(self.request_id, owner)
        if self._request is not None:
            self.bus.submit(self.kind, AddRequest(self._request))

    def push(self, items: list) -> None:
        for chunk in self.stream.push(items):
            self.bus.submit(self.kind, AppendInput(self.request_id, self._pack(chunk)))

    def close(self) -> None:
        """The source is done: what is buffered goes, and the request's input ends."""
        rest = self.stream.close()
        self.bus.submit(self.kind, AppendInput(self.request_id, self._pack(rest) if rest else None, close=True))

    def abort(self) -> None:
        command = StopGeneration(self.request_id) if self.resident else AbortRequest(self.request_id)
        self.bus.submit(self.kind, command)
