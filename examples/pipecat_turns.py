"""pipecat (`pipecat-ai`) against LiveServe: its OpenAIRealtimeLLMService with SemanticTurnDetection (the
setting of pipecat's own realtime example) through a text turn, a spoken turn and a barge-in.

    python examples/pipecat_turns.py ws://127.0.0.1:8000/v1/realtime [--api-key KEY]

Prints one JSON object: the responses pipecat saw end, their audio, and every ErrorFrame. To pipecat an
`error` event is fatal, and so is a server event it fails to parse (its receive loop ends), so a run that
completes every turn with no ErrorFrame had neither.
"""

from __future__ import annotations

import asyncio

from pipecat.frames.frames import (
    ErrorFrame, Frame, InputAudioRawFrame, LLMContextFrame, LLMFullResponseEndFrame, TTSAudioRawFrame,
)
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.services.openai.realtime.events import (
    AudioConfiguration, AudioInput, SemanticTurnDetection, SessionProperties,
)
from pipecat.services.openai.realtime.llm import OpenAIRealtimeLLMService
from pipecat.workers.runner import WorkerRunner

from realtime_example import Microphone, main

RATE = 24000


class Tap(FrameProcessor):
    """Passes every frame on; records ErrorFrames, reply audio and the end of each response."""

    def __init__(self) -> None:
        super().__init__()
        self.errors: list[str] = []
        self.audio_bytes = [0]  # per response, the last one in progress
        self.ended: asyncio.Queue[int] = asyncio.Queue()  # audio bytes of each response that ended
        self.audio = asyncio.Event()

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if isinstance(frame, ErrorFrame):
            self.errors.append(frame.error)
        elif isinstance(frame, TTSAudioRawFrame):
            self.audio_bytes[-1] += len(frame.audio)
            self.audio.set()
        elif isinstance(frame, LLMFullResponseEndFrame):
            self.ended.put_nowait(self.audio_bytes[-1])
            self.audio_bytes.append(0)
        await self.push_frame(frame, direction)


async def next_end(tap: Tap, timeout_s: float = 90) -> int:
    return await asyncio.wait_for(tap.ended.get(), timeout_s)


async def turns(url: str, api_key: str) -> dict:
    session = SessionProperties(instructions="Answer in one short sentence.", audio=AudioConfiguration(
        input=AudioInput(turn_detection=SemanticTurnDetection())))
    llm = OpenAIRealtimeLLMService(api_key=api_key, base_url=url,
                                   settings=OpenAIRealtimeLLMService.Settings(session_properties=session))
    before, after = Tap(), Tap()  # ErrorFrames travel upstream, replies downstream
    worker = PipelineWorker(Pipeline([before, llm, after]), idle_timeout_secs=None,
                            params=PipelineParams(audio_in_sample_rate=RATE, audio_out_sample_rate=RATE))
    runner = WorkerRunner(handle_sigint=False)
    await runner.add_workers(worker)
    running = asyncio.ensure_future(runner.run())
    microphone = Microphone(lambda chunk: worker.queue_frame(InputAudioRawFrame(chunk, RATE, 1)))
    result = {}
    try:
        await worker.queue_frame(LLMContextFrame(LLMContext([{"role": "user", "content": "Say hello."}])))
        result["text"] = await next_end(after)
        microphone.start()
        microphone.say("q_capital_espeak_24k.wav")  # semantic_vad ends the turn; the server answers
        result["spoken"] = await next_end(after)
        after.audio.clear()
        microphone.say("q_story_espeak_24k.wav")
        await asyncio.wait_for(after.audio.wait(), 90)  # the reply is playing: speak over it
        microphone.say("q_spider_espeak_24k.wav")
        result["barge_in"] = {"reply": await next_end(after), "answer": await next_end(after)}
    finally:
        await microphone.stop()
        await worker.cancel()
        await asyncio.gather(running, return_exceptions=True)
    return {"turns_audio_bytes": result, "errors": before.errors + after.errors}


if __name__ == "__main__":
    main(turns, __doc__.splitlines()[0])
