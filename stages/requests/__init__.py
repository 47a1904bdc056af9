"""Request kinds, one per stage kind."""

from stages.requests.asr import ASRRequest, Transcript
from stages.requests.base import RequestStatus, StageRequest
from stages.requests.duplex import DuplexFrame, DuplexRequest
from stages.requests.encoder import EncoderRequest
from stages.requests.talker import TalkerRequest
from stages.requests.thinker import ThinkerRequest, ThinkerStep, TurnInput
from stages.requests.tts import SpeechSegment, TTSRequest
from stages.requests.vocoder import VocoderRequest

__all__ = [
    "ASRRequest", "DuplexFrame", "DuplexRequest", "EncoderRequest", "RequestStatus", "SpeechSegment", "StageRequest",
    "TTSRequest", "TalkerRequest", "ThinkerRequest", "ThinkerStep", "Transcript", "TurnInput", "VocoderRequest",
]
