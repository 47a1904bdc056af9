"""semantic_vad (Silero + Smart Turn v3.2, eagerness auto) against server_vad (Silero, 500 ms of silence) on
the shipped clips, each streamed in 20 ms chunks after 0.5 s of silence and followed by 9 s of silence.

Measured: when the turn's end was decided, ms from the clip's start (and after the end of speech the
VAD found, the same for both):

| clip | speech ends | server_vad | semantic_vad | how semantic_vad ended it (Smart Turn p at each check) |
|---|---|---|---|---|
| q_capital_espeak | 1740 | 2260 (+520) | 1980 (+240) | Smart Turn at the 200 ms check (0.94) |
| q_spider_espeak | 1964 | 2480 (+516) | 2200 (+236) | Smart Turn, 200 ms (0.92) |
| q_tokyo_flite | 2380 | 2900 (+520) | 2620 (+240) | Smart Turn, 200 ms (0.98) |
| q_story_espeak | 2732 | 3260 (+528) | 3260 (+528) | auto's 500 ms fallback (0.25, 0.15) |
| q_sky_espeak | 2124 | 2640 (+516) | 2640 (+516) | auto's 500 ms fallback (0.018, 0.008) |
| librivox_austen_0870 | 6892 | 7420 (+528) | 7120 (+228) | 200 ms (0.98); no pause in the sentence reaches 200 ms |
| librivox_austen_0890 | 5164 | 5680 (+516) | 5400 (+236) | 200 ms (0.96); its one dip inside the sentence: 64 ms |

So semantic_vad ends three of the five questions and both LibriVox sentences 280-300 ms sooner, and never
inside a sentence; on two synthetic questions Smart Turn does not hear an ending, and auto's fallback ends
them with server_vad (under medium, 4 s of silence: q_story was ended at the 800 ms check (p 0.93), q_sky by
the fallback, p 0.010, 0.013, 0.29 at 800, 1600, 3200 ms). That is the model, not our input: the features are those of
pipecat's own Smart Turn analyzer bit for bit (test_smart_turn_reference.py), and pipecat's live path (its
VAD with stop_secs 0.2, one check, 3 s fallback) also finds both incomplete (p 0.10 and 0.016). The test
pins these outcomes.
"""
import numpy as np
import pytest

from monitor import SemanticTurnConfig, SemanticTurnDetector, SileroVAD, SmartTurn, SpeechStopped, TurnDetector
from tests.conftest import read_fixture

LEAD_MS, TAIL_MS, CHUNK = 500, 9000, 320
QUESTIONS = ["q_capital_espeak_24k.wav", "q_spider_espeak_24k.wav", "q_tokyo_flite_24k.wav",
             "q_story_espeak_24k.wav", "q_sky_espeak_24k.wav"]
SENTENCES = ["librivox_austen_0870_24k.wav", "librivox_austen_0890_24k.wav"]
EARLIER = {"q_capital_espeak_24k.wav", "q_spider_espeak_24k.wav", "q_tokyo_flite_24k.wav", *SENTENCES}


def decided_stops(detector: TurnDetector, clip: str) -> list[tuple[float, int]]:
    """(ms of clip audio fed when each SpeechStopped came out, its audio_end_ms), both from the clip's start."""
    audio = np.concatenate([np.zeros(16 * LEAD_MS, np.float32), read_fixture(clip), np.zeros(16 * TAIL_MS, np.float32)])
    stops = []
    for start in range(0, len(audio), CHUNK):
        for event in detector.feed(audio[start:start + CHUNK]):
            if isinstance(event, SpeechStopped):
                stops.append(((start + CHUNK) / 16 - LEAD_MS, event.audio_end_ms - LEAD_MS))
    return stops


@pytest.fixture(scope="module")
def measured() -> dict[str, tuple[list, list, int]]:
    """clip -> (server_vad stops, semantic_vad stops, Smart Turn calls)."""
    model, results = SmartTurn(), {}
    for clip in QUESTIONS + SENTENCES:
        semantic = SemanticTurnDetector(SileroVAD(), model, SemanticTurnConfig("auto"))
        results[clip] = (decided_stops(TurnDetector(SileroVAD()), clip), decided_stops(semantic, clip),
                         semantic.num_model_calls)
    return results


@pytest.mark.parametrize("clip", QUESTIONS + SENTENCES)
def test_each_detector_ends_the_clip_once_at_the_same_point(measured, clip):
    server, semantic, _ = measured[clip]
    assert len(server) == len(semantic) == 1  # no turn ends inside a sentence
    assert semantic[0][1] == server[0][1]  # the same end of speech


@pytest.mark.parametrize("clip", sorted(EARLIER))
def test_semantic_vad_ends_these_turns_sooner_than_server_vad(measured, clip):
    (server_at, _), = measured[clip][0]
    (semantic_at, _), = measured[clip][1]
    assert semantic_at <= server_at - 250  # decided at the 200 ms pause instead of the 500 ms silence
    assert measured[clip][2] == 1


@pytest.mark.parametrize("clip", QUESTIONS)
def test_semantic_vad_ends_no_question_later_than_server_vad(measured, clip):
    (server_at, _), = measured[clip][0]
    (semantic_at, _), = measured[clip][1]
    assert semantic_at <= server_at


@pytest.mark.parametrize("clip", ["q_story_espeak_24k.wav", "q_sky_espeak_24k.wav"])
def test_where_smart_turn_hears_no_ending_autos_fallback_ends_the_turn_with_server_vad(measured, clip):
    (server_at, _), = measured[clip][0]
    (semantic_at, _), = measured[clip][1]
    assert semantic_at == server_at and measured[clip][2] == 2  # asked at 200 and 400 ms, both p < 0.5
