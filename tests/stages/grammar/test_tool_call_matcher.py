"""Tool call matchers on tiny-omni's tokenizer, without a model: which tokens each state allows, how auto mode
decides, and the logit mask on a batch (constrained and free rows, a padded output layer)."""

from __future__ import annotations

import json
from importlib.resources import files

import numpy as np
import pytest
import torch
from tokenizers import AddedToken, Tokenizer

from stages.grammar import ConstraintCompiler, ToolCallMatcher, masked_logits
from stages.models.tokenizer import TextTokenizer
from stages.requests.tool_call import ToolCallConstraint
from tests.stages.tool_call_schemas import AUTO, FORCED, assert_valid_call

CALL = '<tool_call>\n{"name": "set_timer", "arguments": {"minutes": 5}}\n</tool_call>'


@pytest.fixture(scope="module")
def tokenizer() -> TextTokenizer:
    return TextTokenizer.default()


@pytest.fixture(scope="module")
def compiler(tokenizer) -> ConstraintCompiler:
    return ConstraintCompiler(tokenizer)


def allowed(matcher: ToolCallMatcher) -> set[int]:
    bitmask = np.empty((1, matcher.vocab.num_words), dtype=np.int32)
    matcher.fill(bitmask, 0)
    bits = np.unpackbits(bitmask.view(np.uint8), bitorder="little")
    return set(np.flatnonzero(bits).tolist())


def fed(matcher: ToolCallMatcher, tokenizer: TextTokenizer, text: str) -> ToolCallMatcher:
    for token_id in tokenizer.encode(text):
        assert token_id in allowed(matcher), (text, tokenizer.decode([token_id]))
        matcher.accept(token_id)
    return matcher


def test_a_forced_call_allows_only_its_text_then_only_the_generations_stop_ids(compiler, tokenizer):
    stop = frozenset({tokenizer.im_end_id})  # the tokenizer's <|endoftext|> is not this generation's stop
    matcher = compiler.matcher(FORCED, stop)
    first = allowed(matcher)  # towards "<tool_call>\n": no special token, nothing else
    assert first and all(FORCED.begin.encode().startswith(tokenizer.token_bytes(t)) for t in first)
    fed(matcher, tokenizer, FORCED.begin)
    json_start = allowed(matcher)  # the call object's first bytes are {"name": "
    assert json_start and all(b'{"name": "'.startswith(tokenizer.token_bytes(t)) for t in json_start)
    assert not json_start & {*tokenizer.encode("}"), *tokenizer.encode(" Hello"), tokenizer.im_end_id}
    fed(matcher, tokenizer, CALL[len(FORCED.begin):-len(FORCED.end)])
    assert tokenizer.im_end_id not in allowed(matcher)  # a complete JSON value, not yet the end
    fed(matcher, tokenizer, FORCED.end)
    assert allowed(matcher) == {tokenizer.im_end_id}
    matcher.accept(tokenizer.im_end_id)  # ignore_eos: the stop token again, and nothing else
    assert allowed(matcher) == {tokenizer.im_end_id}


def test_an_added_token_not_marked_special_is_text_that_spells_begin_and_end():  # Qwen2.5's tool tags
    with_tags = Tokenizer.from_file(str(files("stages.models") / "assets" / "tiny_bpe.json"))
    with_tags.add_tokens([AddedToken(tag, special=False, normalized=False) for tag in ("<tool_call>", "</tool_call>")])
    tokenizer = TextTokenizer(with_tags)
    matcher = ConstraintCompiler(tokenizer).matcher(FORCED, tokenizer.stop_ids)
    assert allowed(matcher) == {with_tags.token_to_id("<tool_call>")}  # the tokenizer's own split of begin
    fed(matcher, tokenizer, CALL)
    assert with_tags.token_to_id("</tool_call>") in tokenizer.encode(CALL)
    assert allowed(matcher) == set(tokenizer.stop_ids)


