"""TalkerContext: the rows a conversation-reading talker takes, by chat role, as Qwen3-Omni's reference reads roles."""

import pytest
import torch

from stages.config import SamplingParams
from stages.requests import ThinkerRequest, TurnInput
from stages.requests.talker_context import TalkerContextRule
from stages.requests.thinker import TalkerRows

IM_START, IM_END, USER, ASSISTANT, SYSTEM, NL, PAD = 90, 91, 80, 81, 82, 10, 70
RULE = TalkerContextRule(IM_START, USER, ASSISTANT)


def user(*content):
    return [NL, IM_START, USER, NL, *content, IM_END]


def request():
    return ThinkerRequest("s", 0.0, frozenset({IM_END}), 4096, RULE)


def row(position):
    return torch.full((4,), float(position))


def compute(thinker, audio=()):
    """Run the request's pending positions, returning each taken position's row as its own index."""
    start, end = thinker.num_computed, thinker.num_known
    positions = thinker.talker_context.positions(thinker.token_ids, start, end)
    rows = torch.stack([row(p) for p in positions]) if positions else torch.empty(0, 4)
    sample = (5, row(-1)) if thinker.wants_sample(end) else None
    return thinker.advance(end - start, TalkerRows(positions, rows, [p in audio for p in positions], sample))


def test_user_positions_run_from_their_im_start_to_the_next_one_and_the_assistant_header_is_three():
    thinker = request()
    system = [IM_START, SYSTEM, NL, 1, 2, IM_END]
    ids = system + user(PAD, PAD, 3) + [NL, IM_START, ASSISTANT, NL]
    thinker.append(TurnInput(ids, sampling=SamplingParams(temperature=0)))
    step = compute(thinker, audio={10, 11})
    user_positions = list(range(7, 15))  # im_start .. im_end, then the newline that follows it
    assert step.talker_prompt.user_rows[:, 0].tolist() == user_positions
    assert step.talker_prompt.user_is_audio.tolist() == [p in (10, 11) for p in user_positions]
    assert step.talker_prompt.header_rows[:, 0].tolist() == [15, 16, 17]


def test_a_second_turn_takes_both_users_and_only_the_last_header():
    thinker = request()
    thinker.append(TurnInput(user(1)[1:] + [NL, IM_START, ASSISTANT, NL], sampling=SamplingParams(temperature=0)))
    compute(thinker)
    thinker.advance(1, (IM_END, row(-1)))  # the reply ends
    assert not thinker.is_generating
    thinker.append(TurnInput(user(2) + [NL, IM_START, ASSISTANT, NL], sampling=SamplingParams(temperature=0)))
    step = compute(thinker)
    first_user = list(range(0, 5)) + [5]
    second_user = list(range(12, 17)) + [17]
    assert step.talker_prompt.user_rows[:, 0].tolist() == first_user + second_user
    assert step.talker_prompt.header_rows[:, 0].tolist() == [18, 19, 20]


def test_truncation_drops_the_rows_cut_off_and_their_messages():
    thinker = request()
    thinker.append(TurnInput(user(1)[1:] + [NL, IM_START, ASSISTANT, NL], sampling=SamplingParams(temperature=0)))
    compute(thinker)
    thinker.stop_generation()
    thinker.truncate(5)
    assert thinker.talker_context.positions(thinker.token_ids, 0, 5) == [0, 1, 2, 3, 4]
    thinker.append(TurnInput([IM_END, NL, IM_START, ASSISTANT, NL], sampling=SamplingParams(temperature=0)))
    step = compute(thinker)
    assert step.talker_prompt.user_rows[:, 0].tolist() == [0, 1, 2, 3, 4, 5, 6]
    assert step.talker_prompt.header_rows[:, 0].tolist() == [7, 8, 9]


def test_a_context_without_an_assistant_header_has_no_talker_prompt():
    thinker = request()
    thinker.append(TurnInput(user(1)[1:], sampling=SamplingParams(temperature=0)))
    with pytest.raises(ValueError, match="no assistant message"):
        compute(thinker)
