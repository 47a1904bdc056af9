"""How fast one connection's messages are read: a token bucket over their bytes."""

from __future__ import annotations


class IngestPacer:
    """Paces reading a connection's messages to `rate` bytes per second, after a `burst` of bytes.

    Every message costs the event loop time in proportion to its size before any handler sees it
    (the WebSocket frame unmasked, decoded, parsed: ~1.5 ms per MiB), so a client sending big
    messages back to back would take the loop from every other session. `took(num_bytes, now)`
    records a message read at clock time `now` and says how long to wait before reading the next
    (the server then stops reading that socket, and TCP slows the client down). A client streaming
    audio in real time (64 KB/s of base64) never waits; one 15 MiB append or 8 MiB of instructions
    fit the burst.
    """

    def __init__(self, rate: float, burst: float) -> None:
        if not rate > 0 or not burst > 0:
            raise ValueError(f"rate and burst must be positive, got {rate} and {burst}")
        self.rate = rate
        self.burst = burst
        self._tokens = burst
        self._at: float | None = None

    def took(self, num_bytes: int, now: float) -> float:
        """Seconds to wait before the next message, after one of `num_bytes` read at `now`."""
        if self._at is not None:
            self._tokens = min(self.burst, self._tokens + (now - self._at) * self.rate)
        self._at = now
        self._tokens -= num_bytes
        return max(0.0, -self._tokens / self.rate)
