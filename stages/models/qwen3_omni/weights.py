"""The tensors of a model folder's safetensors (one file, or shards named by model.safetensors.index.json), and
strict loading of the tensors under a key prefix into a module."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import torch
from torch import nn

from stages.models.weights import CheckpointMismatch

INDEX = "model.safetensors.index.json"


class SafetensorsFolder:
    """Which file holds each tensor key: the index's weight map where the folder has one, else every
    *.safetensors file in it (a key in two files is an error)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.file_of = self._index() if (self.path / INDEX).is_file() else self._scan()

    def keys(self, prefix: str) -> list[str]:
        return [key for key in self.file_of if key.startswith(prefix)]

    def shapes(self, keys: list[str]) -> dict[str, tuple[int, ...]]:
        """The named tensors' shapes, from the files' headers."""
        return self._each(keys, lambda file, key: tuple(file.get_slice(key).get_shape()))

    def read(self, keys: list[str]) -> dict[str, torch.Tensor]:
        """The named tensors (on the CPU, as stored)."""
        return self._each(keys, lambda file, key: file.get_tensor(key))

    def read_rows(self, key: str, ids: list[int]) -> torch.Tensor:
        """Rows `ids` of a matrix, without reading the rest of it."""
        from safetensors import safe_open

        with safe_open(str(self.file_of[key]), framework="pt") as file:
            rows = file.get_slice(key)
            return torch.cat([rows[i : i + 1] for i in ids])

    def where_missing(self) -> str:
        """What should have held a key it lacks: the index, the one weights file, or any of the files."""
        files = set(self.file_of.values())
        if (self.path / INDEX).is_file():
            return INDEX
        return files.pop().name if len(files) == 1 else "no *.safetensors file"

    def _each(self, keys: list[str], take) -> dict:
        """take(open file, key) for each key, each file opened once."""
        from safetensors import safe_open

        by_file: dict[Path, list[str]] = defaultdict(list)
        for key in keys:
            by_file[self.file_of[key]].append(key)
        taken = {}
        for path, names in by_file.items():
            with safe_open(str(path), framework="pt") as file:
                taken.update((name, take(file, name)) for name in names)
        return taken

    def _index(self) -> dict[str, Path]:
        weight_map = json.loads((self.path / INDEX).read_text(encoding="utf-8")).get("weight_map")
        if not isinstance(weight_map, dict):
            raise CheckpointMismatch(f"{self.path / INDEX} has no weight_map")
        return {key: self.path / name for key, name in weight_map.items()}

    def _scan(self) -> dict[str, Path]:
        from safetensors import safe_open

        files = sorted(self.path.glob("*.safetensors"))
        if not files:
            raise FileNotFoundError(f"{self.path} has no *.safetensors weights")
        file_of: dict[str, Path] = {}
        for path in files:
            with safe_open(str(path), framework="pt") as file:
                for key in file.keys():
                    if key in file_of:
                        raise CheckpointMismatch(f"{key} is in both {file_of[key].name} and {path.name}")
                    file_of[key] = path
        return file_of


def load_module(module: nn.Module, folder: SafetensorsFolder, prefix: str, skip: tuple[str, ...] = (),
                device: str | torch.device = "cpu", dtype: torch.dtype | None = None) -> None:
    """Load every tensor whose key starts with `prefix` (and with none of `skip`) into `module`, as its
    state-dict name after the prefix, then move it (buffers too) to `device`, floating tensors to `dtype` if
    given; its parameters take no gradient (serving).

    Strict: CheckpointMismatch (a ValueError) naming each missing, unexpected or misshapen key and its file;
    the module is unchanged on error. Parameters tied in the module (one tensor under two names) need either
    name. Loading assigns the read tensors, so `module` may be built on the meta device (buffers outside its
    state dict excepted: those must be real).
    """
    expected = module.state_dict(keep_vars=True)
    found = {key[len(prefix):] for key in folder.keys(prefix) if not key.startswith(skip)}
    _require_fit(expected, found, folder, prefix)
    sources = _sources(expected, found)
    tensors = folder.read([prefix + name for name in set(sources.values())])
    state = {name: _converted(tensors[prefix + source], device, dtype) for name, source in sources.items()}
    module.load_state_dict(state, strict=True, assign=True)
    module.to(device=device, dtype=dtype).requires_grad_(False)


def _require_fit(expected: dict[str, torch.Tensor], found: set[str], folder: SafetensorsFolder, prefix: str) -> None:
    aliases = _aliases(expected)
    problems = [f"{folder.where_missing()} has no {prefix}{name}" for name in expected
                if name not in found and not aliases[name] & found]
    problems += [f"{folder.file_of[prefix + name].name} has {prefix}{name}, which the module does not take"
                 for name in sorted(found - expected.keys())]
    shapes = folder.shapes([prefix + name for name in found if name in expected])
    for name in (n for n in found if n in expected):
        shape, wanted = shapes[prefix + name], tuple(expected[name].shape)
        if shape != wanted:
            problems.append(f"{folder.file_of[prefix + name].name} has {prefix}{name} of shape {shape}, "
                            f"expected {wanted}")
    if problems:
        listed = "; ".join(problems[:8]) + (f" (+{len(problems) - 8} more)" if len(problems) > 8 else "")
        raise CheckpointMismatch(f"{folder.path}: {listed}")


def _aliases(state: dict[str, torch.Tensor]) -> dict[str, set[str]]:
    """Each name's other names for the same tensor (tied parameters)."""
    by_tensor: dict[int, set[str]] = defaultdict(set)
    for name, tensor in state.items():
        by_tensor[id(tensor)].add(name)
    return {name: by_tensor[id(tensor)] - {name} for name, tensor in state.items()}


def _sources(expected: dict[str, torch.Tensor], found: set[str]) -> dict[str, str]:
    """Each state-dict name and the checkpoint name it is read from (itself, or a tied alias)."""
    aliases = _aliases(expected)
    return {name: name if name in found else min(aliases[name] & found) for name in expected}


def _converted(tensor: torch.Tensor, device: str | torch.device, dtype: torch.dtype | None) -> torch.Tensor:
    if dtype is not None and tensor.is_floating_point():
        tensor = tensor.to(dtype)
    return tensor.to(device)
