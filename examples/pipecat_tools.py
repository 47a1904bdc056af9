"""pipecat (`pipecat-ai`) calling a function through LiveServe: its OpenAIRealtimeLLMService with one function
registered (`register_function`, the tool in the session's properties, `tool_choice` required). Asked where an
order is, the model calls it, pipecat runs it and sends its result, and the model answers by voice.

    python examples/pipecat_tools.py ws://127.0.0.1:8000/v1/realtime [--api-key KEY]

Prints one JSON object: the calls the function got (its arguments), the audio of the answer, its transcript,
and every ErrorFrame (to pipecat an `error` event, or a server event it fails to parse, is fatal).
"""

from __future__ import annotations

import asyncio

from pipecat.adapters.llm.schemas.function_schema import FunctionSchema
from pipecat.adapters.llm.schemas.tools_schema import ToolsSchema
from pipecat.frames.frames import LLMRunFrame, TTSTextFrame
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.aggregators.llm_response_universal import LLMContextAggregatorPair
from pipecat.services.llm_service import FunctionCallParams
from pipecat.services.openai.realtime.events import SessionProperties
from pipecat.services.openai.realtime.llm import OpenAIRealtimeLLMService
from pipecat.workers.runner import WorkerRunner

from pipecat_turns import RATE, Tap, next_end
from realtime_example import main

ORDER_STATUS = FunctionSchema(
    name="order_status", description="Where an order is now.",
    properties={"order_id": {"type": "integer", "minimum": 1, "maximum": 99999, "description": "The order's number."}},
    required=["order_id"])


class Transcript(Tap):
    """A Tap that also keeps the text of the replies' audio."""

    def __init__(self) -> None:
        super().__init__()
        self.text: list[str] = []

    async def process_frame(self, frame, direction) -> None:
        if isinstance(frame, TTSTextFrame):
            self.text.append(frame.text)
        await super().process_frame(frame, direction)


async def turns(url: str, api_key: str) -> dict:
    calls: list[dict] = []

    async def order_status(params: FunctionCallParams) -> None:
        calls.append(dict(params.arguments))
        await params.result_callback({"status": f"Order {params.arguments['order_id']} was delivered on Tuesday."})

    session = SessionProperties(instructions="Answer in one short sentence.", tool_choice="required",
                                max_output_tokens=96)
    llm = OpenAIRealtimeLLMService(api_key=api_key, base_url=url,
                                   settings=OpenAIRealtimeLLMService.Settings(session_properties=session))
    llm.register_function("order_status", order_status)
    context = LLMContext([{"role": "user", "content": "Where is my order 42?"}], tools=ToolsSchema([ORDER_STATUS]))
    user, assistant = LLMContextAggregatorPair(context)  # the assistant's asks for the answer to a result
    before, after = Transcript(), Transcript()  # ErrorFrames travel upstream, replies downstream
    worker = PipelineWorker(Pipeline([before, user, llm, after, assistant]), idle_timeout_secs=None,
                            params=PipelineParams(audio_in_sample_rate=RATE, audio_out_sample_rate=RATE))
    runner = WorkerRunner(handle_sigint=False)
    await runner.add_workers(worker)
    running = asyncio.ensure_future(runner.run())
    try:
        await worker.queue_frame(LLMRunFrame())
        while not calls:  # the response that calls ends without audio; the answer after it speaks
            await next_end(after)
        answer_audio = await next_end(after)
    finally:
        await worker.cancel()
        await asyncio.gather(running, return_exceptions=True)
    return {"calls": calls, "answer_audio_bytes": answer_audio, "answer": "".join(after.text),
            "errors": before.errors + after.errors}


if __name__ == "__main__":
    main(turns, __doc__.splitlines()[0])
