"""Function tools a session's model may call, in the Hermes format Qwen2.5's chat template writes (and its
tool-call parsers read): the tools' signatures in the system message, a call as `<tool_call>` + JSON +
`</tool_call>` at the start of a reply, its result back as a user message in `<tool_response>` tags."""

from __future__ import annotations

import json
from dataclasses import dataclass

from stages.requests.tool_call import ToolCallConstraint

BEGIN, END = "<tool_call>\n", "\n</tool_call>"
CHOICES = ("auto", "none", "required")  # or the name of one tool
TOOLS_HEADER = ("\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
                "You are provided with function signatures within <tools></tools> XML tags:\n<tools>")
TOOLS_FOOTER = ("\n</tools>\n\nFor each function call, return a json object with function name and arguments "
                "within <tool_call></tool_call> XML tags:\n<tool_call>\n"
                '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>')


@dataclass(frozen=True, eq=False)
class FunctionTool:
    """A function the model may call: its `parameters` are the JSON schema (an object schema) of its arguments."""

    name: str
    description: str
    parameters: dict

    def signature(self) -> dict:
        return {"type": "function", "function": {"name": self.name, "description": self.description,
                                                 "parameters": self.parameters}}


@dataclass(frozen=True)
class ToolCall:
    """A call the model made: the function's name and its arguments as JSON text."""

    name: str
    arguments: str


@dataclass(frozen=True, eq=False)
class Tools:
    """A session's functions and how a reply may use them: `choice` auto (the model decides), none (it does
    not call), required (it calls one of them) or a function's name (it calls that one)."""

    functions: tuple[FunctionTool, ...] = ()
    choice: str = "auto"

    def system_text(self) -> str:
        """What the system message says of the tools after the instructions ("" without any)."""
        if not self.functions:
            return ""
        lines = "".join("\n" + json.dumps(tool.signature(), ensure_ascii=False) for tool in self.functions)
        return TOOLS_HEADER + lines + TOOLS_FOOTER

    @property
    def forced(self) -> bool:
        """A reply must be a call (required, or a named function)."""
        return bool(self.functions) and self.choice not in ("auto", "none")

    @property
    def may_call(self) -> bool:
        return bool(self.functions) and self.choice != "none"

    def constraint(self) -> ToolCallConstraint | None:
        """What a reply's generation is held to (None: nothing): a call of the allowed functions (see `closed`),
        forced or at the model's choice."""
        if not self.may_call:
            return None
        allowed = [tool for tool in self.functions if self.choice in (*CHOICES, tool.name)]
        calls = [{"type": "object", "properties": {"name": {"const": tool.name}, "arguments": closed(tool.parameters)},
                  "required": ["name", "arguments"], "additionalProperties": False} for tool in allowed]
        schema = calls[0] if len(calls) == 1 else {"anyOf": calls}
        return ToolCallConstraint(json.dumps(schema), BEGIN, END, forced=self.forced)

    def parse(self, text: str) -> ToolCall | None:
        """The call a reply's text makes (None: it is no complete call of one of the functions)."""
        body = text.strip()
        if not (body.startswith(BEGIN.strip()) and body.endswith(END.strip())):
            return None
        try:
            call = json.loads(body[len(BEGIN.strip()):-len(END.strip())])
        except ValueError:
            return None
        names = {tool.name for tool in self.functions}
        if not isinstance(call, dict) or call.get("name") not in names or not isinstance(call.get("arguments"), dict):
            return None
        return ToolCall(call["name"], json.dumps(call["arguments"], ensure_ascii=False))


def closed(parameters: dict) -> dict:
    """A function's parameters as a call is held to them: no properties beyond those named, unless the schema
    says otherwise (JSON schema allows any by default, and small models fill them with nested objects)."""
    return {"additionalProperties": False, **parameters}


def tool_response(output: str) -> str:
    """The text of the user message that gives the model a call's result."""
    return f"<tool_response>\n{output}\n</tool_response>"


NO_TOOLS = Tools()
