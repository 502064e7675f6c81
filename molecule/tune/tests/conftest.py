"""Fixtures for the tune suite (helpers and the autouse healthy_after: molecule/resources/testlib.py)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "resources"))

from testlib import healthy_after  # noqa: F401 (every test ends on the normal, healthy service)
