"""An in-process realtime session over scripted stages, a fake clock and a loudness VAD: protocol events
pushed in, server events asserted out, in milliseconds (pipecat-style). The socket tests stay the
end-to-end net."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import json
from collections import defaultdict

import numpy as np
import torch

from liveserve.realtime.metrics import ServerMetrics
from liveserve.realtime.naming import Dialect
from liveserve.realtime.session import RealtimeSession
from liveserve.realtime.settings import SessionSettings
from orchestrator.config import PipelineConfig
from orchestrator.datapath.stage_graph import Edge, StageGraph
from orchestrator.orchestrator import Orchestrator
from orchestrator.placement.base import Placement
from stages.commands import AddRequest, Command
from stages.config import SchedulerConfig
from stages.kinds import StageKind
from stages.models.asr_whisper import WhisperConfig
from stages.models.tts_piper import PiperVoiceConfig
from stages.plan import StageOutput
from stages.requests import ThinkerStep
from stages.stage_spec import StageSpec
from tests.orchestrator.conftest import tiny_pipeline
from tests.stages.scheduler_harness import FakeClock

RATE = 24000


class LoudnessVAD:
    """Speech wherever a window is not silent: the turn detector's rules, with no model in the way."""

    def speech_probability(self, window: np.ndarray) -> float:
        return 1.0 if float(np.abs(window).mean()) > 0.01 else 0.0

    def reset(self) -> None:
        pass


class ScriptedTurnModel:
    """An end-of-turn model that answers `complete` (a probability) and records the audio it was asked about."""

    def __init__(self, complete: float = 0.9) -> None:
        self.complete = complete
        self.asked: list[int] = []  # samples of audio per call

    def probability(self, audio: np.ndarray) -> float:
        self.asked.append(len(audio))
        return self.complete


class ScriptedStages(Placement):
    """Stages that compute nothing: each records the commands it is sent, and the test makes it answer."""

    def __init__(self) -> None:
        self.commands: dict[str, list[Command]] = defaultdict(list)
        self.encoded: set[str] = set()
        self.sink = None

    def start(self, specs, sink, clock, view=None):
        self.sink = sink
        return {spec.kind: _RecordingHandle(self.commands[spec.kind]) for spec in specs}

    def stop(self) -> None:
        pass

    def sent(self, kind: str, command_type: type) -> list:
        return [c for c in self.commands[kind] if isinstance(c, command_type)]

    def added(self, kind: str) -> list[str]:
        """Request ids added to a stage, in order."""
        return [c.request.request_id for c in self.sent(kind, AddRequest)]

    def encode(self, encoder_id: str, frames: int, width: int) -> None:
        self.encoded.add(encoder_id)
        self.sink("encoder", [StageOutput(encoder_id, torch.zeros(frames, width), is_finished=True)])

    def encode_the_rest(self, frames: int, width: int) -> None:
        """Answer every user item's audio the encoder was given and has not answered."""
        for encoder_id in self.added("encoder"):
            if encoder_id not in self.encoded and encoder_id.role == "encoder":
                self.encode(encoder_id, frames, width)

    def think(self, thinker_id: str, turn_id: str, tokens: list[int], width: int, finish: str | None = None) -> None:
        steps = [ThinkerStep(token, torch.zeros(width), finish if i == len(tokens) - 1 else None, turn_id)
                 for i, token in enumerate(tokens)]
        self.sink("thinker", [StageOutput(thinker_id, step) for step in steps])

    def speak(self, talker_id: str, frames: int, finished: bool = False) -> None:
        outputs = [StageOutput(talker_id, 7) for _ in range(frames)]
        self.sink("talker", outputs + ([StageOutput(talker_id, is_finished=True)] if finished else []))

    def voice(self, vocoder_id: str, samples: int, finished: bool = False) -> None:
        self.sink("vocoder", [StageOutput(vocoder_id, torch.full((samples,), 0.1), is_finished=finished)])


class _RecordingHandle:
    def __init__(self, log: list[Command]) -> None:
        self.log = log

    def submit(self, command: Command) -> None:
        self.log.append(command)

    def submit_all(self, commands) -> None:
        self.log.extend(commands)


