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
