"""Deterministic initialisation and safetensors loading for every tiny-omni module.

Seeded weights make the embedded default model reproducible on any machine; real
checkpoints load through `load_checkpoint`, which refuses a file that does not fit
the module and says exactly which tensors are missing, unexpected or misshapen.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

INIT_STD = 0.02


class CheckpointMismatch(ValueError):
    """A checkpoint whose tensors do not match the module's parameters."""


def init_deterministic(module: nn.Module, seed: int) -> None:
    """Fill every parameter from `seed`: norms at one, biases at zero, weights N(0, 0.02).

    The order is the module's sorted parameter names, so the result does not depend
    on construction order or on torch's global RNG.
    """
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in sorted(module.named_parameters()):
            if name.endswith("bias"):
                param.zero_()
            elif "norm" in name and param.dim() == 1:
                param.fill_(1.0)
            else:
                noise = torch.randn(param.shape, generator=gen, dtype=torch.float32)
                param.copy_(noise * INIT_STD)


def load_checkpoint(module: nn.Module, path: str | Path) -> None:
    """Load a safetensors file into `module`, strictly.

    Raises FileNotFoundError for a missing file and CheckpointMismatch naming every
    missing, unexpected or misshapen tensor; the module is unchanged on error.
    Tied weights (one tensor under two names) need only one of their names.
    """
    from safetensors.torch import load_file

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint not found: {path}")
    tensors = load_file(str(path))
    expected = dict(module.state_dict(keep_vars=True))
    problems = _mismatches(expected, tensors)
    if problems:
        raise CheckpointMismatch(f"{path.name} does not fit {type(module).__name__}: " + "; ".join(problems))
    with torch.no_grad():
        for name, param in expected.items():
            if name in tensors:
                param.copy_(tensors[name])


def _mismatches(expected: dict[str, torch.Tensor], found: dict[str, torch.Tensor]) -> list[str]:
    tied = _tied_names(expected)
    missing = [n for n in expected if n not in found and not (tied.get(n, set()) & found.keys())]
    unexpected = [n for n in found if n not in expected]
    misshapen = [
        f"{n} has shape {tuple(found[n].shape)}, expected {tuple(t.shape)}"
        for n, t in expected.items()
        if n in found and found[n].shape != t.shape
    ]
    problems = []
    if missing:
        problems.append(f"missing {_listing(missing)}")
    if unexpected:
        problems.append(f"unexpected {_listing(unexpected)}")
    return problems + misshapen


def _tied_names(state: dict[str, torch.Tensor]) -> dict[str, set[str]]:
    by_storage: dict[int, set[str]] = {}
    for name, tensor in state.items():
        by_storage.setdefault(tensor.data_ptr(), set()).add(name)
    return {name: names - {name} for names in by_storage.values() for name in names}


def _listing(names: list[str], limit: int = 5) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" (+{len(names) - limit} more)" if len(names) > limit else "")
