"""DuplexRequest: frames queue behind the answer being decoded, one generator, a hard length limit."""

from __future__ import annotations

import pytest
import torch

from stages.config import SamplingParams
from stages.requests import DuplexFrame, DuplexRequest

STOP = 99


def frame(index: int, n: int = 2) -> DuplexFrame:
    return DuplexFrame(index, [7] * n, torch.full((n, 4), float(index)))


def request(max_tokens: int = 2, max_position: float = 1000) -> DuplexRequest:
    return DuplexRequest("d", 0.0, frozenset({STOP}), max_position, SamplingParams(max_tokens=max_tokens), prefix=[1, 2])


def answer(req: DuplexRequest, token: int):
    """Compute everything pending and sample `token` at its end."""
    assert req.wants_sample(req.num_known)
    return req.advance(req.num_pending, (token, torch.zeros(4)))


def test_a_frame_is_answered_with_up_to_max_tokens_then_the_next_frame_goes_in():
    req = request(max_tokens=2)
    req.append(frame(0))
    req.append(frame(1))  # arrives while frame 0 is answered: queued
    assert req.num_known == 4 and req.num_queued_frames == 1
    assert req.embed_spans[0][0] == 2 and req.tag == 0
    first = answer(req, 5)
    assert (first.tag, first.finish_reason) == (0, None)
    second = answer(req, 6)
    assert (second.tag, second.finish_reason) == (0, "length")
    assert req.tag == 1 and req.num_queued_frames == 0
    assert list(req.token_ids) == [1, 2, 7, 7, 5, 6, 7, 7]
    assert req.embed_spans[1][0] == 6 and req.wants_sample(8) and not req.wants_sample(7)


def test_a_stop_token_ends_the_frames_answer_early_and_the_stream_waits_for_audio():
    req = request(max_tokens=3)
    req.append(frame(0))
    step = answer(req, STOP)
    assert step.finish_reason == "stop" and not req.is_generating
    assert req.num_pending == 0 and req.is_dormant and not req.is_finished  # the stop token waits for audio
    req.append(frame(1))
    assert req.num_pending == 3 and req.wants_sample(req.num_known)  # computed with the next frame


def test_one_generator_serves_every_frame():
    req = request()
    generator = req.generator
    req.append(frame(0))
    answer(req, 5)
    answer(req, 6)
    req.append(frame(1))
    assert req.generator is generator


def test_a_frame_that_would_pass_the_maximum_length_is_refused_and_changes_nothing():
    req = request(max_tokens=2, max_position=10)
    req.append(frame(0))  # 2 + 2 frame + 2 answer = 6
    with pytest.raises(ValueError, match="maximum is 10"):
        req.append(frame(1, n=3))  # 6 + 3 + 2 = 11
    assert req.num_queued_frames == 0 and req.num_known == 4


def test_no_maximum_when_unbounded():
    req = request(max_tokens=1, max_position=float("inf"))
    for index in range(50):
        req.append(frame(index))
        answer(req, 5)
    assert len(req.token_ids) == 2 + 50 * 3 and req.num_known == len(req.token_ids) - 1


def test_a_duplex_context_cannot_be_truncated():
    req = request()
    with pytest.raises(ValueError, match="cannot be truncated"):
        req.truncate(1)


@pytest.mark.parametrize("kept_head", [2, 0])
def test_forgotten_frames_leave_the_request_and_a_recomputation_resumes_past_them(kept_head):
    req = request(max_tokens=1, max_position=float("inf"))
    for index in range(10):  # 2 prefix tokens, then frames of 2 tokens + 1 answer: frame i at 2 + 3i
        req.append(frame(index))
        answer(req, 5)
    req.forget(kept_head, 18)  # frames 0-4 and their answers, and frame 5's first row
    assert req.forgotten == range(kept_head, 18) and len(req.token_ids) == 32
    assert [start for start, _ in req.embed_spans] == [18, 20, 23, 26, 29]
    assert req.embed_spans[0][1].shape[0] == 1 and float(req.embed_spans[0][1][0, 0]) == 5.0  # frame 5's second row
    req.reset_computed()  # preempted between frames: it recomputes once the next frame arrives
    assert req.num_computed == (0 if kept_head else 18) and req.num_pending == 0
    req.append(frame(10))  # 34 positions known
    assert req.num_pending == 34 - 18 + kept_head
    if kept_head:
        assert req.num_schedulable(100) == kept_head  # the head, then a jump
        req.advance(kept_head, None)
    assert req.num_computed == 18 and req.num_schedulable(100) == 34 - 18
