"""The OpenAI Agents SDK (`openai-agents`) against LiveServe: a RealtimeAgent run by a RealtimeRunner with
the SDK's default session settings (semantic_vad, audio out, voice 'ash', input transcription on), through
a spoken turn, a text turn and a barge-in.

    python examples/agents_sdk_turns.py ws://127.0.0.1:8000/v1/realtime [--api-key KEY]

Prints one JSON object: each turn's response status, the server events seen, every error event, and every
server event the SDK failed to parse. Against the embedded default (the voice agent) every default setting
is taken: its ASR stage transcribes the user's speech, 'ash' names the one voice, and tracing 'auto' keeps
the session's traces where the server keeps traces (runtime.trace_dir).
"""

from __future__ import annotations

import asyncio

from agents.realtime import RealtimeAgent, RealtimeRunner
from pydantic import ValidationError

from realtime_example import Microphone, ServerEvents, answer_to_last_words, main


class Watcher(ServerEvents):
    """Reads the session's events: the server's (ServerEvents), the SDK's parse failures and how often it
    stopped playing a reply cut by speech (its audio_interrupted events)."""

    def __init__(self, session) -> None:
        super().__init__()
        self.session, self.parse_failures, self.interrupted = session, [], 0

    async def run(self) -> None:
        try:
            async for event in self.session:
                if event.type == "raw_model_event" and event.data.type == "raw_server_event":
                    self.record(event.data.data)
                elif event.type == "error" and isinstance(event.error, ValidationError):
                    self.parse_failures.append(str(event.error)[:300])
                elif event.type == "audio_interrupted":
                    self.interrupted += 1
        except Exception as exc:  # noqa: BLE001 - the SDK raises what it could not handle: report it
            self.parse_failures.append(repr(exc)[:300])


async def next_done(watcher: Watcher, timeout_s: float = 90) -> dict:
    return await asyncio.wait_for(watcher.done.get(), timeout_s)


async def turns(url: str, api_key: str) -> dict:
    agent = RealtimeAgent(name="Assistant", instructions="Answer in one short sentence.")
    session = await RealtimeRunner(agent).run(model_config={"url": url, "api_key": api_key})
    async with session:
        watcher = Watcher(session)
        reading = asyncio.ensure_future(watcher.run())
        microphone = Microphone(lambda chunk: session.send_audio(chunk))
        microphone.start()
        result = {}
        microphone.say("q_capital_espeak_24k.wav")  # semantic_vad ends the turn; the server answers
        result["spoken"] = (await next_done(watcher))["status"]
        await session.send_message("Say hello.")
        result["text"] = (await next_done(watcher))["status"]
        watcher.audio.clear()
        microphone.say("q_story_espeak_24k.wav")
        await asyncio.wait_for(watcher.audio.wait(), 90)  # the reply is playing: speak over it
        microphone.say("q_spider_espeak_24k.wav")
        cut = await next_done(watcher)
        answer = await answer_to_last_words(microphone, lambda: next_done(watcher))  # to what was said over it
        result["barge_in"] = {"reply": cut["status"], "reply_cut": cut["output"][0]["id"] in watcher.truncated,
                              "sdk_interrupted_playback": watcher.interrupted, "answer": answer["status"]}
        await microphone.stop()
        reading.cancel()
    return {"turns": result, "server_events": dict(watcher.types), "errors": watcher.errors,
            "parse_failures": watcher.parse_failures}


if __name__ == "__main__":
    main(turns, __doc__.splitlines()[0])
