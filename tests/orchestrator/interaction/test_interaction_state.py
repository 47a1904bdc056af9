"""InteractionState: each interaction fact updates the session's state and publishes its next-use hint once."""

from __future__ import annotations

import pytest

from orchestrator.config import InteractionConfig
from orchestrator.interaction.interaction_state import InteractionState
from orchestrator.interaction.next_use import NextUseEstimator
from orchestrator.interaction.playback_board import NextUseHint, PlaybackBoard


class Scene:
    """A fake clock, a board journalling every write, the context's thinker id and the reply's republications."""

    def __init__(self) -> None:
        self.now, self.thinker_id, self.reply_playbacks = 10.0, "s/thinker#0", []
        self.board = PlaybackBoard(lambda: self.now)
        self.board.record_changes()
        estimator = NextUseEstimator(InteractionConfig(reply_gap_s=2.0, speech_lead_s=1.0, ema_weight=0.5))
        self.state = InteractionState(estimator, self.board, lambda: self.now, lambda: self.thinker_id,
                                      lambda: self.reply_playbacks.append(self.state.playback))

    def published(self) -> list:
        return self.board.drain_changes()


def hint(drained_at: float, reply_gap_s: float, needed_now: bool = False) -> NextUseHint:
    return NextUseHint(drained_at, reply_gap_s, needed_now)


@pytest.fixture
def scene() -> Scene:
    return Scene()


def test_each_fact_publishes_the_hint_once(scene):
    state = scene.state
    state.on_turn_started()  # a turn generates: the context is needed now
    assert scene.published() == [("publish_next_use", "s/thinker#0", hint(10.0, 2.0, needed_now=True))]
    scene.now = 11.0
    state.on_playback(True, drained_at=15.0, delivered_ms=4000.0)  # plays until 15 s; its states republished
    assert scene.published() == [("publish_next_use", "s/thinker#0", hint(15.0, 2.0, needed_now=True))]
    assert scene.reply_playbacks == [(True, 15.0, 4000.0)] and state.playback == (True, 15.0, 4000.0)
    scene.now = 12.0
    state.on_generation_end()  # generated: needed at the playback end plus the usual gap
    assert scene.published() == [("publish_next_use", "s/thinker#0", hint(15.0, 2.0))]
    scene.now = 16.0
    state.on_speech_started()  # 1 s after the playback end: the gap averages to 1.5 s; needed now
    assert scene.published() == [("publish_next_use", "s/thinker#0", hint(16.0, 1.5, needed_now=True))]
    scene.now = 17.0
    state.on_turn_started()  # 1 s of speech lead; the new reply has played nothing yet
    assert scene.published() == [("publish_next_use", "s/thinker#0", hint(17.0, 1.5, needed_now=True))]
    assert state.playback == (False, 0.0, None) and state.lead_s == pytest.approx(1.0)
    state.tracks_delivery = True  # a controller's session: each reply starts with 0 ms delivered
    state.on_turn_started()
    assert state.playback == (False, 0.0, 0.0)


def test_playback_not_started_republishes_the_reply_only(scene):
    scene.state.on_playback(False, drained_at=0.0, delivered_ms=0.0)  # nothing played: the hint stands
    assert scene.published() == [] and scene.reply_playbacks == [(False, 0.0, 0.0)]


def test_user_input_after_a_text_reply_averages_its_gap(scene):
    state = scene.state
    state.on_turn_started()
    state.on_generation_end()  # a text reply is over when generated (10 s)
    scene.published()
    scene.now = 13.0
    state.on_user_input()  # 3 s later: gap (2 + 3) / 2
    assert scene.published() == [("publish_next_use", "s/thinker#0", hint(13.0, 2.5))]


def test_a_rebuilt_context_gets_the_hint_under_its_new_thinker_id(scene):
    scene.state.on_user_input()
    scene.thinker_id = "s/thinker#1"  # the context was rebuilt in a new thinker request
    scene.state.on_turn_started()
    assert scene.published() == [("publish_next_use", "s/thinker#0", hint(10.0, 2.0)),
                                 ("publish_next_use", "s/thinker#1", hint(10.0, 2.0, needed_now=True))]
