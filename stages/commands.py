"""Commands other threads send to a stage engine; the engine thread applies them."""

from __future__ import annotations

import queue
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from stages.requests.base import StageRequest


@dataclass(frozen=True)
class AddRequest:
    request: StageRequest

    @property
    def request_id(self) -> str:
        return self.request.request_id


@dataclass(frozen=True)
class AppendInput:
    """More input for a request; `close` says none will follow."""

    request_id: str
    data: Any = None
    close: bool = False


@dataclass(frozen=True)
class AbortRequest:
    """Drop a request and free its KV."""

    request_id: str


@dataclass(frozen=True)
class StopGeneration:
    """End a resident request's current generation; keep only `keep_tokens` of context if set."""

    request_id: str
    keep_tokens: int | None = None


@dataclass(frozen=True)
class KVProtectHint:
    """A resident request is needed again in about `lead_s` (its user started speaking).

    The stage keeps the request's KV on the device and, when preload is on at speech start,
    starts bringing offloaded KV back in the background.
    """

    request_id: str
    lead_s: float


@dataclass(frozen=True)
class TurnEndingHint:
    """A request's input may be complete in `lead_s`, unless more comes (its user went quiet).

    When preload is on at pauses, the stage starts bringing offloaded KV back then; an ASR
    request transcribes what it has at once.
    """

    request_id: str
    lead_s: float


@dataclass(frozen=True)
class Wake:
    """Nothing to apply: wakes an idle engine (a KV transfer finished)."""

    request_id: str = ""


Command = AddRequest | AppendInput | AbortRequest | StopGeneration | KVProtectHint | TurnEndingHint | Wake


def queued_batches(commands: queue.SimpleQueue, wait_s: float = 0.0) -> Iterator[list[Command]]:
    """The batches of commands queued on an engine's `commands`, in order, until none is left; the first
    waited for up to `wait_s` seconds (0: not at all)."""
    try:
        batch = commands.get(timeout=wait_s) if wait_s else commands.get_nowait()
    except queue.Empty:
        return
    while True:
        yield batch
        try:
            batch = commands.get_nowait()
        except queue.Empty:
            return
