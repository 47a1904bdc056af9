"""Request ids in the stages, made in one place."""

from __future__ import annotations


class RequestId(str):
    """A stage request's id: the session it serves, its role there and which generation of that role
    (a context rebuild, a turn, an item). It is the string "{session}/{role}#{generation}", so stages,
    the wire and the metrics see a plain string key (hashed and compared as one), with its parts kept
    for whoever needs them (per-session figures), never parsed back."""

    session: str
    role: str
    generation: str | int

    def __new__(cls, session: str, role: str, generation: str | int = 0) -> RequestId:
        self = super().__new__(cls, f"{session}/{role}#{generation}")
        self.session, self.role, self.generation = session, role, generation
        return self

    def __getnewargs__(self) -> tuple[str, str, str | int]:
        return self.session, self.role, self.generation
