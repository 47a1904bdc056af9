"""`tools` and `tool_choice` of `session.update` and `response.create`, checked, and their JSON views."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from liveserve.realtime.errors import require, shown
from orchestrator.session.tools import CHOICES, FunctionTool, Tools

NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")  # OpenAI's rule for function names
MAX_TOOLS = 128


def parse_tools(value: Any, where: str) -> tuple[FunctionTool, ...]:
    """The function tools of a `tools` list; RealtimeError naming the field of the first mistake."""
    require(isinstance(value, list), "invalid_type", "tools must be a list", where)
    require(len(value) <= MAX_TOOLS, "invalid_value", f"at most {MAX_TOOLS} tools, got {len(value)}", where)
    tools = tuple(_function(tool, f"{where}[{i}]") for i, tool in enumerate(value))
    for i, tool in enumerate(tools):
        require(all(other.name != tool.name for other in tools[:i]), "invalid_value",
                f"two tools are named {shown(tool.name)}", f"{where}[{i}].name")
    return tools


def _function(tool: Any, where: str) -> FunctionTool:
    require(isinstance(tool, dict), "invalid_type", "a tool must be an object", where)
    require(tool.get("type", "function") == "function", "invalid_value",
            f"only function tools can be called, got type {shown(tool.get('type'))}", f"{where}.type")
    name = tool.get("name")
    require(isinstance(name, str) and NAME.match(name) is not None, "invalid_value",
            f"a function's name is 1-64 letters, digits, _ or -, got {shown(name)}", f"{where}.name")
    description = tool.get("description", "")
    require(isinstance(description, str), "invalid_type", "description must be a string", f"{where}.description")
    parameters = tool.get("parameters", {"type": "object", "properties": {}})
    require(isinstance(parameters, dict) and parameters.get("type", "object") == "object", "invalid_value",
            f"parameters must be a JSON schema of an object, got {shown(parameters)}", f"{where}.parameters")
    return FunctionTool(name, description, {"type": "object", **parameters})


def parse_choice(value: Any, tools: tuple[FunctionTool, ...], where: str) -> str:
    """auto, none, required or a function's name (`{"type": "function", "name": ...}`, or the beta's
    `{"type": "function", "function": {"name": ...}}`)."""
    if isinstance(value, dict):
        require(value.get("type") == "function", "invalid_value",
                f"tool_choice must be auto, none, required or a function, got {shown(value)}", where)
        name = value.get("name", (value.get("function") or {}).get("name"))
        require(name in {tool.name for tool in tools}, "invalid_value",
                f"tool_choice names a function the session has no tool for: {shown(name)}", f"{where}.name")
        return name
    require(value in CHOICES, "invalid_value", f"tool_choice must be auto, none, required or a function, "
            f"got {shown(value)}", where)
    return value  # required without tools is taken (clients set it before their tools): there is nothing to call


def apply_tools(tools: Tools, body: dict, where: str) -> Tools:
    """`tools` after the `tools` and `tool_choice` of an update body (`where`: its path)."""
    functions = parse_tools(body["tools"], f"{where}.tools") if body.get("tools") is not None else tools.functions
    choice = body.get("tool_choice")
    if choice is None:
        names = {tool.name for tool in functions}
        choice = tools.choice if tools.choice in (*CHOICES, *names) else "auto"
    return replace(tools, functions=functions, choice=parse_choice(choice, functions, f"{where}.tool_choice"))


def tools_json(tools: Tools) -> list[dict]:
    return [{"type": "function", "name": tool.name, "description": tool.description, "parameters": tool.parameters}
            for tool in tools.functions]


def choice_json(tools: Tools) -> str | dict:
    return tools.choice if tools.choice in CHOICES else {"type": "function", "name": tools.choice}
