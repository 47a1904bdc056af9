import random

import pytest
from tokenizers import Tokenizer, models

from stages.models.tokenizer import SPECIAL_TOKENS, IncrementalDetokenizer, TextTokenizer

# The utterances of the speech clips the client ships (lab/clips/README.md).
FIXTURE_SENTENCES = [
    "What is the capital of France?",
    "How many legs does a spider have?",
    "Tell me a short story about a lighthouse keeper.",
    "Can you explain why the sky is blue?",
    "Stop. Wait a second, I have a different question.",
    "What time is it in Tokyo right now?",
    "and mister john dashwood had then leisure to consider how much there might be "
    "prudently in his power to do for them",
    "unless to be rather cold hearted and rather selfish is to be ill disposed",
]
PARAGRAPH = (
    "Sure! The sky looks blue because of a process called Rayleigh scattering. Sunlight "
    "is made up of many colors, and when it enters the atmosphere, the shorter blue "
    "wavelengths are scattered much more strongly by the gas molecules in the air than "
    "the longer red ones. So when you look up, you see blue light coming from every "
    "direction. At sunset, the light travels through more air, so most of the blue is "
    "scattered away and the sky turns orange and red."
)
MIXED = "Crème brûlée for 2, s'il vous plaît 🍮🙂! 東京は今何時ですか？ 👩‍👩‍👧 🇫🇷 naïve café Ω≈ç√"


@pytest.fixture(scope="module")
def tok() -> TextTokenizer:
    return TextTokenizer.default()


def chars_per_token(tok: TextTokenizer, texts: list[str]) -> float:
    return sum(map(len, texts)) / sum(len(tok.encode(t)) for t in texts)


def byte_token_ids(tok: TextTokenizer) -> list[int]:
    """The id of the one-byte token for each byte value."""
    by_bytes = {tok.token_bytes(i): i for i in range(tok.vocab_size)}
    return [by_bytes[bytes([b])] for b in range(256)]


@pytest.mark.parametrize(
    "text",
    [
        "",
        "Hello, world! It's 3:45 pm.\n\tIndented   spaces  and trailing space ",
        "Ångström, naïve façade, jalapeño, Zürich, Øresund, Œuvre",
        "東京は今何時ですか？ 北京欢迎你。서울 날씨 어때요?",
        "Party 🎉🥳 family 👩‍👩‍👧 flag 🇯🇵 skin tone 👍🏽 rainbow 🏳️‍🌈",
        "\x00\x07 control \r\n bytes \u200b zero width \ufeff bom",
    ],
)
def test_text_round_trips_exactly(tok, text):
    assert tok.decode(tok.encode(text)) == text


def test_vocabulary_has_8192_tokens(tok):
    assert tok.vocab_size == 8192


def test_special_tokens_are_single_ids(tok):
    ids = [
        tok.endoftext_id, tok.im_start_id, tok.im_end_id,
        tok.audio_start_id, tok.audio_end_id, tok.audio_pad_id,
    ]
    assert [tok.encode(name) for name in SPECIAL_TOKENS] == [[i] for i in ids]
    assert len(set(ids)) == 6
    assert all(tok.is_special(i) for i in ids)
    assert not any(tok.is_special(i) for i in tok.encode("hello <|im_start"))


def test_special_tokens_inside_text_are_not_split(tok):
    chat = "<|im_start|>user\nhi there<|im_end|><|audio_start|><|audio_pad|><|audio_pad|><|audio_end|>"
    ids = tok.encode(chat)
    assert ids[0] == tok.im_start_id
    assert ids[-4:] == [tok.audio_start_id, tok.audio_pad_id, tok.audio_pad_id, tok.audio_end_id]
    assert tok.im_end_id in ids
    assert tok.decode(ids, skip_special_tokens=False) == chat
    assert tok.decode(ids) == "user\nhi there"


def test_fixture_sentences_tokenize_like_a_production_bpe(tok):
    assert 3.0 <= chars_per_token(tok, FIXTURE_SENTENCES) <= 5.5


def test_english_paragraph_tokenizes_like_a_production_bpe(tok):
    assert 3.0 <= chars_per_token(tok, [PARAGRAPH]) <= 5.5


def test_incremental_detokenizer_matches_full_decode(tok):
    ids = tok.encode(MIXED)
    detok = IncrementalDetokenizer(tok)
    pieces = [detok.push(i) for i in ids]
    assert "".join(pieces) == tok.decode(ids) == MIXED
    assert detok.flush() == ""
    # Some token ends inside an emoji's or a CJK character's bytes: it emits nothing yet.
    assert "" in pieces


def test_incremental_detokenizer_holds_a_split_emoji_until_complete(tok):
    # One byte token per byte of 🙂 (F0 9F 99 82): text appears only with the last.
    byte_ids = byte_token_ids(tok)
    detok = IncrementalDetokenizer(tok)
    assert [detok.push(byte_ids[b]) for b in "🙂".encode()] == ["", "", "", "🙂"]


def test_incremental_detokenizer_skips_special_tokens(tok):
    detok = IncrementalDetokenizer(tok)
    ids = [tok.im_start_id, *tok.encode("hi 👋"), tok.im_end_id, tok.endoftext_id]
    pieces = [detok.push(i) for i in ids]
    assert pieces[0] == pieces[-1] == pieces[-2] == ""
    assert "".join(pieces) == tok.decode(ids) == "hi 👋"


def test_incremental_detokenizer_matches_decode_on_arbitrary_ids(tok):
    # Random ids, mostly single bytes, make invalid UTF-8 too; after flush the
    # replacement characters match decode's.
    byte_ids = byte_token_ids(tok)
    rng = random.Random(0)
    for _ in range(500):
        ids = [
            rng.choice(byte_ids) if rng.random() < 0.7 else rng.randrange(tok.vocab_size)
            for _ in range(rng.randrange(1, 8))
        ]
        detok = IncrementalDetokenizer(tok)
        assert "".join(map(detok.push, ids)) + detok.flush() == tok.decode(ids)


def test_missing_file_names_the_path(tmp_path):
    path = tmp_path / "nope.json"
    with pytest.raises(FileNotFoundError, match="nope.json"):
        TextTokenizer.from_file(path)


def test_unparseable_file_names_the_path(tmp_path):
    path = tmp_path / "broken.json"
    path.write_text("{not json")
    with pytest.raises(ValueError, match="broken.json"):
        TextTokenizer.from_file(str(path))


def test_audio_tokens_come_all_three_or_none(tok):
    assert tok.has_audio
    chat_only = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    for names, has_audio in [(chat_only, False), (chat_only + ["<|audio_start|>"], None)]:
        bpe = Tokenizer(models.BPE({"a": 0}, []))
        bpe.add_special_tokens(names)
        if has_audio is None:
            with pytest.raises(ValueError, match=r"lacks special tokens \['<\|audio_end\|>', '<\|audio_pad\|>'\]"):
                TextTokenizer(bpe)
        else:
            assert TextTokenizer(bpe).has_audio is has_audio
