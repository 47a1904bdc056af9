"""LiveKit Agents' OpenAI realtime plugin (`livekit-plugins-openai`) against LiveServe: its RealtimeModel and
RealtimeSession with the plugin's default settings (semantic_vad, input transcription, voice 'marin'), in
no LiveKit room and with no LiveKit server, through a spoken turn, a text turn and a barge-in.

    python examples/livekit_turns.py ws://127.0.0.1:8000/v1/realtime [--api-key KEY]

Prints one JSON object: each turn's response status and the reply audio the plugin handed on, the server
events seen, every `error` event (the server's, and the session's own `error` events) and every server event
the plugin failed to handle. To the plugin a reply stopped at the token limit (status `incomplete`) is a
failed generation, so the session asks for replies of up to REPLY_TOKENS tokens, which short answers end
well within, whatever the server's own limit.
"""

from __future__ import annotations

import asyncio
import logging

import aiohttp
from livekit import rtc
from livekit.plugins.openai import realtime

from realtime_example import RATE, Microphone, ServerEvents, answer_to_last_words, main

REPLY_TOKENS = 64


class Listener(ServerEvents, logging.Handler):
    """Reads the session: the server's events (ServerEvents), the plugin's own `error` events, its handler
    failures (logged as "failed to handle event"), and per response the reply audio it handed on."""

    def __init__(self, session: realtime.RealtimeSession) -> None:
        ServerEvents.__init__(self)
        logging.Handler.__init__(self)
        self.plugin_errors, self.parse_failures = [], []
        self.audio_ms: dict[str, asyncio.Future[int]] = {}  # by response id
        session.on("openai_server_event_received", self.record)
        session.on("error", lambda event: self.plugin_errors.append(repr(event.error)[:300]))
        session.on("generation_created", self._generation)
        logging.getLogger("livekit.agents").addHandler(self)

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage() == "failed to handle event":
            self.parse_failures.append(repr(record.exc_info[1])[:300] if record.exc_info else record.getMessage())

    def _generation(self, generation) -> None:
        self.audio_ms[generation.response_id] = asyncio.ensure_future(audio_ms(generation))


async def audio_ms(generation) -> int:
    """How much reply audio the plugin's generation handed on, in ms."""
    total = 0
    async for message in generation.message_stream:
        async for frame in message.audio_stream:
            total += frame.samples_per_channel * 1000 // frame.sample_rate
    return total


async def next_turn(listener: Listener, timeout_s: float = 90) -> dict:
    """The next response to end: its status, output item and the audio the plugin handed on."""
    response = await asyncio.wait_for(listener.done.get(), timeout_s)
    heard = await asyncio.wait_for(listener.audio_ms.pop(response["id"]), timeout_s)
    return {"status": response["status"], "audio_ms": heard, "item": (response["output"] or [{}])[0].get("id")}


async def say_to(session: realtime.RealtimeSession, text: str) -> None:
    """A typed user message, as AgentSession.generate_reply(user_input=...) sends one: added to the chat
    context, then a reply asked for."""
    chat_ctx = session.chat_ctx.copy()
    chat_ctx.add_message(role="user", content=text)
    await session.update_chat_ctx(chat_ctx)
    await session.generate_reply()


async def turns(url: str, api_key: str) -> dict:
    async with aiohttp.ClientSession() as http:
        model = realtime.RealtimeModel(base_url=url, api_key=api_key, http_session=http)
        model.update_options(max_response_output_tokens=REPLY_TOKENS)
        session = model.session()
        listener = Listener(session)
        await session.update_instructions("Answer in one short sentence.")

        async def push(chunk: bytes) -> None:
            session.push_audio(rtc.AudioFrame(chunk, RATE, 1, len(chunk) // 2))

        microphone = Microphone(push)
        microphone.start()
        result = {}
        try:
            microphone.say("q_capital_espeak_24k.wav")  # semantic_vad ends the turn; the server answers
            result["spoken"] = await next_turn(listener)
            await say_to(session, "Say hello.")
            result["text"] = await next_turn(listener)
            listener.audio.clear()
            microphone.say("q_story_espeak_24k.wav")
            await asyncio.wait_for(listener.audio.wait(), 90)  # the reply is playing: speak over it
            microphone.say("q_spider_espeak_24k.wav")
            cut = await next_turn(listener)
            answer = await answer_to_last_words(microphone, lambda: next_turn(listener))  # to what was said over it
            result["barge_in"] = {"reply": cut, "reply_cut": cut["item"] in listener.truncated, "answer": answer}
        finally:
            await microphone.stop()
            await session.aclose()
            logging.getLogger("livekit.agents").removeHandler(listener)
    return {"turns": result, "server_events": dict(listener.types), "errors": listener.errors,
            "plugin_errors": listener.plugin_errors, "parse_failures": listener.parse_failures}


if __name__ == "__main__":
    main(turns, __doc__.splitlines()[0])
