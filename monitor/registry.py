"""Session id -> SessionMonitor, read by the orchestrator every scheduling round."""
from __future__ import annotations

from monitor.session_monitor import InteractionSnapshot, SessionMonitor


class MonitorRegistry:
    """The live sessions' monitors. A session is added once and removed once."""

    def __init__(self) -> None:
        self._monitors: dict[str, SessionMonitor] = {}

    def add(self, monitor: SessionMonitor) -> None:
        if monitor.session_id in self._monitors:
            raise ValueError(f"session {monitor.session_id!r} is already monitored")
        self._monitors[monitor.session_id] = monitor

    def remove(self, session_id: str) -> SessionMonitor:
        """Stop monitoring `session_id`; KeyError if unknown."""
        return self._monitors.pop(session_id)

    def get(self, session_id: str) -> SessionMonitor:
        """The session's monitor; KeyError if unknown."""
        return self._monitors[session_id]

    def __contains__(self, session_id: str) -> bool:
        return session_id in self._monitors

    def __len__(self) -> int:
        return len(self._monitors)

    def snapshot(self, session_id: str, now: float | None = None) -> InteractionSnapshot:
        return self._monitors[session_id].snapshot(now)

    def snapshots(self, now: float | None = None) -> dict[str, InteractionSnapshot]:
        """Every session's snapshot; `now` (default: each monitor's clock) shared by all."""
        return {sid: monitor.snapshot(now) for sid, monitor in self._monitors.items()}
