"""Checks shared by the frozen configs of stages (ValueErrors that name the field)."""

from __future__ import annotations


def require_positive_ints(owner: object, *names: str) -> None:
    """Every named attribute of `owner` must be an int > 0 (bools are not ints here)."""
    for name in names:
        value = getattr(owner, name)
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
