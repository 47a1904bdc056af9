"""A reply that is not spoken: the pipeline has no reply path, or the request asked for text only."""

from __future__ import annotations

from orchestrator.datapath.stage_bus import OutputHandler
from orchestrator.session.events import UnheardWork
from orchestrator.session.reply.base import Reply
from stages.kinds import StageKind
from stages.plan import StageOutput
from stages.requests import ThinkerStep


class SilentReply(Reply):
    """No stage beyond the thinker: no token becomes audio, none is heard, nothing is unheard."""

    def __init__(self) -> None:
        self.ids = {}
        self.is_finished = False

    def start(self, owner: OutputHandler, now: float, num_turns: int) -> None:
        pass

    def speak(self, position: int, step: ThinkerStep, text: str, is_special: bool = False) -> bool:
        return False

    def end_text(self) -> bool:
        return False

    def on_output(self, kind: StageKind, output: StageOutput) -> None:
        return None

    def publish_playback(self, thinker_id: str, started: bool, drained_at: float,
                         delivered_ms: float | None) -> None:
        pass

    def abort(self) -> None:
        pass

    @property
    def voice(self) -> None:
        return None

    def heard_tokens(self, num_spoken: int, heard_ms: float) -> int:
        return 0

    def unheard(self, heard_ms: float) -> UnheardWork:
        return UnheardWork(heard_ms, 0, 0, 0)
