"""The OpenAI Agents SDK (`openai-agents`) calling a function through LiveServe: a RealtimeAgent with one
function tool, `tool_choice` required. Asked where an order is, the model calls the tool (its arguments held
to the tool's schema as they are decoded), the SDK runs it and sends its output, and the model answers from
it by voice.

    python examples/agents_sdk_tools.py ws://127.0.0.1:8000/v1/realtime [--api-key KEY]

Prints one JSON object: the calls the tool got (its arguments), each response's status and output type, the
transcript of the spoken answer, the server events seen, every error event, and every server event the SDK
failed to parse.
"""

from __future__ import annotations

import asyncio
from typing import Annotated

from agents import function_tool
from agents.realtime import RealtimeAgent, RealtimeRunner
from pydantic import Field

from agents_sdk_turns import Watcher, next_done
from realtime_example import main

DELIVERY = "Order {order_id} was delivered on Tuesday."


async def turns(url: str, api_key: str) -> dict:
    calls: list[dict] = []

    @function_tool
    def order_status(order_id: Annotated[int, Field(ge=1, le=99999)]) -> str:
        """Where an order is now.

        Args:
            order_id: The order's number.
        """
        calls.append({"order_id": order_id})
        return DELIVERY.format(order_id=order_id)

    agent = RealtimeAgent(name="Assistant", instructions="Answer in one short sentence.", tools=[order_status])
    settings = {"tool_choice": "required", "max_output_tokens": 64}
    session = await RealtimeRunner(agent, config={"model_settings": settings}).run(
        model_config={"url": url, "api_key": api_key})
    async with session:
        watcher = Watcher(session)
        reading = asyncio.ensure_future(watcher.run())
        await session.send_message("Where is my order 42?")
        call, answer = await next_done(watcher), await next_done(watcher)
        reading.cancel()
    outputs = [{"status": done["status"], "output": [item["type"] for item in done["output"]]}
               for done in (call, answer)]
    transcript = "".join(part.get("transcript") or "" for item in answer["output"] for part in item.get("content", []))
    return {"calls": calls, "responses": outputs, "answer": transcript, "server_events": dict(watcher.types),
            "errors": watcher.errors, "parse_failures": watcher.parse_failures}


if __name__ == "__main__":
    main(turns, __doc__.splitlines()[0])
