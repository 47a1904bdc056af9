"""Session settings, `session.update` (GA or beta shape) and their JSON views."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from liveserve.realtime.errors import require, shown
from liveserve.realtime.ignored_settings import VOICE, VOICES
from liveserve.realtime.tool_settings import apply_tools, choice_json, tools_json
from liveserve.realtime.turn_detection import (
    ServerVAD,
    TurnDetection,
    parse_turn_detection,
    turn_detection_json,
    turn_taking_of,
)
from orchestrator.interaction.turn_taking import TurnTaking
from orchestrator.session.events import TurnRequest
from orchestrator.session.tools import NO_TOOLS, Tools

TRACING_FIELDS = ("workflow_name", "group_id", "metadata")
MODALITIES = ({"audio"}, {"text"}, {"audio", "text"})
INPUT_RATE = 24000
READ_APART = ("liveserve", "metadata", "instructions")  # fields of response.create that are no session setting


@dataclass(frozen=True)
class SessionSettings:
    """What a session's client chose (of what LiveServe supports; see ignored_settings for the rest).
    `turn_detection` None means manual commit."""

    model: str
    output_modalities: tuple[str, ...] = ("audio",)
    instructions: str = ""
    turn_detection: TurnDetection | None = ServerVAD()
    max_output_tokens: int | None = None
    temperature: float | None = None
    transcription: dict | None = None  # input audio transcription as asked (None: off), where there is an ASR stage
    voice: str = VOICE  # the built-in voice name asked for; the pipeline's one voice speaks whichever it is
    tracing: str | dict | None = None  # "auto" or {workflow_name, group_id, metadata}: kept with each response's trace
    metadata: dict | None = None  # a response's own (response.create), echoed in its events; never a session's
    tools: Tools = NO_TOOLS  # the functions the model may call, and the choice


def apply_update(settings: SessionSettings, session: Any) -> SessionSettings:
    """Settings after a `session.update` body; RealtimeError names the offending field. Settings LiveServe
    does without (ignored_settings) are not read here, except that a voice must be a string."""
    require(isinstance(session, dict), "invalid_type", "session must be an object", "session")
    changes: dict[str, Any] = {}
    modalities = session.get("output_modalities", session.get("modalities"))
    if modalities is not None:
        changes["output_modalities"] = _modalities(modalities)
    if "instructions" in session:
        require(isinstance(session["instructions"], str), "invalid_type", "instructions must be a string", "session.instructions")
        changes["instructions"] = session["instructions"]
    audio = _object(session, "audio", "session")
    input_audio, output_audio = _object(audio, "input", "session.audio"), _object(audio, "output", "session.audio")
    _check_formats(session, input_audio, output_audio)
    voice = output_audio.get("voice", session.get("voice"))
    require(voice is None or isinstance(voice, str), "invalid_type", "voice must be a string", "session.audio.output.voice")
    if voice in VOICES:
        changes["voice"] = voice
    if "tracing" in session:
        changes["tracing"] = _tracing(session["tracing"], settings.tracing)
    if "turn_detection" in input_audio or "turn_detection" in session:
        detection = input_audio["turn_detection"] if "turn_detection" in input_audio else session["turn_detection"]
        changes["turn_detection"] = parse_turn_detection(detection, settings.turn_detection)
    if "transcription" in input_audio or "input_audio_transcription" in session:
        changes["transcription"] = _transcription(input_audio.get("transcription", session.get("input_audio_transcription")))
    tokens = session.get("max_output_tokens", session.get("max_response_output_tokens"))
    if tokens is not None:
        changes["max_output_tokens"] = _max_tokens(tokens, "session.max_output_tokens")
    if "temperature" in session:
        changes["temperature"] = _temperature(session["temperature"], "session.temperature")
    if "tools" in session or "tool_choice" in session:
        changes["tools"] = apply_tools(settings.tools, session, "session")
    return replace(settings, **changes)


def _object(parent: dict, key: str, where: str) -> dict:
    """`parent[key]`: an object, or {} when absent or null (RealtimeError for anything else)."""
    value = parent.get(key)
    require(value is None or isinstance(value, dict), "invalid_type", f"{key} must be an object", f"{where}.{key}")
    return value or {}


def _transcription(value: Any) -> dict | None:
    """Input audio transcription: null (off) or an object; of its fields only the model's name is
    checked (the pipeline's ASR stage transcribes, whatever model is named)."""
    require(value is None or isinstance(value, dict), "invalid_type", "transcription must be an object or null",
            "session.audio.input.transcription")
    model = (value or {}).get("model")
    require(model is None or isinstance(model, str), "invalid_type", "transcription.model must be a string",
            "session.audio.input.transcription.model")
    return value


def _modalities(value: Any) -> tuple[str, ...]:
    ok = isinstance(value, list) and all(isinstance(v, str) for v in value) and set(value) in MODALITIES
    require(ok, "invalid_value", f"output_modalities must be ['audio'], ['text'] or both, got {shown(value)}", "session.output_modalities")
    return tuple(value)


def _check_formats(session: dict, input_audio: dict, output_audio: dict) -> None:
    for where, fmt in (("session.audio.input.format", input_audio.get("format")),
                       ("session.audio.output.format", output_audio.get("format"))):
        if fmt is not None:
            ok = isinstance(fmt, dict) and fmt.get("type") == "audio/pcm" and fmt.get("rate", INPUT_RATE) == INPUT_RATE
            require(ok, "unsupported_format", f"only audio/pcm at 24000 Hz is supported, got {shown(fmt)}", where)
    for key in ("input_audio_format", "output_audio_format"):
        if key in session:
            require(session[key] == "pcm16", "unsupported_format", f"only pcm16 is supported, got {shown(session[key])}", f"session.{key}")


def _tracing(value: Any, current: str | dict | None) -> str | dict | None:
    """Tracing: null, "auto" or an object of a workflow name, a group id (strings) and metadata; as in
    OpenAI's API it cannot be changed once on."""
    param = "session.tracing"
    require(value is None or value == "auto" or isinstance(value, dict), "invalid_type",
            'tracing must be "auto", an object or null', param)
    for key, field in (value.items() if isinstance(value, dict) else ()):
        require(key in TRACING_FIELDS, "invalid_value", f"unknown tracing field {key!r}", f"{param}.{key}")
        require(key == "metadata" or field is None or isinstance(field, str), "invalid_type",
                f"tracing.{key} must be a string", f"{param}.{key}")
    require(current is None or value == current, "invalid_value", "tracing cannot be changed once it is on", param)
    return value


def _max_tokens(value: Any, where: str) -> int | None:
    if value == "inf":
        return None
    ok = isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 4096
    require(ok, "invalid_value", f"max_output_tokens must be an integer in [1, 4096] or 'inf', got {shown(value)}", where)
    return value


def _temperature(value: Any, where: str) -> float:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and 0.0 <= value <= 2.0 and not math.isnan(value)
    require(ok, "invalid_value", f"temperature must be a number in [0, 2], got {shown(value)}", where)
    return float(value)


def response_overrides(response: Any, settings: SessionSettings) -> SessionSettings:
    """Per-response overrides from `response.create` (output modalities, max tokens, temperature) and
    the response's metadata.

    Instructions live in the session's context, so changing them per response is refused
    rather than silently ignored (null instructions ask for the session's).
    """
    if response is None:
        return settings
    require(isinstance(response, dict), "invalid_type", "response must be an object", "response")
    require(response.get("instructions") is None, "unsupported_parameter",
            "instructions cannot be changed per response; use session.update", "response.instructions")
    if response.get("tools") is not None:  # the system message describes the session's tools
        asked = apply_tools(settings.tools, {"tools": response["tools"]}, "response")
        require(tools_json(asked) == tools_json(settings.tools), "unsupported_parameter", "tools cannot be changed per response; use session.update",
                "response.tools")
    overridden = apply_update(settings, {k: v for k, v in response.items() if k not in READ_APART})
    return replace(overridden, metadata=_metadata(response.get("metadata")))


def _metadata(value: Any) -> dict | None:
    """A response's metadata: null or at most 16 string pairs (keys up to 64 characters, values up to 512)."""
    ok = value is None or (isinstance(value, dict) and len(value) <= 16 and all(
        isinstance(k, str) and len(k) <= 64 and isinstance(v, str) and len(v) <= 512 for k, v in value.items()))
    require(ok, "invalid_value", f"metadata must be at most 16 string pairs (keys up to 64 characters, values "
            f"up to 512), got {shown(value)}", "response.metadata")
    return value


def turn_taking(settings: SessionSettings) -> TurnTaking | None:
    """The session's turn detection, as the interaction controller takes it (None: manual commit)."""
    return turn_taking_of(settings.turn_detection)


def turn_request(settings: SessionSettings, ignore_eos: bool = False) -> TurnRequest:
    """How a response under `settings` is generated (a call it must make is not spoken)."""
    speak = "audio" in settings.output_modalities and not settings.tools.forced
    return TurnRequest(speak=speak, max_tokens=settings.max_output_tokens,
                       temperature=settings.temperature, ignore_eos=ignore_eos, tools=settings.tools)


def ga_session(session_id: str, s: SessionSettings) -> dict:
    pcm = {"type": "audio/pcm", "rate": INPUT_RATE}
    return {
        "type": "realtime", "object": "realtime.session", "id": session_id, "model": s.model,
        "output_modalities": list(s.output_modalities), "instructions": s.instructions,
        "audio": {
            "input": {"format": pcm, "transcription": s.transcription, "noise_reduction": None,
                      "turn_detection": turn_detection_json(s.turn_detection)},
            "output": {"format": pcm, "voice": s.voice, "speed": 1.0},
        },
        "tools": tools_json(s.tools), "tool_choice": choice_json(s.tools), "tracing": s.tracing, "prompt": None,
        "include": None,
        "max_output_tokens": "inf" if s.max_output_tokens is None else s.max_output_tokens,
    }


def beta_session(session_id: str, s: SessionSettings) -> dict:
    return {
        "id": session_id, "object": "realtime.session", "model": s.model,
        "modalities": sorted(set(s.output_modalities) | {"text"}), "instructions": s.instructions,
        "voice": s.voice, "input_audio_format": "pcm16", "output_audio_format": "pcm16",
        "input_audio_transcription": s.transcription, "turn_detection": turn_detection_json(s.turn_detection),
        "tools": tools_json(s.tools), "tool_choice": choice_json(s.tools),
        "temperature": 0.8 if s.temperature is None else s.temperature,
        "max_response_output_tokens": "inf" if s.max_output_tokens is None else s.max_output_tokens,
    }
