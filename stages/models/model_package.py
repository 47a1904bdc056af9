"""Models that ship inside installed packages: where their files are, and errors that name them."""

from __future__ import annotations

import importlib.util
from pathlib import Path


class ModelPackageError(RuntimeError):
    """A model that ships in a package is missing, incomplete or does not load. The message is one
    line naming the package and the file, and says how to fix it."""


def package_files(what: str, module: str, distribution: str, *names: str, install: str = "") -> list[Path]:
    """The files `names` (relative to module `module`'s directory) of the installed `distribution`,
    found without importing it; ModelPackageError if the package or a file is missing. `what` names
    the model in the message (e.g. "ASR model"); `install` is the pip command that puts the package in
    (default: `pip install DISTRIBUTION`)."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise ModelPackageError(f"{what}: package {distribution} is not installed "
                                f"({install or f'pip install {distribution}'})")
    root = Path(next(iter(spec.submodule_search_locations)))
    paths = [root / name for name in names]
    for name, path in zip(names, paths):
        if not path.is_file():
            raise ModelPackageError(f"{what}: {distribution} has no {name} ({path}); reinstall {distribution}")
    return paths


def require_module(what: str, module: str, distribution: str) -> None:
    """ModelPackageError if the library `module` (from `distribution`) that runs a model is not installed."""
    if importlib.util.find_spec(module) is None:
        raise ModelPackageError(f"{what}: package {distribution} is not installed (pip install {distribution})")


def load_failed(what: str, distribution: str, path: Path, exc: Exception) -> ModelPackageError:
    """The error for a file of `distribution` that exists but does not load (corrupt or truncated)."""
    reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    return ModelPackageError(f"{what}: {path} from {distribution} does not load ({reason}); reinstall {distribution}")
