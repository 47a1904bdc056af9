"""The user's speech as transcription events (`conversation.item.input_audio_transcription.*`)."""

from __future__ import annotations

from collections.abc import Callable

from liveserve.realtime.conversation import Conversation
from orchestrator.interaction.events import UserTranscript
from stages.requests.speech_segments import WORD

Emit = Callable[..., None]


def stable_delta(sent: str, text: str, is_final: bool, previous: str = "") -> str:
    """What to send after `sent` given a transcript `text` of all the speech so far (`previous`: the
    partial transcript before it).

    A partial's words count where the partial before it said the same words (local agreement: a word
    Whisper heard once may change as more speech comes), up to the start of its last word, which may
    still grow or take punctuation; the final counts whole. The delta is what extends `sent`; a
    transcript that revises what was sent gives none (the completed event's transcript is the one to
    keep), so the deltas of an item join to its transcript unless a partial was revised.
    """
    stable = text if is_final else _agreed(previous, text)
    return stable[len(sent):] if stable.startswith(sent) else ""


def _agreed(previous: str, text: str) -> str:
    """`text` up to the first of its words that `previous` does not have at that place, or its last word."""
    said, words = [m.group() for m in WORD.finditer(previous)], list(WORD.finditer(text))
    agreed = 0
    while agreed < min(len(said), len(words) - 1) and said[agreed] == words[agreed].group():
        agreed += 1
    return text[: words[agreed].start()] if words else ""


class InputTranscription:
    """Emits a session's transcription events, when it asked for them (`enabled`).

    Deltas come while the user speaks, for the item id `input_audio_buffer.speech_started`
    announced (OpenAI sends them after the commit; here a partial transcript is made while
    the speech goes on, so live captions need no wait), then, with the final, the rest of the
    text as a last delta and `completed` with the whole transcript, which also fills the item's
    input_audio part once the item is in the conversation.
    """

    def __init__(self, emit: Emit, conversation: Conversation) -> None:
        self.emit, self.conversation = emit, conversation
        self.enabled = False
        self._sent: dict[str, str] = {}  # item id -> the text its deltas carried
        self._partial: dict[str, str] = {}  # item id -> its last partial transcript

    def report(self, event: UserTranscript) -> None:
        if not self.enabled:
            return
        sent = self._sent.get(event.item_id, "")
        delta = stable_delta(sent, event.text, event.is_final, self._partial.get(event.item_id, ""))
        self._partial[event.item_id] = event.text
        item = self.conversation.get(event.item_id)
        index = self._audio_index(item.content) if item is not None else 0
        if delta:
            self._sent[event.item_id] = sent + delta
            self.emit("conversation.item.input_audio_transcription.delta", item_id=event.item_id,
                      content_index=index, delta=delta)
        if not event.is_final:
            return
        self._sent.pop(event.item_id, None)
        self._partial.pop(event.item_id, None)
        if item is not None:
            item.content = [{**part, "transcript": event.text} if part["type"] == "input_audio" else part
                            for part in item.content]
        self.emit("conversation.item.input_audio_transcription.completed", item_id=event.item_id,
                  content_index=index, transcript=event.text,
                  usage={"type": "duration", "seconds": round(event.audio_s, 3)})

    @staticmethod
    def _audio_index(content: list[dict]) -> int:
        return next((i for i, part in enumerate(content) if part["type"] == "input_audio"), 0)