def test_a_forced_call_never_breaks_its_json(compiler, tokenizer):
    matcher = fed(compiler.matcher(FORCED, tokenizer.stop_ids), tokenizer, '<tool_call>\n{"name": "set_timer",')
    assert allowed(matcher) == set(tokenizer.encode(' "'))  # forced text: its tokens as the tokenizer splits it
    fed(matcher, tokenizer, ' "arguments": {"minutes":')
    numbers = [tokenizer.token_bytes(t)[1:] for t in allowed(matcher)]  # " 5", " 19", " " ...: minutes 1 to 90
    assert numbers and all(n == b"" or n.isdigit() and 1 <= int(n) <= 90 and n[:1] != b"0" for n in numbers)


def test_auto_allows_any_reply_and_frees_itself_once_the_reply_leaves_begin(compiler, tokenizer):
    matcher = compiler.matcher(AUTO, tokenizer.stop_ids)
    assert allowed(matcher) == set(range(tokenizer.vocab_size))  # no tiny-omni token goes past "<tool_call>\n"
    fed(matcher, tokenizer, "<tool")
    assert matcher.is_constraining  # still a prefix of begin
    matcher.accept(tokenizer.encode("box")[0])
    assert not matcher.is_constraining


def test_auto_after_begin_however_spelled_allows_only_a_valid_call(compiler, tokenizer):
    matcher = compiler.matcher(AUTO, tokenizer.stop_ids)
    for char in "<tool":  # one byte a token, not the tokenizer's split: still allowed
        fed(matcher, tokenizer, char)
    fed(matcher, tokenizer, "_call>\n")
    json_start = allowed(matcher)
    assert json_start and all(b'{"name": "'.startswith(tokenizer.token_bytes(t)) for t in json_start)
    assert not json_start & (set(tokenizer.stop_ids) | set(tokenizer.encode(" Hello")))


@pytest.mark.parametrize("seed", range(3))
def test_auto_that_chooses_the_call_ends_with_a_valid_one_whatever_the_logits(compiler, tokenizer, seed):
    matcher = fed(compiler.matcher(AUTO, tokenizer.stop_ids), tokenizer, AUTO.begin)  # the model chose the call
    generator, taken = torch.Generator().manual_seed(seed), tokenizer.encode(AUTO.begin)
    while taken[-1] not in tokenizer.stop_ids:
        logits = masked_logits(torch.randn(1, tokenizer.vocab_size, generator=generator), [matcher])
        taken.append(int(logits.argmax()))
        matcher.accept(taken[-1])
        assert len(taken) < 200
    assert_valid_call(tokenizer.decode(taken[:-1]))


def test_masked_logits_masks_constrained_rows_only_and_never_a_padded_id(compiler, tokenizer):
    logits = torch.randn(3, tokenizer.vocab_size + 40)
    free, freed = logits[0].clone(), compiler.matcher(AUTO, tokenizer.stop_ids)
    freed.accept(tokenizer.encode("Hi")[0])
    forced = compiler.matcher(FORCED, tokenizer.stop_ids)
    ok = allowed(compiler.matcher(FORCED, tokenizer.stop_ids))
    out = masked_logits(logits.clone(), [None, forced, freed])
    assert torch.equal(out[0], free) and torch.equal(out[2], logits[2])
    assert set(torch.isfinite(out[1]).nonzero().flatten().tolist()) == ok


def test_schemas_that_do_not_compile_are_refused_and_compiled_ones_are_reused(compiler, tokenizer):
    with pytest.raises(ValueError, match="does not compile: .*Unknown format"):
        compiler.matcher(ToolCallConstraint(json.dumps({"type": "string", "format": "no-such"})), tokenizer.stop_ids)
    with pytest.raises(ValueError, match="not JSON"):
        compiler.matcher(ToolCallConstraint("{name"), tokenizer.stop_ids)
    with pytest.raises(ValueError, match="needs a stop token"):
        compiler.matcher(FORCED, frozenset())
    hits = compiler.compiled.cache_info().hits
    compiler.matcher(ToolCallConstraint(FORCED.schema), tokenizer.stop_ids)
    assert compiler.compiled.cache_info().hits == hits + 1
