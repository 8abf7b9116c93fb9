"""Shared by the bench tool tests: the https fake model, pacing its frames 2 ms apart."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from bench._procs import Proc, start_fake
from bench._tls import make_tls


@pytest.fixture(scope="module")
def fake(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
         ) -> Iterator[Proc]:
    """One per test module (its log named after the module)."""
    proc = start_fake(2.0, tls=make_tls(Path(tmp_path_factory.mktemp("tls"))),
                      name=f"fake_llm_{request.module.__name__.rsplit('.', 1)[-1]}")
    try:
        yield proc
    finally:
        proc.stop()
