"""UtteranceRequest: a whole utterance, encoded in one step once closed; one too long for a round is refused."""

import pytest
import torch

from stages.models.qwen3_omni.audio_rows import AudioRows
from stages.requests.utterance import UtteranceRequest

ROWS = AudioRows(50)


def test_nothing_is_pending_until_the_utterance_ends_then_all_of_it_at_once():
    request = UtteranceRequest("u", 0.0, ROWS, max_rows=100)
    request.append(torch.zeros(16000))
    assert request.num_pending == 0
    request.append(torch.zeros(8000), close=True)
    assert request.num_pending == ROWS(24000) == 20  # 150 feature frames: 13 for the first 100, 7 for the rest
    assert request.num_schedulable(19) == 0 and request.num_schedulable(20) == 20
    assert len(request.audio) == 24000
    request.advance(20, torch.zeros(20, 4))
    assert request.is_finished


def test_an_utterance_longer_than_a_round_is_refused_and_ends():
    request = UtteranceRequest("u", 0.0, ROWS, max_rows=100)
    with pytest.raises(ValueError, match="more than the audio encoder takes at once .100 rows: "
                                         "stages.encoder.scheduler.max_num_batched_tokens"):
        request.append(torch.zeros(16000 * 10), close=True)
    assert request.is_finished and request.num_pending == 0
