"""What a machine where LiveServe is not installed needs before the check imports it: the repository's packages and
the brought wheels on the path of this process and of the servers it starts. Stdlib only: this runs before any of
it imports."""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from lab.device_check.wheels import unpack


@contextlib.contextmanager
def prepared(repo: Path, wheels: Path | None) -> Iterator[list[str]]:
    """Within it: `wheels`' wheels unpacked into a scratch folder first on sys.path (None: none); that folder and
    `repo` first on PYTHONPATH, for the processes started (a server's `python -m liveserve.cli`). Yields the wheels
    unpacked."""
    with tempfile.TemporaryDirectory(prefix="device-check-site-") as site:
        unpacked = [] if wheels is None else unpack(wheels, Path(site))
        paths = ([site] if unpacked else []) + [str(repo)]
        sys.path[:0] = [path for path in paths if path not in sys.path]
        previous = os.environ.get("PYTHONPATH")
        os.environ["PYTHONPATH"] = os.pathsep.join(paths + ([previous] if previous else []))
        try:
            yield unpacked
        finally:
            _restore("PYTHONPATH", previous)


def _restore(name: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value
