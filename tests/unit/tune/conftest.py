"""Fixtures of the tune's tests (the helpers that write a tune's directory: tune_helpers.py)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def tune_dir(tmp_path) -> Path:
    d = tmp_path / "artifacts" / "h1" / "20261201T120000Z"
    (d / "profile").mkdir(parents=True)
    return d
