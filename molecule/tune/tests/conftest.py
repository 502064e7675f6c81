"""Fixtures for the experiment and tune suite (helpers: molecule/resources/testlib.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "resources"))

from testlib import leave_normal


@pytest.fixture(autouse=True)
def healthy_after(host):
    """Every test must leave the normal service active and healthy, with no fault left."""
    yield
    leave_normal(host)
