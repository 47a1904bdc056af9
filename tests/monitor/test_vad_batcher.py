"""Many streams' VAD windows scored together: the same probabilities as one stream at a time, fewer calls."""
import asyncio

import numpy as np
import pytest
from scipy.signal import resample_poly

from monitor import SileroVAD, SpeechStarted, SpeechStopped, TurnDetector, VadBatcher
from monitor.vad_batcher import score_together
from tests.monitor.test_silero import PAD_MS, read_clip

CLIPS = ("q_capital_espeak_24k.wav", "q_sky_espeak_24k.wav", "librivox_austen_0870_24k.wav")


def speech_16k(name: str) -> np.ndarray:
    silence = np.zeros(16 * PAD_MS, np.float32)
    return np.concatenate([silence, resample_poly(read_clip(name), 2, 3).astype(np.float32), silence])


def windows_of(audio: np.ndarray) -> np.ndarray:
    return audio[: len(audio) // 512 * 512].reshape(-1, 512)


def one_at_a_time(windows: np.ndarray) -> list[float]:
    vad = SileroVAD()
    return [vad.speech_probability(window) for window in windows]


class Loudness:
    """A VAD without `probabilities_together`: scored on the caller's thread."""

    def speech_probability(self, window: np.ndarray) -> float:
        return float(np.abs(window).max() > 0.1)

    def reset(self) -> None:
        pass


class Failing(SileroVAD):
    @staticmethod
    def probabilities_together(streams, windows):
        raise RuntimeError("model failed")


def test_scored_together_each_stream_gets_its_own_probabilities():
    audios = [windows_of(speech_16k(name))[:120 + 10 * k] for k, name in enumerate(CLIPS)]
    together = score_together([(SileroVAD(), windows) for windows in audios])
    for windows, probabilities in zip(audios, together):
        assert np.allclose(probabilities, one_at_a_time(windows), atol=1e-4)
    assert max(probabilities.max() for probabilities in together) > 0.9  # speech heard, not only silence


def test_a_stream_cannot_be_scored_twice_in_one_call():
    vad = SileroVAD()
    with pytest.raises(ValueError, match="distinct"):
        SileroVAD.probabilities_together([vad, vad], np.zeros((2, 512), np.float32))


def test_concurrent_feeds_share_batches_and_keep_each_streams_order():
    audios = [windows_of(speech_16k(name)) for name in CLIPS]
    batcher = VadBatcher()

    async def stream(windows: np.ndarray, chunk: int) -> list[float]:
        vad, heard = SileroVAD(), []
        for start in range(0, len(windows), chunk):
            heard += await batcher.probabilities(vad, windows[start : start + chunk])
        return heard

    async def scenario():
        return await asyncio.gather(*(stream(windows, chunk) for windows, chunk in zip(audios, (1, 3, 2))))

    results = asyncio.run(scenario())
    for windows, probabilities in zip(audios, results):
        assert np.allclose(probabilities, one_at_a_time(windows), atol=1e-4)
    calls = sum(-(-len(windows) // chunk) for windows, chunk in zip(audios, (1, 3, 2)))
    assert batcher.num_windows == sum(map(len, audios))
    assert batcher.num_batches < calls  # feeds waiting at once went in one batch


def test_detector_on_batched_probabilities_finds_the_turn_feed_finds():
    audio = speech_16k("q_capital_espeak_24k.wav")
    expected = TurnDetector(SileroVAD()).feed(audio)
    detector, batcher = TurnDetector(SileroVAD()), VadBatcher()

    async def scenario():
        events = []
        for start in range(0, len(audio), 480):  # 30 ms chunks: windows and remainders out of step
            windows = detector.split(audio[start : start + 480])
            events += detector.decide(windows, await batcher.probabilities(detector.vad, windows))
        return events

    events = asyncio.run(scenario())
    assert events == expected
    assert [type(e) for e in events if isinstance(e, (SpeechStarted, SpeechStopped))] == [SpeechStarted, SpeechStopped]


def test_a_vad_that_cannot_batch_is_scored_inline():
    batcher = VadBatcher()
    windows = np.zeros((3, 512), np.float32)
    windows[1] += 0.5
    assert asyncio.run(batcher.probabilities(Loudness(), windows)) == [0.0, 1.0, 0.0]
    assert batcher.num_batches == 0


def test_a_failed_batch_reaches_its_callers_and_the_next_batch_runs():
    batcher = VadBatcher()
    windows = np.zeros((2, 512), np.float32)

    async def scenario():
        failed = await asyncio.gather(batcher.probabilities(Failing(), windows),
                                      batcher.probabilities(Failing(), windows), return_exceptions=True)
        return failed, await batcher.probabilities(SileroVAD(), windows)

    failed, after = asyncio.run(scenario())
    assert [str(error) for error in failed] == ["model failed"] * 2
    assert np.allclose(after, one_at_a_time(windows), atol=1e-4)


def test_a_caller_gone_leaves_the_others_their_results():
    batcher = VadBatcher()
    windows = windows_of(speech_16k("q_sky_espeak_24k.wav"))[:40]

    async def scenario():
        gone = asyncio.ensure_future(batcher.probabilities(SileroVAD(), windows))
        kept = asyncio.ensure_future(batcher.probabilities(SileroVAD(), windows))
        await asyncio.sleep(0)
        gone.cancel()
        return await kept

    assert np.allclose(asyncio.run(scenario()), one_at_a_time(windows), atol=1e-4)
