"""Client mistakes, reported as Realtime `error` events; the session goes on."""

from __future__ import annotations


class RealtimeError(Exception):
    """An error the client caused; becomes an `error` event shaped like OpenAI's."""

    def __init__(self, code: str, message: str, param: str | None = None, error_type: str = "invalid_request_error"):
        super().__init__(message)
        self.code, self.message, self.param, self.error_type = code, message, param, error_type

    def payload(self, event_id: str | None) -> dict:
        return {"type": self.error_type, "code": self.code, "message": self.message, "param": self.param,
                "event_id": event_id}


def require(condition: bool, code: str, message: str, param: str | None = None) -> None:
    if not condition:
        raise RealtimeError(code, message, param)


def shown(value: object, limit: int = 80) -> str:
    """`value` as an error message quotes it: its repr, cut to `limit` characters."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def lone_surrogate_at(event: object) -> str | None:
    """The path of the first string in `event` (JSON values) that is not valid Unicode, or None."""
    stack: list[tuple[object, str]] = [(event, "")]
    while stack:
        value, path = stack.pop()
        if isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                return path or "event"
        elif isinstance(value, dict):
            stack.extend((v, f"{path}.{k}" if path else str(k)) for k, v in value.items())
            stack.extend((k, path or "event") for k in value)
        elif isinstance(value, list):
            stack.extend((v, f"{path}[{i}]") for i, v in enumerate(value))
    return None