class InteractionHarness:
    """One realtime session on scripted stages; `client(type, **fields)` sends an event and settles."""

    def __init__(self, config: PipelineConfig, dialect: Dialect = Dialect(False)) -> None:
        self.config, self.dialect = config, dialect
        self.clock = FakeClock()
        self.stages = ScriptedStages()
        self.turn_model = ScriptedTurnModel()
        self.orch = Orchestrator(config, placement=self.stages, clock=self.clock, sleep=self._sleep, vad=LoudnessVAD,
                                 turn_model=lambda: self.turn_model)
        self.events: list[dict] = []
        self.session: RealtimeSession | None = None

    async def _sleep(self, seconds: float) -> None:
        self.clock.t += seconds
        await asyncio.sleep(0)

    async def __aenter__(self) -> InteractionHarness:
        await self.orch.start()
        self.session = RealtimeSession(self.orch, SessionSettings(model="tiny-omni"), self.dialect, self._send,
                                       ServerMetrics(lambda: []))
        await self.settle()
        return self

    async def __aexit__(self, *exc_info) -> None:
        await self.session.close()
        await self.orch.stop()

    async def _send(self, text: str) -> None:
        """What goes on the wire: a text frame of JSON, read back as the client would."""
        self.events.append(json.loads(text))

    async def settle(self) -> None:
        """Let every task, routed output and queued event run."""
        for _ in range(20):
            await asyncio.sleep(0)

    async def client(self, event_type: str, **fields) -> None:
        await self.session.handle(json.dumps({"type": event_type, **fields}))
        await self.settle()

    async def speak(self, speech_ms: int, then_silence_ms: int = 0, then_speech_ms: int = 0) -> None:
        """Send, in one append, a tone of `speech_ms` (what the VAD hears as speech), silence after it and
        a tone of `then_speech_ms` after that."""
        def tone(ms: int) -> np.ndarray:
            return 0.3 * np.sin(2 * np.pi * 220 * np.arange(RATE * ms // 1000) / RATE)
        pcm = np.concatenate([tone(speech_ms), np.zeros(RATE * then_silence_ms // 1000), tone(then_speech_ms)])
        audio = base64.b64encode((pcm * 32767).astype("<i2").tobytes()).decode()
        await self.client("input_audio_buffer.append", audio=audio)

    async def wait_for(self, event_type: str, timeout_s: float = 5.0) -> dict:
        """The first `event_type` event, waiting for work on worker threads (semantic_vad's detector)."""
        for _ in range(int(timeout_s / 0.005)):
            if found := self.of_type(event_type):
                return found[0]
            await asyncio.sleep(0.005)
        raise TimeoutError(f"no {event_type} within {timeout_s} s; got {self.types()}")

    def of_type(self, event_type: str) -> list[dict]:
        return [e for e in self.events if e["type"] == event_type]

    def types(self) -> list[str]:
        return [e["type"] for e in self.events]

    @property
    def controller(self):
        return self.session.controller

    @property
    def thinker_id(self) -> str:
        return self.controller.session.context.thinker_id


def voice_pipeline() -> PipelineConfig:
    """tiny_pipeline's thinker between scripted speech stages (asr -> thinker -> tts)."""
    return dataclasses.replace(
        tiny_pipeline(), encoder=None, talker=None, vocoder=None, talker_sampling=None,
        asr=StageSpec("asr", "asr", WhisperConfig(partial_every_s=0.5), SchedulerConfig()),
        tts=StageSpec("tts", "tts", PiperVoiceConfig(), SchedulerConfig()),
        graph=StageGraph((Edge(StageKind.ASR, StageKind.THINKER), Edge(StageKind.THINKER, StageKind.TTS))))


async def harnessed_voice(scenario, config: PipelineConfig | None = None):
    """`scenario(harness)` on the voice pipeline (or `config`)."""
    async with InteractionHarness(config or voice_pipeline()) as harness:
        return await scenario(harness)
