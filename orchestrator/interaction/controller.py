"""One session's interaction decisions: turn taking, barge-in, truncation to what was heard, playback.

Near 400 lines: the speech a pipeline transcribes as it comes, and the reply begun at its pause, are
part of the input's turn taking (when to open, feed, answer early and close it), kept beside it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import numpy as np

from monitor import (
    BargeIn,
    SemanticTurnConfig,
    SessionMonitor,
    SpeechLull,
    SpeechPaused,
    SpeechResumed,
    SpeechStarted,
    SpeechStopped,
    TurnDetectionConfig,
    VadBatcher,
)
from orchestrator.interaction.draft_reply import DraftReply
from orchestrator.interaction.events import (
    AudioCommitted,
    InteractionEvent,
    ItemTruncated,
    Refused,
    ResponseEnded,
    ResponseStarted,
    SpeechBegan,
    SpeechEnded,
    UserItemReady,
    UserItemRejected,
)
from orchestrator.interaction.ids import new_id
from orchestrator.interaction.recent_replies import RecentReplies
from orchestrator.interaction.speech_buffer import SpeechBuffer
from orchestrator.interaction.turn_taking import TurnTaking
from orchestrator.session.events import AudioDelta, TurnDone, TurnRequest
from orchestrator.session.session import Session
from orchestrator.session.tools import NO_TOOLS, Tools
from orchestrator.session.transcription import Transcription
from orchestrator.session.turn import Turn

MAX_UNCOMMITTED_S = 120.0  # of input audio held per session before a commit
SILENCE_KEPT_MS = 1000.0  # while nobody speaks, beyond the prefix padding


class InteractionController:
    """Decides what a session's speech, playback and requests mean, and tells `listener` (see
    interaction_events) what happened, so the protocol layer only translates.

    - Audio (16 kHz) is buffered; with `turn_taking` set, the monitor's VAD runs over it. Speech
      start marks the context as needed soon; a pause preloads it; speech stop commits the speech as
      a user item and, with `create_response`, starts a reply. With `preemptive_reply`, where the
      pipeline transcribes and can take a reply back, the reply starts at the pause as a DraftReply:
      if the pause ends the turn the draft is its commit and reply, released then; if speech resumes,
      or any call but a feed or an ack comes first, the draft is dropped unseen.
    - In a pipeline that transcribes, the ASR stage hears speech from its start (and its prefix
      padding) as it comes, and the commit at speech stop closes it; committed audio it did not
      hear so (a manual commit, an item's audio) is transcribed whole. At a lull (half the
      pause) the stage reads the speech so far, so a pause that follows finds its words read.
      `listener` gets every UserTranscript (partials only with `partial_transcripts` configured:
      each is a pass over all the speech so far, CPU nobody needs unless the client shows them).
    - Speech over reply audio that is generating or unplayed is a barge-in: with
      `interrupt_response`, a generating reply is cancelled in every stage, one still playing is
      cut, and either way the context keeps the reply tokens whose audio was heard.
    - A reply is its Turn: `turn` while it generates (with `cancel_reason` once it is cut), then
      among `replies`, the latest few a truncation may still measure; older turns are released.
    - Reply audio is recorded as delivered when it leaves (`listener` gets it); acks move the
      played position; the stages are told each change.
    - `opened_at` and `last_barge_in_at` (None: none yet) are clock times, for a live view;
      `num_drafts_taken` and `num_drafts_dropped` count the drafts that had started a reply.
    Every method runs on the event loop thread; ValueError/KeyError report a request that cannot
    be honoured, with nothing changed.
    """

    def __init__(self, session: Session, monitor: SessionMonitor,
                 make_detector: Callable[[TurnDetectionConfig | SemanticTurnConfig], object],
                 listener: Callable[[InteractionEvent], None], clock: Callable[[], float],
                 vad_batcher: VadBatcher, preemptive_reply: bool = False) -> None:
        self.session, self.monitor, self.listener, self.clock = session, monitor, listener, clock
        self.vad_batcher = vad_batcher
        session.interaction.tracks_delivery = True
        self.preemptive_reply = preemptive_reply
        self.make_detector = make_detector
        self.turn_taking: TurnTaking | None = None
        self.response_defaults = TurnRequest()
        self.buffer = SpeechBuffer(MAX_UNCOMMITTED_S)
        self.turn: Turn | None = None  # of the reply being generated, until it ends
        self.cancel_reason: str | None = None  # why `turn` was cut (None while it is not)
        self.replies = RecentReplies()  # the latest replies' turns, by assistant item, for truncations
        self._speech: tuple[str, float] | None = None  # (item id, start ms) of the speech in progress
        self._heard: Transcription | None = None  # the speech in progress at the ASR stage
        self._draft: DraftReply | None = None  # the reply to the speech so far, begun at its pause
        self.num_drafts_taken = self.num_drafts_dropped = 0  # of the drafts that started a reply
        self.partial_transcripts = False
        self._tasks: set[asyncio.Task] = set()
        self.opened_at = clock()
        self.last_barge_in_at: float | None = None

    @property
    def session_id(self) -> str:
        return self.session.session_id

    @property
    def is_user_speaking(self) -> bool:
        """The VAD heard speech start and not yet its end."""
        return self._speech is not None

    def configure(self, turn_taking: TurnTaking | None, response_defaults: TurnRequest,
                  partial_transcripts: bool = False) -> None:
        """Turn detection (None: the client commits), the request of replies speech starts, and whether
        speech is transcribed as it comes (partial transcripts) where the pipeline transcribes."""
        self._drop_draft()
        if turn_taking != self.turn_taking and turn_taking is not None:
            self.monitor.detector = self.make_detector(turn_taking.detection)
        self.turn_taking, self.response_defaults = turn_taking, response_defaults
        self.partial_transcripts = partial_transcripts

    # input audio

    async def feed_audio(self, pcm16k: np.ndarray) -> None:
        """Buffer the user's audio (ValueError, nothing kept, past MAX_UNCOMMITTED_S) and detect turns in it:
        its VAD windows are scored with every session's waiting (`vad_batcher`), and a detector that does not
        decide inline (semantic_vad's) decides on a worker thread, so other sessions go on meanwhile."""
        self.buffer.append(pcm16k)
        detector = self.monitor.detector
        if self._heard is not None:
            self._heard.append(pcm16k, pausing=self.turn_taking is not None and detector.is_pausing)
        if self.turn_taking is None:
            return
        windows = detector.split(pcm16k)
        probabilities = await self.vad_batcher.probabilities(detector.vad, windows)
        found = (detector.decide(windows, probabilities) if detector.decides_inline
                 else await asyncio.to_thread(detector.decide, windows, probabilities))
        for turn_event in found:  # one at a time: speech that resumes right after a turn ends cuts the reply it started
            for event in self.monitor.observe([turn_event]):
                self._on_vad(event)
        if self._speech is None:  # silence before any speech: only the prefix padding may be committed
            self.buffer.forget_before(self.buffer.total_ms - self.turn_taking.prefix_padding_ms - SILENCE_KEPT_MS)

    def commit_audio(self, item_id: str | None = None) -> str:
        """The buffered audio becomes a user item; its id."""
        item_id = item_id or new_id("item")
        self._drop_draft()
        self._drop_heard()  # it heard from the speech's start, the commit takes the whole buffer
        self._commit(self.buffer.take(), item_id)
        return item_id

    def clear_audio(self) -> None:
        self._drop_draft()
        self._drop_heard()
        self.buffer.clear()

    def _drop_draft(self, draft: DraftReply | None = None) -> None:
        draft = draft or self._draft
        if draft is not None:
            self.num_drafts_dropped += draft.turn is not None
            draft.drop()
        self._draft = None

    def _drop_heard(self) -> None:
        if self._heard is not None:
            self._heard.abort()
            self._heard = None

    def _on_vad(self, event) -> None:
        turn_taking = self.turn_taking
        if isinstance(event, SpeechStarted):
            self._speech = (new_id("item"), event.audio_start_ms)
            self._hear(*self._speech)
            self.session.speech_started()
            self.listener(SpeechBegan(event.audio_start_ms, self._speech[0]))
        elif isinstance(event, BargeIn) and turn_taking.interrupt_response:
            self._barge_in()
        elif isinstance(event, SpeechLull):
            self._on_lull()
        elif isinstance(event, SpeechPaused):
            self._on_pause()
        elif isinstance(event, SpeechResumed):
            self._drop_draft()
        elif isinstance(event, SpeechStopped):
            item_id, start_ms = self._speech or (new_id("item"), None)
            self._speech = None
            self.listener(SpeechEnded(event.audio_end_ms, item_id))
            heard, self._heard = self._heard, None  # it heard this speech from its start
            draft, self._draft = self._draft, None
            answered = self._commit(self.buffer.take(from_ms=start_ms), item_id, heard, draft)
            if turn_taking.create_response and not answered:
                self._respond()

    def _on_lull(self) -> None:
        """The user may have said all: the ASR reads it now, so that at the pause the draft has its words."""
        if self._heard is not None:
            self._heard.pause(self._turn_end_in_s(self.monitor.detector.config.lull_ms))

    def _turn_end_in_s(self, silence_ms: float) -> float:
        """When the turn ends, after `silence_ms` of silence, if the silence lasts."""
        return (self.monitor.detector.config.silence_duration_ms - silence_ms) / 1000

    def _on_pause(self) -> None:
        lead_s = self._turn_end_in_s(self.monitor.detector.config.pause_ms)
        self.session.speech_paused(lead_s)
        if self._heard is None:
            return
        self._heard.pause(lead_s)
        geometry = self.session.pipeline.geometry
        if (self.preemptive_reply and self.turn_taking.create_response and self.turn is None
                and self._draft is None and geometry.takes_back_replies):
            self._draft = DraftReply(self.session, self._heard, self._speech[0], self.response_defaults)

    def _hear(self, item_id: str, start_ms: float) -> None:
        """Transcribe the speech that started at `start_ms` as it comes (a pipeline that transcribes)."""
        self._drop_heard()
        if self.session.pipeline.geometry.hearing.transcribes:
            self._heard = self.session.transcribe(item_id, self.listener, self.partial_transcripts)
            self._heard.append(self.buffer.peek(from_ms=start_ms))

    def _respond(self) -> None:
        if self.turn is not None:
            self.listener(Refused("conversation_already_has_active_response", "a response is already in progress"))
        else:
            self.start_response(self.response_defaults, self.clock())

    def _commit(self, audio: np.ndarray, item_id: str, heard: Transcription | None = None,
                draft: DraftReply | None = None) -> bool:
        """The commit is reported before `heard` closes: closing may give its final transcript at once,
        and that fills the committed item. Whether `draft` answered the item (its reply is then under way)."""
        self.listener(AudioCommitted(item_id))
        if heard is not None:
            heard.append(None, close=True)
        taken = draft.take() if draft is not None else None
        if taken is None:
            self._drop_draft(draft)
            self.add_user_item(item_id, audio, "", heard)
            return False
        entry, turn = taken
        self.num_drafts_taken += 1
        heard.abort()  # its final is reported: the item entered as the draft's text
        self._report_entry(entry, item_id)
        self._begin(turn, self.clock())
        return True

    # conversation items

    def add_user_item(self, item_id: str, audio: np.ndarray | None, text: str,
                      heard: Transcription | None = None) -> None:
        """Append a user message; UserItemReady or UserItemRejected follows once it is in context (or not).
        `heard`: its speech, already at the ASR stage."""
        self._drop_draft()
        self._report_entry(self.session.add_user_item(item_id, audio, text, heard, self.listener), item_id)

    def _report_entry(self, task: asyncio.Task, item_id: str) -> None:
        task.add_done_callback(lambda done: self._user_item_done(done, item_id))
        self._track(task)

    def _user_item_done(self, task: asyncio.Task, item_id: str) -> None:
        if task.cancelled():
            return
        error = task.exception()
        self.listener(UserItemReady(item_id) if error is None else UserItemRejected(item_id, str(error)))

    def delete_item(self, item_id: str) -> bool:
        """Remove an item from the context (ValueError while a reply is generated); whether it was there."""
        if self.turn is not None and self.turn.item_id == item_id:
            raise ValueError("the item of the response in progress cannot be deleted")
        self._drop_draft()
        return self.session.context.delete(item_id)

    def set_instructions(self, instructions: str, tools: Tools = NO_TOOLS) -> None:
        """The system message: `instructions`, and the signatures of `tools`' functions."""
        self._drop_draft()
        self.session.context.set_instructions(instructions, tools.system_text())

    # responses

    def start_response(self, request: TurnRequest, turn_end: float) -> str:
        """Generate a reply into a new assistant item (ValueError if one is in progress); its id."""
        if self.turn is not None:
            raise ValueError("a response is already in progress")
        self._drop_draft()
        return self._begin(self.session.start_turn(request, new_id("item")), turn_end)

    def _begin(self, turn: Turn, turn_end: float) -> str:
        """`turn` is the response: announce it and hand its events on."""
        self.turn, self.cancel_reason = turn, None
        self.replies.add(turn)
        if turn.request.speak:
            self.monitor.playback.start_item(turn.item_id)
        self.listener(ResponseStarted(turn.item_id, turn.request, turn_end))
        self._track(asyncio.ensure_future(self._pump(turn)))
        return turn.item_id

    def cancel_response(self, reason: str = "client_cancelled") -> None:
        """Stop the reply in progress where playback stands (ValueError if there is none)."""
        if self.turn is None:
            raise ValueError("there is no response in progress to cancel")
        self._interrupt(reason)

    async def _pump(self, turn: Turn) -> None:
        """Hand `turn`'s events on until its TurnDone; it stays `self.turn` until then."""
        events, done = turn.events, None
        while done is None:
            batch = [await events.get()]
            batch.extend(events.get_nowait() for _ in range(events.qsize()))
            done = self._hand_on(batch)
        self._end(turn, done)

    def _hand_on(self, batch: list) -> TurnDone | None:
        """The events that queued by one wake-up on to the listener (none once the reply is cut); the
        stages hear of the audio among them once. The TurnDone that ends the batch, if it does."""
        done = batch.pop() if isinstance(batch[-1], TurnDone) else None
        delivered = False
        for event in batch:
            if self.cancel_reason is not None:
                break
            if isinstance(event, AudioDelta):
                self.monitor.playback.delivered(event.duration_ms)
                delivered = True
            self.listener(event)
        if delivered:
            self.report_playback()
        return done

    def _end(self, turn: Turn, done: TurnDone) -> None:
        if turn.request.speak:
            self.monitor.playback.finish_generation()
        cancel_reason, self.turn, self.cancel_reason = self.cancel_reason, None, None
        self.listener(ResponseEnded(turn.item_id, done, cancel_reason, turn.request_ids, self.clock()))

    def _barge_in(self) -> None:
        self.last_barge_in_at = self.clock()
        if self.turn is not None:
            self._interrupt("turn_detected")
            return
        item_id = self.monitor.playback.item_id
        if self.replies.get(item_id) is not None:  # the reply finished generating but is still playing
            heard = self.monitor.playback.played_ms()
            self.session.context.truncate_heard(item_id, heard)
            self._truncated(item_id, int(heard), heard)

    def _interrupt(self, reason: str, heard_ms: float | None = None) -> None:
        turn = self.turn
        if turn is None or self.cancel_reason is not None:
            return
        heard = self.monitor.playback.played_ms() if heard_ms is None else heard_ms
        self.cancel_reason = reason
        self.session.cancel_turn(heard if turn.request.speak else None)
        if reason == "turn_detected" and turn.request.speak:
            self._truncated(turn.item_id, int(heard), heard)

    def truncate_item(self, item_id: str, audio_end_ms: int | float) -> None:
        """The client cut assistant item `item_id` at `audio_end_ms` of its audio (KeyError: not in context)."""
        self._drop_draft()
        if self.turn is not None and self.turn.item_id == item_id and self.cancel_reason is None:
            self._interrupt("client_cancelled", heard_ms=float(audio_end_ms))
        else:
            self.session.context.truncate_heard(item_id, float(audio_end_ms))
        self._truncated(item_id, audio_end_ms, float(audio_end_ms))

    def _truncated(self, item_id: str, audio_end_ms: int | float, heard_ms: float) -> None:
        self.monitor.playback.truncate(heard_ms)
        turn = self.replies.get(item_id)
        self.listener(ItemTruncated(item_id, audio_end_ms, heard_ms, None if turn is None else turn.unheard(heard_ms)))

    # duplex

    def open_duplex(self, listener: Callable) -> object:
        """Stream every frame of input into the session's duplex request (see DuplexStream)."""
        self.clear_audio()
        return self.session.open_duplex(listener)

    def close_duplex(self) -> None:
        self.session.close_duplex()

    # playback

    def ack_playback(self, played_ms: float, item_id: str | None = None) -> None:
        """The client has played `played_ms` of the current reply item (a stale item's ack is ignored)."""
        if self.monitor.playback.ack(played_ms, item_id):
            self.report_playback()

    @property
    def num_underruns(self) -> int:
        """Times the user's playback ran dry while a reply was still coming (the real-time model)."""
        return self.monitor.playback.num_underruns

    def report_playback(self) -> None:
        """Tell the stages where the user's playback of the current reply stands."""
        now, playback = self.clock(), self.monitor.playback
        self.session.interaction.on_playback(playback.first_audio_sent, now + playback.buffer_ms(now) / 1000,
                                             playback.delivered_ms)

    # lifetime

    def _track(self, task: asyncio.Task) -> None:
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def close(self) -> None:
        """The one teardown path: a reply in progress is cancelled (`session_closed`), the session freed."""
        if self.turn is not None and self.cancel_reason is None:
            self.cancel_reason = "session_closed"
        self._drop_draft()
        self._drop_heard()
        self.session.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
