"""The speech clips the lab speaks (the client, the replay's barge-ins, the duplex speech loop) and the tests hear;
README.md beside them says what each says and where it comes from."""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

BARGE_IN_CLIP = "bargein_wait_espeak_24k.wav"
SPOKEN_WORDS = {  # what each clip says, as README.md gives it
    "q_capital_espeak_24k.wav": "What is the capital of France?",
    "q_spider_espeak_24k.wav": "How many legs does a spider have?",
    "q_story_espeak_24k.wav": "Tell me a short story about a lighthouse keeper.",
    "q_sky_espeak_24k.wav": "Can you explain why the sky is blue?",
    "q_tokyo_flite_24k.wav": "What time is it in Tokyo right now?",
    BARGE_IN_CLIP: "Stop. Wait a second, I have a different question.",
    "librivox_austen_0870_24k.wav": "and mister john dashwood had then leisure to consider how much there might be "
                                    "prudently in his power to do for them",
    "librivox_austen_0890_24k.wav": "unless to be rather cold hearted and rather selfish is to be ill disposed",
}


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
