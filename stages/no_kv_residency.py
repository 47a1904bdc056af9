"""The residency manager of a stage without KV (encoder, vocoder)."""

from __future__ import annotations

from collections.abc import Iterable

from stages.requests.base import StageRequest
from stages.residency import Residency


class NoKVResidency(Residency):
    """A stage without KV: every chunk fits and is resident, nothing is held, moved or counted.

    Truncating a request truncates the request alone (it may refuse: ValueError).
    """

    def poll(self, now: float) -> None:
        pass

    def sweep(self, dormant: list[StageRequest], now: float) -> None:
        pass

    def woke(self, request: StageRequest) -> None:
        pass

    def follow_holds(self, resume_at: dict[str, float], requests: dict[str, StageRequest], now: float) -> None:
        pass

    def never_fits(self, request: StageRequest, end: int) -> str | None:
        return None

    def ensure_resident(self, request: StageRequest, now: float) -> int | None:
        return 0

    def shortfall(self, request: StageRequest, end: int, growth: int, now: float) -> int | None:
        return 0

    def reserve(self, request: StageRequest, end: int) -> None:
        pass

    def committed(self, request: StageRequest, now: float) -> None:
        pass

    def free(self, request_id: str) -> None:
        pass

    def truncate(self, request: StageRequest, num_tokens: int) -> None:
        request.truncate(num_tokens)

    def recomputable(self, request: StageRequest) -> bool:
        return True

    def blocks_held(self, request_id: str) -> int:
        return 0

    def blocks_to_grow(self, request: StageRequest) -> int:
        return 0

    def is_stranded(self, request_id: str) -> bool:
        return False

    def resident_tokens(self, request_ids: Iterable[str]) -> dict[str, int]:
        return {}

    @property
    def is_waiting_on_kv(self) -> bool:
        return False

    def block_counts(self) -> tuple[int, int, int]:
        return 0, 0, 0

    def kv_counters(self) -> dict[str, float]:
        return {}

    def speech_started(self, request_id: str, lead_s: float, now: float) -> str | None:
        return None

    def speech_paused(self, request_id: str, lead_s: float, now: float) -> str | None:
        return None

    def close(self) -> None:
        pass

    def check_integrity(self, requests: Iterable[StageRequest]) -> None:
        pass
