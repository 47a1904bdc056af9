"""Qwen3TalkerRequest: a session's resident talker context: which positions are known when, what each trailing
text entry is (the reference's trailing_text_hidden, streamed), and what a reply leaves for the next."""

import pytest
import torch

from stages.config import SamplingParams
from stages.requests.qwen3_talker import (
    PREFIX_ROWS,
    Qwen3TalkerRequest,
    TalkerCodecIds,
    TalkerFrame,
    TalkerTurn,
    TalkerTurnEnd,
)
from stages.requests.talker_context import TalkerPrompt

IDS = TalkerCodecIds(eos=99, nothink=90, think_bos=91, think_eos=92, pad=93, bos=94, speaker=95)


def turn(users=5, max_tokens=100):
    prompt = TalkerPrompt(torch.zeros(users, 4), torch.zeros(users, dtype=torch.bool), torch.zeros(3, 4))
    return TalkerTurn(prompt, SamplingParams(temperature=0, max_tokens=max_tokens), "reply")


def text(*values):
    return torch.tensor([[float(v)] * 4 for v in values])


def talker(users=5, max_tokens=100):
    request = Qwen3TalkerRequest("t", 0.0, IDS)
    request.append(turn(users, max_tokens))
    return request


def test_the_prompt_waits_until_the_first_row_is_known_to_be_fed():
    request = talker()
    request.append(text(0))
    assert request.num_known == 0  # row 0 may still be the reply's last token, which is never fed
    request.append(text(1))
    assert request.num_known == 5 + PREFIX_ROWS
    assert request.wants_sample(5 + PREFIX_ROWS)


def test_each_step_needs_the_row_after_its_own_or_the_end_of_the_text():
    request = talker()
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


def test_the_end_of_speech_code_ends_the_reply_without_a_frame_and_the_request_stays():
    request = talker()
    request.append(text(0, 1), close=True)
    assert not request.needs_residuals(IDS.eos)
    assert request.advance(5 + PREFIX_ROWS, (IDS.eos, None)) == TalkerTurnEnd("reply")
    assert request.frames == [] and not request.is_finished and request.is_dormant


def test_the_last_first_code_allowed_is_not_voiced():
    request = talker(max_tokens=2)
    request.append(text(0, 1), close=True)
    assert request.needs_residuals(3)
    assert request.advance(5 + PREFIX_ROWS, (3, [3, 4, 5])) == TalkerFrame([3, 4, 5], "reply")
    assert not request.needs_residuals(3)


def test_a_one_token_reply_has_nothing_to_say():
    request = talker()
    request.append(text(0), close=True)
    assert not request.is_generating and request.num_known == 0


def test_the_next_reply_computes_only_the_user_rows_the_last_did_not_hold():
    request = talker(users=5)
    request.append(text(0, 1, 2), close=True)
    request.advance(5 + PREFIX_ROWS, (IDS.eos, None))
    request.truncate(5)  # the reply's end: its prefix and frames go, the user rows stay
    assert request.num_computed == 5 and request.is_dormant
    request.append(turn(users=8))
    request.append(text(0, 1))
    assert (request.num_computed, request.num_known) == (5, 8 + PREFIX_ROWS)


def test_a_reply_cannot_start_over_one_still_voiced_nor_cut_into_the_user_rows_held():
    request = talker(users=5)
    with pytest.raises(ValueError, match="still voicing a reply"):
        request.append(turn())
    with pytest.raises(ValueError, match="keeps at most its 5 user rows"):
        request.truncate(6)
