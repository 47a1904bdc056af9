"""The kernels' build cache: keyed by the source and the headers beside it."""

import shutil

import pytest

from stages.models.kernels import build


def test_a_changed_header_builds_the_library_again(monkeypatch, tmp_path):
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler")
    monkeypatch.setattr(build, "CACHE_DIR", tmp_path / "cache")
    source, header = tmp_path / "answer.c", tmp_path / "value.h"
    source.write_text('#include "value.h"\nint answer(void) { return VALUE; }\n')
    header.write_text("#define VALUE 1\n")
    assert build.load_library(source, "none").answer() == 1
    header.write_text("#define VALUE 2\n")
    assert build.load_library(source, "none").answer() == 2
    assert len(list((tmp_path / "cache").glob("answer-*.so"))) == 2
