import pytest
import torch

from stages.config import SamplingParams
from stages.sampling import sample

VOCAB = 50


def random_logits(rows: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(rows, VOCAB, generator=torch.Generator().manual_seed(seed))


def generators(n: int, seed: int = 0) -> list[torch.Generator]:
    return [torch.Generator().manual_seed(seed) for _ in range(n)]


def test_greedy_is_argmax():
    logits = random_logits(4)
    params = [SamplingParams(temperature=0.0)] * 4
    assert sample(logits, params, generators(4)) == logits.argmax(-1).tolist()


def test_top_k_one_is_argmax_even_when_hot():
    logits = random_logits(4, seed=1)
    params = [SamplingParams(temperature=5.0, top_k=1)] * 4
    for _ in range(5):
        assert sample(logits, params, generators(4)) == logits.argmax(-1).tolist()


def test_top_k_never_draws_outside_the_top_k():
    logits = random_logits(1, seed=2)
    allowed = set(torch.topk(logits[0], 5).indices.tolist())
    params = [SamplingParams(temperature=5.0, top_k=5)]  # hot: outside tokens would show up if allowed
    gen = torch.Generator().manual_seed(3)
    draws = [sample(logits, params, [gen])[0] for _ in range(2000)]
    assert set(draws) <= allowed
    assert len(set(draws)) == 5  # and every one of the top 5 does show up


def test_same_seed_gives_the_same_draws():
    logits = random_logits(3, seed=4)
    params = [SamplingParams(temperature=1.0, seed=7)] * 3

    def draws(seed: int) -> list[list[int]]:
        gens = generators(3, seed)
        return [sample(logits, params, gens) for _ in range(20)]

    assert draws(7) == draws(7)
    assert draws(7) != draws(8)


def test_each_row_draws_from_its_own_generator():
    logits = random_logits(2, seed=5)
    params = [SamplingParams(temperature=1.0)] * 2
    gen_alone, gen_b = torch.Generator().manual_seed(9), torch.Generator().manual_seed(9)
    alone = [sample(logits[1:], params[1:], [gen_alone])[0] for _ in range(10)]
    together = [sample(logits, params, [torch.Generator().manual_seed(1), gen_b])[1] for _ in range(10)]
    assert alone == together  # row 0's draws do not consume row 1's randomness


def test_greedy_and_sampled_rows_mix_in_one_batch():
    logits = random_logits(2, seed=6)
    params = [SamplingParams(temperature=0.0), SamplingParams(temperature=1.0, top_k=3)]
    tokens = sample(logits, params, generators(2))
    assert tokens[0] == int(logits[0].argmax())
    assert tokens[1] in torch.topk(logits[1], 3).indices.tolist()


def expected_probabilities(logits: torch.Tensor, temperature: float, top_k: int) -> torch.Tensor:
    kept = torch.full_like(logits, float("-inf"))
    top = torch.topk(logits, top_k or len(logits))
    kept[top.indices] = top.values
    return torch.softmax(kept.double() / temperature, dim=-1)


def test_rows_with_different_top_k_draw_from_their_own_distributions():
    logits = random_logits(3, seed=8)
    params = [SamplingParams(temperature=0.7, top_k=3), SamplingParams(temperature=1.5),
              SamplingParams(temperature=1.0, top_k=8)]
    gens, draws = generators(3, seed=10), 6000
    counts = torch.zeros(3, VOCAB, dtype=torch.float64)
    for _ in range(draws):
        for row, token in enumerate(sample(logits, params, gens)):
            counts[row, token] += 1
    for row, p in enumerate(params):
        expected = expected_probabilities(logits[row], p.temperature, p.top_k)
        assert (counts[row] / draws - expected).abs().max() < 0.025  # ~4 standard errors at p = 0.5
        assert counts[row][expected == 0].sum() == 0


def test_non_finite_logits_are_refused():
    logits = random_logits(2, seed=11)
    logits[1, 4] = float("nan")
    with pytest.raises(ValueError, match="NaN or infinity"):
        sample(logits, [SamplingParams(temperature=1.0)] * 2, generators(2))


@pytest.mark.parametrize("temperature", [-0.1, 5.5, float("nan"), "hot", None])
def test_bad_temperature_names_the_field(temperature):
    with pytest.raises(ValueError, match=r"temperature must be a number in \[0, 5\]"):
        SamplingParams(temperature=temperature)


@pytest.mark.parametrize(("field", "value"), [("top_k", -1), ("top_k", 1.5), ("max_tokens", 0), ("max_tokens", True)])
def test_other_bad_params_name_the_field(field, value):
    with pytest.raises(ValueError, match=field):
        SamplingParams(**{field: value})


def test_is_greedy():
    assert SamplingParams(temperature=0.0).is_greedy
    assert SamplingParams(temperature=0.7, top_k=1).is_greedy
    assert not SamplingParams(temperature=0.7, top_k=2).is_greedy
