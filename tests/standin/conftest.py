"""Fixtures for the stand-in tests; the helpers live in standin_support.py."""

import pytest

from standin_support import TEMPLATES, Sandbox, Server


@pytest.fixture
def sandbox(tmp_path):
    return Sandbox(tmp_path)


@pytest.fixture
def server(sandbox, tmp_path):
    srv = Server(sandbox, tmp_path / "vllm.log")
    yield srv
    srv.kill_all()


@pytest.fixture
def templates():
    """The real H200 trace templates the repo carries (tests/data/traces/h200_tp2_decode)."""
    assert sorted(TEMPLATES.glob("*rank*.json.gz")), f"real trace templates missing from {TEMPLATES}"
    return TEMPLATES
