"""Tool call constraints of the tests: two tools (an enum, bounded integers, a nested object, required lists),
and a small JSON schema check of what the stage generated."""

from __future__ import annotations

import json

from stages.requests.tool_call import ToolCallConstraint

WEATHER = {"type": "object", "properties": {
    "name": {"const": "get_weather"},
    "arguments": {"type": "object", "properties": {
        "city": {"type": "string", "enum": ["Paris", "Rome", "New York"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 14},
        "units": {"type": "object", "properties": {"temperature": {"enum": ["celsius", "fahrenheit"]}},
                  "required": ["temperature"], "additionalProperties": False},
    }, "required": ["city", "days", "units"], "additionalProperties": False},
}, "required": ["name", "arguments"], "additionalProperties": False}
TIMER = {"type": "object", "properties": {
    "name": {"const": "set_timer"},
    "arguments": {"type": "object", "properties": {"minutes": {"type": "integer", "minimum": 1, "maximum": 90}},
                  "required": ["minutes"], "additionalProperties": False},
}, "required": ["name", "arguments"], "additionalProperties": False}
SCHEMA = {"anyOf": [WEATHER, TIMER]}
FORCED = ToolCallConstraint(json.dumps(SCHEMA))
AUTO = ToolCallConstraint(json.dumps(SCHEMA), forced=False)


def is_valid(value, schema: dict) -> bool:
    """Whether `value` satisfies `schema`, in the keywords SCHEMA uses."""
    if "anyOf" in schema:
        return any(is_valid(value, option) for option in schema["anyOf"])
    if "const" in schema and value != schema["const"] or "enum" in schema and value not in schema["enum"]:
        return False
    kind = schema.get("type")
    if kind == "object":
        properties = schema.get("properties", {})
        return (isinstance(value, dict) and all(key in value for key in schema.get("required", []))
                and (schema.get("additionalProperties", True) or set(value) <= set(properties))
                and all(is_valid(item, properties[key]) for key, item in value.items() if key in properties))
    if kind == "integer":
        return (isinstance(value, int) and not isinstance(value, bool)
                and schema.get("minimum", value) <= value <= schema.get("maximum", value))
    return kind != "string" or isinstance(value, str)


def assert_valid_call(text: str) -> None:
    """`text` is a call: begin, a JSON value valid for SCHEMA, end."""
    assert text.startswith(FORCED.begin) and text.endswith(FORCED.end), text
    value = json.loads(text[len(FORCED.begin): -len(FORCED.end)])
    assert is_valid(value, SCHEMA), value
