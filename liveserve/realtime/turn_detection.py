"""`turn_detection` of a session (GA `audio.input.turn_detection`, beta `turn_detection`): parsed, reported
back as OpenAI reports it, and handed to the interaction controller as TurnTaking."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from liveserve.realtime.errors import RealtimeError, require, shown
from orchestrator.interaction.turn_taking import EAGERNESS_NAMES, TurnTaking

WHERE = "session.audio.input.turn_detection"


@dataclass(frozen=True)
class ServerVAD:
    """`server_vad`: the turn ends after `silence_duration_ms` of silence."""

    threshold: float = 0.5
    prefix_padding_ms: int = 300
    silence_duration_ms: int = 500
    create_response: bool = True
    interrupt_response: bool = True


@dataclass(frozen=True)
class SemanticVAD:
    """`semantic_vad`: an end-of-turn model judges each pause; `eagerness` low / medium / high / auto."""

    eagerness: str = "auto"
    create_response: bool = True
    interrupt_response: bool = True


TurnDetection = ServerVAD | SemanticVAD
KINDS: dict[str, type] = {"server_vad": ServerVAD, "semantic_vad": SemanticVAD}
FIELD_TYPES = {"threshold": float, "prefix_padding_ms": int, "silence_duration_ms": int, "create_response": bool,
               "interrupt_response": bool, "eagerness": str}


def parse_turn_detection(value: Any, current: TurnDetection | None) -> TurnDetection | None:
    """The turn detection a `turn_detection` value asks for (None: manual commit). Fields left out keep
    their current values when the type stays, else the type's defaults; a field of the other type is not
    read. RealtimeError names the offending field."""
    if value is None:
        return None
    require(isinstance(value, dict), "invalid_type", "turn_detection must be an object or null", WHERE)
    kind = value.get("type", "server_vad")
    require(kind in KINDS, "invalid_value", "turn_detection.type must be 'server_vad' or 'semantic_vad' (or "
            f"turn_detection null), got {shown(kind)}", f"{WHERE}.type")
    cls = KINDS[kind]
    base = asdict(current if isinstance(current, cls) else cls())
    for key in base:
        if key in value:
            base[key] = _typed(value[key], FIELD_TYPES[key], f"{WHERE}.{key}")
    if cls is ServerVAD:
        require(0.0 < base["threshold"] < 1.0, "invalid_value", "threshold must be between 0 and 1", f"{WHERE}.threshold")
        for key in ("prefix_padding_ms", "silence_duration_ms"):
            require(0 <= base[key] <= 10_000, "invalid_value", f"{key} must be in [0, 10000]", f"{WHERE}.{key}")
    else:
        require(base["eagerness"] in EAGERNESS_NAMES, "invalid_value", f"eagerness must be one of "
                f"{', '.join(EAGERNESS_NAMES)}, got {shown(base['eagerness'])}", f"{WHERE}.eagerness")
    return cls(**base)


def _typed(value: Any, kind: type, where: str) -> Any:
    if kind is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, kind) and not (kind is int and isinstance(value, bool)):
        return value
    raise RealtimeError("invalid_type", f"{where.rsplit('.', 1)[-1]} must be {kind.__name__}, got {shown(value)}", where)


def turn_detection_json(detection: TurnDetection | None) -> dict | None:
    """As OpenAI reports it in session.created / session.updated (GA and beta alike)."""
    if detection is None:
        return None
    if isinstance(detection, SemanticVAD):
        return {"type": "semantic_vad", **asdict(detection)}
    return {"type": "server_vad", **asdict(detection), "idle_timeout_ms": None}


def turn_taking_of(detection: TurnDetection | None) -> TurnTaking | None:
    """What the interaction controller takes (None: the client commits)."""
    if detection is None:
        return None
    if isinstance(detection, SemanticVAD):
        return TurnTaking(kind="semantic_vad", eagerness=detection.eagerness,
                          create_response=detection.create_response, interrupt_response=detection.interrupt_response)
    return TurnTaking(**asdict(detection))
