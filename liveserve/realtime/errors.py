"""Client mistakes, reported as Realtime `error` events; the session goes on."""

from __future__ import annotations

from orchestrator.interaction.events import ContextFull

MAX_EVENT_ID_CHARS = 256


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


def event_id_of(event: dict) -> str | None:
    """The client's event id to echo in an error: a short string, else none."""
    event_id = event.get("event_id")
    return event_id if isinstance(event_id, str) and len(event_id) <= MAX_EVENT_ID_CHARS else None


class refusal:
    """A context in which the controller's ValueError/KeyError (a request it cannot honour) becomes an
    error event with `code` and `param`."""

    def __init__(self, code: str, param: str) -> None:
        self.code, self.param = code, param

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind, exc, traceback) -> bool:
        if isinstance(exc, (KeyError, ValueError)) and not isinstance(exc, RealtimeError):
            message = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
            code = "invalid_value" if isinstance(exc, ContextFull) else self.code
            raise RealtimeError(code, str(message), self.param) from None
        return False
