"""A tiny byte-level BPE in Qwen2's pipeline, learnt deterministically from a fixed English corpus, and the
ChatML template Qwen3-Omni renders prompts with.

The vocabulary is the 256 byte symbols, then the learnt merges, then `SPECIAL_TOKENS` in the top ids, in
Qwen3-Omni's relative order. Ties between equally frequent pairs go to the greater pair, so the same size
always gives the same tokenizer.
"""

from __future__ import annotations

from collections import Counter

from tokenizers import AddedToken, Regex, Tokenizer, decoders, normalizers, pre_tokenizers
from tokenizers.models import BPE

SPECIAL_TOKENS = (
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>", "<|image_pad|>",
    "<|video_pad|>", "<|audio_start|>", "<|audio_end|>", "<tts_pad>", "<tts_text_bos>", "<tts_text_eod>",
    "<|audio_pad|>",
)
ROLE_WORDS = ("system", "user", "assistant")
SPLIT_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                 r"|\s*[\r\n]+|\s+(?!\S)|\s+")

CHAT_TEMPLATE = r"""{%- for message in messages %}
    {{- '<|im_start|>' + message.role + '\n' }}
    {%- if message.content is string %}
        {{- message.content }}
    {%- else %}
        {%- for part in message.content %}
            {%- if part.type == 'audio' %}
                {{- '<|audio_start|><|audio_pad|><|audio_end|>' }}
            {%- elif part.type == 'text' %}
                {{- part.text }}
            {%- endif %}
        {%- endfor %}
    {%- endif %}
    {{- '<|im_end|>\n' }}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
"""

CORPUS = """\
system: You are a helpful voice assistant. Answer the user briefly, in plain spoken English.
user: What is the capital of France?
assistant: The capital of France is Paris, on the river Seine.
user: Why is the sky blue?
assistant: Sunlight scatters off the air, and blue light scatters the most.
user: Tell me a short story.
assistant: Once upon a time a small robot learnt to sing in the rain.
user: How far away is the moon?
assistant: The moon is about three hundred and eighty thousand kilometres away.
user: Can spiders fly?
assistant: Some young spiders float on long threads of silk carried by the wind.
user: What time is it in Tokyo?
assistant: Tokyo is nine hours ahead of London, so it is evening there now.
system: Speak slowly and clearly. Keep every answer under three sentences, and never read out lists.
user: Please wait a moment.
assistant: Of course, take your time. I will be here when you are ready.
user: What should I cook tonight?
assistant: A warm vegetable soup with fresh bread would be simple and good.
user: Where do whales sleep?
assistant: Whales rest near the surface, keeping half of the brain awake.
user: Which planet is the largest?
assistant: Jupiter is the largest planet, a giant ball of gas with many moons.
user: How do I learn to swim?
assistant: Start in shallow water, practise floating, then kick with straight legs.
user: Who wrote Pride and Prejudice?
assistant: Jane Austen wrote it, and it was first published in eighteen thirteen.
user: Is it going to rain tomorrow?
assistant: I cannot see the weather, but the morning forecast should tell you.
system: The user is speaking through a microphone, so their words may arrive with small errors.
user: Thank you, that was helpful.
assistant: You are welcome. Is there anything else you would like to know?
user: Explain how a train works.
assistant: An electric motor turns the wheels, and the rails guide them along the track.
user: Why do cats purr?
assistant: Cats purr when they feel safe and calm, and sometimes when they are hurt.
user: Sing me a song.
assistant: Row, row, row your boat, gently down the stream, merrily through the dream.
user: What is music made of?
assistant: Music is made of sound, rhythm and silence, played over time by people.
user: How many days are in a year?
assistant: A year has three hundred and sixty five days, or one more in a leap year.
user: What does a doctor do?
assistant: A doctor listens, examines, and helps people heal when they are ill.
user: Describe the ocean.
assistant: The ocean is deep, cold and wide, full of fish, coral, salt and waves.
user: Can you hear me?
assistant: Yes, I can hear you clearly. Please go on, I am listening.
user: Stop talking for a second.
assistant: Okay, I will stop. Tell me when you want me to continue.
user: Count to ten.
assistant: One, two, three, four, five, six, seven, eight, nine, ten. 0 1 2 3 4 5 6 7 8 9
user: What colour is grass?
assistant: Grass is green because its leaves hold chlorophyll, which absorbs red light.
user: Where is the nearest library?
assistant: I do not know where you are, but a map on your phone can show you.
system: Reply in the voice of a friendly guide. Questions, answers, thoughts and jokes are all welcome here.
"""


def build_tokenizer(vocab_size: int) -> Tokenizer:
    """The tiny tokenizer with exactly `vocab_size` ids, `SPECIAL_TOKENS` in the top ones, each of `ROLE_WORDS`
    one ordinary token. Raises ValueError if the corpus cannot fill the vocabulary."""
    num_learnt = vocab_size - len(SPECIAL_TOKENS)
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())  # by code point: GPT-2's and Qwen2's byte order
    words = Counter(tuple(piece) for piece, _ in _pre_tokenizer().pre_tokenize_str(CORPUS))
    vocab, merges = dict.fromkeys(alphabet), []
    while len(vocab) < num_learnt:
        pair = _most_frequent_pair(words)
        merges.append(pair)
        vocab.setdefault(pair[0] + pair[1])
        words = Counter({_merge(word, pair): count for word, count in words.items()})
    tokenizer = Tokenizer(BPE(vocab={token: index for index, token in enumerate(vocab)}, merges=merges))
    tokenizer.normalizer = normalizers.NFC()
    tokenizer.pre_tokenizer = _pre_tokenizer()
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens([AddedToken(token, special=True, normalized=False) for token in SPECIAL_TOKENS])
    _check_role_words(tokenizer)
    return tokenizer


def _pre_tokenizer() -> pre_tokenizers.PreTokenizer:
    return pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(SPLIT_PATTERN), behavior="isolated"),
                                    pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])


def _most_frequent_pair(words: Counter) -> tuple[str, str]:
    pairs: Counter = Counter()
    for word, count in words.items():
        for pair in zip(word, word[1:]):
            pairs[pair] += count
    if not pairs:
        raise ValueError("the corpus is too small for this vocabulary size")
    return max(pairs, key=lambda pair: (pairs[pair], pair))


def _merge(word: tuple[str, ...], pair: tuple[str, str]) -> tuple[str, ...]:
    merged, index = [], 0
    while index < len(word):
        if word[index:index + 2] == pair:
            merged.append(pair[0] + pair[1])
            index += 2
        else:
            merged.append(word[index])
            index += 1
    return tuple(merged)


def _check_role_words(tokenizer: Tokenizer) -> None:
    for word in ROLE_WORDS:
        if len(tokenizer.encode(word).ids) != 1:
            raise ValueError(f"the vocabulary is too small for {word!r} to be one token")
