"""Per-session interaction state: voice activity, end of turn, playback progress, barge-in.

A leaf package: imports nothing of LiveServe's and takes frozen dataclasses.
"""
from monitor.playback import PlaybackTracker
from monitor.semantic_turn import EAGERNESS_NAMES, SemanticTurnConfig, SemanticTurnDetector
from monitor.session_monitor import BargeIn, MonitorEvent, SessionMonitor
from monitor.silero import SileroVAD, VoiceConfidence
from monitor.smart_turn import SmartTurn, TurnCompletion
from monitor.turn_detector import (
    SpeechLull,
    SpeechPaused,
    SpeechResumed,
    SpeechStarted,
    SpeechStopped,
    TurnDetectionConfig,
    TurnDetector,
    TurnEvent,
)
from monitor.vad_batcher import VadBatcher

__all__ = [
    "BargeIn",
    "EAGERNESS_NAMES",
    "MonitorEvent",
    "PlaybackTracker",
    "SemanticTurnConfig",
    "SemanticTurnDetector",
    "SessionMonitor",
    "SileroVAD",
    "SmartTurn",
    "SpeechLull",
    "SpeechPaused",
    "SpeechResumed",
    "SpeechStarted",
    "SpeechStopped",
    "TurnDetectionConfig",
    "TurnCompletion",
    "TurnDetector",
    "TurnEvent",
    "VadBatcher",
    "VoiceConfidence",
]
