"""Deterministic initialisation and safetensors loading for every tiny-omni module.

Seeded weights make tiny-omni reproducible on any machine; real
checkpoints load through `load_checkpoint`, which refuses a file that does not fit
the module and says exactly which tensors are missing, unexpected or misshapen.
"""

from __future__ import annotations

from collections.abc import Callable
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


def _everything(name: str) -> bool:
    return True


def load_checkpoint(module: nn.Module, path: str | Path, part: Callable[[str], bool] = _everything) -> None:
    """Load a safetensors file into `module`, strictly, over the tensors whose names are in `part` (on both
    sides; the rest of the file and of the module are left alone, and only the part is read).

    Raises FileNotFoundError for a missing file and CheckpointMismatch naming every
    missing, unexpected or misshapen tensor; the module is unchanged on error.
    Tied weights (one tensor under two names) need only one of their names.
    """
    from safetensors import safe_open

    require_fit(module, tensor_shapes(path, part), Path(path), part)
    with safe_open(str(path), framework="pt") as file, torch.no_grad():
        names = set(file.keys())
        for name, param in module.state_dict(keep_vars=True).items():
            if name in names and part(name):
                param.copy_(file.get_tensor(name))


def check_checkpoint(module: nn.Module, path: str | Path, part: Callable[[str], bool] = _everything) -> None:
    """Raise what `load_checkpoint` would, reading only the file's header: no tensor is loaded,
    and `module` may live on the meta device."""
    require_fit(module, tensor_shapes(path, part), Path(path), part)


def tensor_shapes(path: str | Path, part: Callable[[str], bool] = _everything) -> dict[str, tuple[int, ...]]:
    """The shape of each tensor in a safetensors file whose name is in `part` (its header only)."""
    from safetensors import safe_open

    with safe_open(str(_existing(path)), framework="pt") as file:
        return {name: tuple(file.get_slice(name).get_shape()) for name in file.keys() if part(name)}


def _existing(path: str | Path) -> Path:
    if not Path(path).is_file():
        raise FileNotFoundError(f"checkpoint not found: {path}")
    return Path(path)


def require_fit(module: nn.Module, found: dict[str, tuple[int, ...]], path: Path,
                part: Callable[[str], bool] = _everything) -> None:
    expected = {name: t for name, t in module.state_dict(keep_vars=True).items() if part(name)}
    problems = _mismatches(expected, found)
    if problems:
        raise CheckpointMismatch(f"{path.name} does not fit {type(module).__name__}: " + "; ".join(problems))


def _mismatches(expected: dict[str, torch.Tensor], found: dict[str, tuple[int, ...]]) -> list[str]:
    tied = _tied_names(expected)
    missing = [n for n in expected if n not in found and not (tied.get(n, set()) & found.keys())]
    unexpected = [n for n in found if n not in expected]
    misshapen = [
        f"{n} has shape {found[n]}, expected {tuple(t.shape)}"
        for n, t in expected.items()
        if n in found and found[n] != tuple(t.shape)
    ]
    problems = []
    if missing:
        problems.append(f"missing {_listing(missing)}")
    if unexpected:
        problems.append(f"unexpected {_listing(unexpected)}")
    return problems + misshapen


def _tied_names(state: dict[str, torch.Tensor]) -> dict[str, set[str]]:
    """Names sharing one parameter (identity, not storage: meta tensors have none)."""
    by_param: dict[int, set[str]] = {}
    for name, tensor in state.items():
        by_param.setdefault(id(tensor), set()).add(name)
    return {name: names - {name} for names in by_param.values() for name in names}


def _listing(names: list[str], limit: int = 5) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" (+{len(names) - limit} more)" if len(names) > limit else "")
