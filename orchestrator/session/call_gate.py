"""What holds a reply's words back while its model may still be starting a tool call."""

from __future__ import annotations

from stages.requests import ThinkerStep

Held = tuple[int, ThinkerStep, str]  # a token's position in the reply, its step, its text


class CallGate:
    """In front of a reply's text and voice when the model may call a tool at its choice: holds each token
    while the reply's text could still be the start of `begin` (a call starts the reply or never comes),
    then lets every held token through at once (the reply is a message, and so is everything after) or
    none, ever (`is_call`: the reply is a call, which is neither shown nor spoken). `forced`: the reply must be
    a call; nothing passes."""

    def __init__(self, begin: str, forced: bool = False) -> None:
        self.begin = begin
        self.text = ""
        self.held: list[Held] | None = None if forced else []  # None: decided
        self.is_call = forced

    def push(self, position: int, step: ThinkerStep, text: str) -> list[Held]:
        """The tokens to pass on now, in order."""
        if self.held is None:
            return [] if self.is_call else [(position, step, text)]
        self.held.append((position, step, text))
        self.text += text
        if self.text.startswith(self.begin):
            self.is_call, self.held = True, None
            return []
        return [] if self.begin.startswith(self.text) else self._release()

    def end(self) -> list[Held]:
        """The reply's generation ended: what is still held is a message's."""
        return [] if self.held is None else self._release()

    def _release(self) -> list[Held]:
        held, self.held = self.held, None
        return held
