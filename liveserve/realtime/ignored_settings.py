"""Session settings LiveServe does not support but can safely do without: a `session.update` asking for
one is applied without it, and one `error` event (after `session.updated`) names what was ignored.

Asking for nothing (null, an empty list, the value in effect) is not reported. Input transcription is
ignored only where the pipeline has no ASR stage. A wrong type or value
of a setting LiveServe does support still refuses the whole update (settings.apply_update).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from liveserve.realtime.errors import RealtimeError, shown

VOICE = "alloy"  # the name of the one voice every pipeline speaks with (tiny-omni's, or the TTS stage's)
VOICES = ("alloy", "ash", "ballad", "coral", "echo", "sage", "shimmer", "verse", "marin", "cedar")  # OpenAI's
# built-in voice names: each is answered by the one voice, so a client's default voice is no error
NO_ASR = ("input audio transcription is not available: this pipeline has no speech recognition stage, so no "
          "transcription events will come")
CODE = "parameter_ignored"
TRANSCRIPTION = "audio.input.transcription"  # ignored only by a pipeline without an ASR stage

# (path in the GA shape, path in the beta shape, asks for something when, why it is ignored)
Rule = tuple[str, str | None, Callable[[Any], bool], str]
RULES: list[Rule] = [
    (TRANSCRIPTION, "input_audio_transcription", lambda v: v is not None, NO_ASR),
    ("audio.input.noise_reduction", "input_audio_noise_reduction", lambda v: v is not None,
     "input audio is not filtered"),
    ("audio.output.voice", "voice", lambda v: v is not None and v not in VOICES,
     "this server speaks with one voice, named by any of OpenAI's built-in voice names"),
    ("audio.output.speed", "speed", lambda v: v not in (None, 1, 1.0), "replies are spoken at speed 1.0"),
    ("prompt", None, lambda v: v is not None, "stored prompts are not available; use instructions"),
    ("include", None, lambda v: v not in (None, []), "no extra output fields are available"),
    ("truncation", None, lambda v: v not in (None, "auto"), "the context is managed by the server"),
    ("reasoning", None, lambda v: v is not None, "this model has no reasoning settings"),
]


def ignored_settings(session: dict, transcribes: bool = False) -> list[tuple[str, str]]:
    """(param, why) for each setting of a `session.update` body (GA or beta shape) that is ignored
    (`transcribes`: the pipeline has an ASR stage)."""
    found = []
    for ga_path, beta_path, asks, why in RULES:
        if ga_path == TRANSCRIPTION and transcribes:
            continue
        for path in (ga_path, beta_path):
            present, value = _lookup(session, path)
            if present and asks(value):
                found.append((f"session.{path}", why if why == NO_ASR else f"{why} (got {shown(value, 60)})"))
                break
    return found


def ignored_error(ignored: list[tuple[str, str]]) -> RealtimeError:
    """One error event for all of an update's ignored settings, naming the first as its param."""
    listed = "; ".join(f"{param}: {why}" for param, why in ignored)
    return RealtimeError(CODE, f"ignored, the rest of the update was applied: {listed}", ignored[0][0])


def _lookup(session: dict, path: str | None) -> tuple[bool, Any]:
    """Whether `path` (dotted) is in `session`, and its value."""
    node: Any = session
    for key in path.split(".") if path else ():
        if not isinstance(node, dict) or key not in node:
            return False, None
        node = node[key]
    return path is not None, node
