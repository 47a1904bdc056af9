"""A user item a client creates (`conversation.item.create`), checked and read into what the controller takes."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from liveserve.realtime.errors import RealtimeError, require, shown
from liveserve.realtime.input_audio import Resampler24to16, decode_pcm16, num_pcm16_samples
from liveserve.realtime.naming import new_id

MAX_ID_CHARS = 256
MAX_ITEM_AUDIO_S = 120.0
SAMPLE_RATE = 24000  # of audio on the wire


@dataclass(frozen=True)
class UserItem:
    """A checked user item; its audio parts are still base64, judged by their length (`num_samples`):
    `audio_16k()` decodes and resamples them, work to do off the event loop when there is much of it."""

    item_id: str
    content: list[dict]  # as the conversation shows it
    text: str
    audio_b64: tuple[str, ...]
    num_samples: int  # of 24 kHz audio, all parts

    def audio_16k(self) -> np.ndarray | None:
        if not self.audio_b64:
            return None
        return np.concatenate([Resampler24to16().process(decode_pcm16(part)) for part in self.audio_b64])


def parse_user_item(item: object, max_text_chars: int) -> UserItem:
    """A user message of text and audio parts; RealtimeError naming the field for anything else."""
    require(isinstance(item, dict), "missing_required_parameter", "item must be an object", "item")
    require(item.get("type", "message") == "message", "unsupported_item",
            "only message and function_call_output items can be created", "item.type")
    require(item.get("role") == "user", "unsupported_item", "only user messages can be created", "item.role")
    content = item.get("content")
    require(isinstance(content, list) and content, "missing_required_parameter", "item.content must be a non-empty list",
            "item.content")
    texts, audio = [], []
    for i, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in ("input_text", "text"):
            require(isinstance(part.get("text"), str), "invalid_type", "text must be a string", f"item.content[{i}].text")
            texts.append(part["text"])
        elif kind == "input_audio":
            require(isinstance(part.get("audio"), str), "invalid_type", "audio must be a base64 string",
                    f"item.content[{i}].audio")
            audio.append(part["audio"])
        else:
            raise RealtimeError("invalid_value", f"unsupported content type {shown(kind)}", f"item.content[{i}].type")
    item_id = _item_id(item)
    text = "\n".join(texts)
    require(len(text) <= max_text_chars, "invalid_value", f"the item's text is longer than the model's context could "
            f"hold ({len(text)} characters)", "item.content")
    num_samples = sum(num_pcm16_samples(a) for a in audio)
    audio_s = num_samples / SAMPLE_RATE
    require(audio_s <= MAX_ITEM_AUDIO_S, "audio_too_long", f"an item may carry at most {MAX_ITEM_AUDIO_S:g} s of audio, "
            f"got {audio_s:.0f} s", "item.content")
    parts = [{"type": "input_text", "text": t} for t in texts] + [{"type": "input_audio", "transcript": None}] * len(audio)
    return UserItem(item_id, parts, text, tuple(audio), num_samples)


def _item_id(item: dict) -> str:
    item_id = item.get("id") if isinstance(item.get("id"), str) else new_id("item")
    require(len(item_id) <= MAX_ID_CHARS, "invalid_value", f"item.id may be at most {MAX_ID_CHARS} characters",
            "item.id")
    return item_id


@dataclass(frozen=True)
class FunctionOutput:
    """A checked `function_call_output` item: the result of the call `call_id`."""

    item_id: str
    call_id: str
    output: str


def parse_function_output(item: dict, max_text_chars: int) -> FunctionOutput:
    call_id, output = item.get("call_id"), item.get("output")
    require(isinstance(call_id, str) and call_id != "", "missing_required_parameter",
            "a function_call_output item needs the call_id of its call", "item.call_id")
    require(isinstance(output, str), "invalid_type", "output must be a string", "item.output")
    require(len(output) <= max_text_chars, "invalid_value", f"the output is longer than the model's context could "
            f"hold ({len(output)} characters)", "item.output")
    return FunctionOutput(_item_id(item), call_id, output)
