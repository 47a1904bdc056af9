"""The speech clips the lab speaks (the client, the replay's barge-ins, the duplex speech loop) and the tests hear;
README.md beside them says what each says and where it comes from."""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

BARGE_IN_CLIP = "bargein_wait_espeak_24k.wav"


def clips_dir() -> Path:
    """The directory of the shipped clips (installed package data)."""
    return Path(str(files("lab.clips")))


def clip_path(name: str) -> Path:
    """One shipped clip by file name; FileNotFoundError naming the clips there if absent."""
    path = clips_dir() / name
    if not path.is_file():
        names = ", ".join(sorted(p.name for p in clips_dir().glob("*.wav")))
        raise FileNotFoundError(f"no shipped clip {name!r} (there are: {names})")
    return path
