"""Qwen3TalkerRequest: which positions are known when, and what each trailing text entry is (the reference's
trailing_text_hidden, streamed)."""

import torch

from stages.config import SamplingParams
from stages.requests.qwen3_talker import PREFIX_ROWS, Qwen3TalkerRequest, TalkerCodecIds
from stages.requests.talker_context import TalkerPrompt

IDS = TalkerCodecIds(eos=99, nothink=90, think_bos=91, think_eos=92, pad=93, bos=94, speaker=95)
PROMPT = TalkerPrompt(torch.zeros(5, 4), torch.zeros(5, dtype=torch.bool), torch.zeros(3, 4))


def talker(max_tokens=100):
    return Qwen3TalkerRequest("t", 0.0, SamplingParams(temperature=0, max_tokens=max_tokens), IDS)


def text(*values):
    return torch.tensor([[float(v)] * 4 for v in values])


def test_the_prompt_waits_until_the_first_row_is_known_to_be_fed():
    request = talker()
    request.append(PROMPT)
    request.append(text(0))
    assert request.num_known == 0  # row 0 may still be the reply's last token, which is never fed
    request.append(text(1))
    assert request.num_known == 5 + PREFIX_ROWS
    assert request.wants_sample(5 + PREFIX_ROWS)


def test_each_step_needs_the_row_after_its_own_or_the_end_of_the_text():
    request = talker()
    request.append(PROMPT)
    request.append(text(0, 1, 2))
    length = 5 + PREFIX_ROWS
    request.advance(length, (7, [7, 1, 2]))
    assert request.num_known == length + 1  # trailing entry 0 is row 1, fed since row 2 came
    assert request.trailing(0)[0].item() == 1
    request.advance(1, (8, [8, 1, 2]))
    assert request.num_known == length + 1  # entry 1: row 2 is not known to be fed yet
    request.append(None, close=True)
    assert request.num_known == length + 2
    assert request.trailing(1) == "eos" and request.trailing(2) == "pad"


def test_the_end_of_speech_code_ends_the_reply_without_a_frame():
    request = talker()
    request.append(PROMPT)
    request.append(text(0, 1), close=True)
    assert not request.needs_residuals(IDS.eos)
    assert request.advance(5 + PREFIX_ROWS, (IDS.eos, None)) is None
    assert request.is_finished and request.frames == []


def test_the_last_first_code_allowed_is_not_voiced():
    request = talker(max_tokens=2)
    request.append(PROMPT)
    request.append(text(0, 1), close=True)
    assert request.needs_residuals(3)
    request.advance(5 + PREFIX_ROWS, (3, [3, 4, 5]))
    assert not request.needs_residuals(3)


def test_a_one_token_reply_has_nothing_to_say():
    request = talker()
    request.append(PROMPT)
    request.append(text(0), close=True)
    assert request.is_finished and request.num_known == 0
