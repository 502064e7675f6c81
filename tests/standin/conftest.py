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
    files = sorted(TEMPLATES.glob("*rank*.json.gz")) if TEMPLATES.is_dir() else []
    if not files:
        pytest.skip(f"real trace templates not found in {TEMPLATES} (../shared/traces)")
    return TEMPLATES
