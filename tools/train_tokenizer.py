"""Train tiny-omni's text tokenizer: a byte-level BPE of 8192 tokens.

The corpus is English text that Debian ships, about 7.8 M characters:
  - the prose parts of the Python 3.11 manual (tutorial, FAQ, HOWTOs, what's new,
    language reference, ...), as reStructuredText sources: instructional text;
  - the fortune cookie files: quotations, jokes and short dialogues;
  - the example sentences of WordNet's glosses: everyday English usage.
Get it with:

    apt-get install python3.11-doc fortunes wordnet-base

then, from the repository root:

    .venv/bin/python tools/train_tokenizer.py

which writes stages/models/assets/tiny_bpe.json. Files are read in sorted
order and training is deterministic: the same packages give the same JSON. It
takes a few seconds on two cores.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from stages.models.tokenizer import SPECIAL_TOKENS

VOCAB_SIZE = 8192
PYTHON_DOCS = Path("/usr/share/doc/python3.11/html/_sources")
PYTHON_PROSE_PARTS = {
    "extending", "faq", "glossary", "howto", "installing",
    "reference", "tutorial", "using", "whatsnew",
}
FORTUNES = Path("/usr/share/games/fortunes")
WORDNET = Path("/usr/share/wordnet")
OUTPUT = Path(__file__).resolve().parents[1] / "stages/models/assets/tiny_bpe.json"
INSTALL_HINT = "apt-get install python3.11-doc fortunes wordnet-base"


def python_prose() -> list[str]:
    paths = sorted(PYTHON_DOCS.rglob("*.rst.txt"))
    return [_read(p) for p in paths if _manual_part(p) in PYTHON_PROSE_PARTS]


def fortunes() -> list[str]:
    return [_read(p) for p in sorted(FORTUNES.iterdir()) if p.suffix not in {".dat", ".u8"}]


def wordnet_examples() -> list[str]:
    """The quoted examples in each synset's gloss: `... | definition; "an example"`."""
    examples = []
    for pos in ("adj", "adv", "noun", "verb"):
        for line in _read(WORDNET / f"data.{pos}").splitlines():
            if not line.startswith("  ") and "|" in line:
                examples += re.findall(r'"([^"]+)"', line.split("|", 1)[1])
    return examples


def _manual_part(path: Path) -> str:
    """The top-level part of the manual: a folder ("tutorial/...") or a page ("glossary.rst.txt")."""
    return path.relative_to(PYTHON_DOCS).parts[0].split(".")[0]


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def check_corpus() -> None:
    missing = [p for p in (PYTHON_DOCS, FORTUNES / "people", WORDNET / "data.noun") if not p.exists()]
    if missing:
        sys.exit(f"corpus missing: {', '.join(map(str, missing))}\ninstall it with: {INSTALL_HINT}")


def train(texts: list[str]) -> Tokenizer:
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        min_frequency=2,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer)
    if tokenizer.get_vocab_size() != VOCAB_SIZE:
        sys.exit(f"corpus too small: learned {tokenizer.get_vocab_size()} tokens, wanted {VOCAB_SIZE}")
    return tokenizer


def main() -> None:
    check_corpus()
    texts = python_prose() + fortunes() + wordnet_examples()
    print(f"corpus: {len(texts)} texts, {sum(map(len, texts)) / 1e6:.1f} M characters")
    tokenizer = train(texts)
    OUTPUT.parent.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(OUTPUT), pretty=False)
    print(f"wrote {OUTPUT} ({OUTPUT.stat().st_size / 1024:.0f} KiB, {tokenizer.get_vocab_size()} tokens)")


if __name__ == "__main__":
    main()
