"""Checks shared by the frozen configs of stages (ValueErrors that name the field)."""

from __future__ import annotations

from collections.abc import Callable


def require_positive_ints(owner: object, *names: str) -> None:
    """Every named attribute of `owner` must be an int > 0 (bools are not ints here)."""
    for name in names:
        value = getattr(owner, name)
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")


def require_number(owner: object, name: str, ok: Callable[[float], bool], what: str) -> None:
    """Attribute `name` of `owner` must be an int or float (not a bool) for which `ok` holds; `what` says so."""
    value = getattr(owner, name)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not ok(value):
        raise ValueError(f"{name} must be {what}, got {value!r}")
