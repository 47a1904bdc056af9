"""The orchestrator's view of one session: its resident thinker context and current turn."""

from __future__ import annotations

from typing import TYPE_CHECKING

from stages.plan import StageOutput

if TYPE_CHECKING:
    from orchestrator.turn import Turn


class SessionContext:
    """Owns the session's resident thinker request; routes its outputs to the active turn."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self.thinker_id = f"{session_id}/thinker"
        self.active_turn: Turn | None = None
        self.num_turns = 0
        self.needs_close = False

    def on_output(self, kind: str, output: StageOutput) -> None:
        if self.active_turn is not None:
            self.active_turn.on_output(kind, output)

    def turn_started(self, turn: Turn) -> None:
        self.active_turn = turn
        self.num_turns += 1

    def turn_ended(self, turn: Turn) -> None:
        if self.active_turn is turn:
            self.active_turn = None
