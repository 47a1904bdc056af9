"""The scheduler's manager of its stage's KV: what fits, room, reservations, where each request's KV is."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable

from stages.requests.base import StageRequest


class Residency(ABC):
    """Everything a stage's scheduler, batch planner and preemptor do with KV goes through this.

    KVResidency manages a stage with KV, NoKVResidency one without (encoder, vocoder):
    the scheduler never asks which. Contract:
    - Each round: `poll(now)` completes transfers; `sweep(dormant, now)` is given the
      admitted requests that wait for a whole new unit of work; `woke(request)` is told
      of each request that just got work; `follow_holds(resume_at, requests, now)` of
      the requests the policy holds for a while and when each resumes.
    - Planning a chunk of `request` ending at position `end`: `never_fits` gives the
      message the request fails with if it could never fit (else None);
      `ensure_resident(request, now)`, asked before an admitted request is planned,
      brings its KV back to the device without preempting: 0 when it is all there,
      None while a load is on its way, else how many blocks are missing to start one
      (KV intact on the host never recomputes: a recomputation would need the same
      room); `shortfall(request, end, growth, now)` makes room without preempting and
      says how many blocks are still missing (0: it fits; None: it waits), a WAITING
      request leaving `growth` blocks for the admitted ones still to plan; then
      `reserve(request, end)` (positions the request forgot and resumes past take no
      KV: see StageRequest).
    - `committed(request, now)` follows every committed chunk; `free(request_id)`
      gives back all of a request's KV (preempted or removed); `truncate(request, n)`
      keeps the first n positions of a request and of its KV, or raises ValueError
      and changes nothing; `recomputable(request)` is False for a request whose KV
      recomputing would not rebuild (a history state): it is never preempted.
    - Reading: `blocks_held(request_id)`, `resident_tokens(request_ids)` (positions
      with KV on the device), `is_stranded(request_id)` (KV on the host and no load of it
      on its way: it cannot run until room is made), `blocks_to_grow(request)` (the device
      blocks its next position takes: 0, or 1 where it starts a block), `is_waiting_on_kv`
      (transfers in flight), `block_counts()`
      (device blocks used, free, peak) and `kv_counters()` (tier, transfer and reload
      figures; empty without a host tier).
    - `speech_started`/`speech_paused(request_id, lead_s, now)`: the user of a known
      request started speaking, or went quiet, `lead_s` before their turn is expected;
      the outcome of the preload that started, if one was tried.
    - `close()` stops transfers; `check_integrity(requests)` checks KV against requests.
    """

    @abstractmethod
    def poll(self, now: float) -> None: ...

    @abstractmethod
    def sweep(self, dormant: list[StageRequest], now: float) -> None: ...

    @abstractmethod
    def woke(self, request: StageRequest) -> None: ...

    @abstractmethod
    def follow_holds(self, resume_at: dict[str, float], requests: dict[str, StageRequest], now: float) -> None: ...

    @abstractmethod
    def never_fits(self, request: StageRequest, end: int) -> str | None: ...

    @abstractmethod
    def ensure_resident(self, request: StageRequest, now: float) -> int | None: ...

    @abstractmethod
    def shortfall(self, request: StageRequest, end: int, growth: int, now: float) -> int | None: ...

    @abstractmethod
    def reserve(self, request: StageRequest, end: int) -> None: ...

    @abstractmethod
    def committed(self, request: StageRequest, now: float) -> None: ...

    @abstractmethod
    def free(self, request_id: str) -> None: ...

    @abstractmethod
    def truncate(self, request: StageRequest, num_tokens: int) -> None: ...

    @abstractmethod
    def recomputable(self, request: StageRequest) -> bool: ...

    @abstractmethod
    def blocks_held(self, request_id: str) -> int: ...

    @abstractmethod
    def resident_tokens(self, request_ids: Iterable[str]) -> dict[str, int]: ...

    @abstractmethod
    def is_stranded(self, request_id: str) -> bool: ...

    @abstractmethod
    def blocks_to_grow(self, request: StageRequest) -> int: ...

    @property
    @abstractmethod
    def is_waiting_on_kv(self) -> bool: ...

    @abstractmethod
    def block_counts(self) -> tuple[int, int, int]: ...

    @abstractmethod
    def kv_counters(self) -> dict[str, float]: ...

    @abstractmethod
    def speech_started(self, request_id: str, lead_s: float, now: float) -> str | None: ...

    @abstractmethod
    def speech_paused(self, request_id: str, lead_s: float, now: float) -> str | None: ...

    @abstractmethod
    def close(self) -> None: ...

    @abstractmethod
    def check_integrity(self, requests: Iterable[StageRequest]) -> None: ...
