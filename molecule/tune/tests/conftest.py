"""The campaign scenario's fixtures, for the tune's suite: the same file (molecule/campaign/tests/
conftest.py), loaded from there, so that test_tune.py could move into that scenario unchanged."""

from __future__ import annotations

import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "campaign_conftest", Path(__file__).resolve().parents[2] / "campaign" / "tests" / "conftest.py")
_campaign = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_campaign)

FAULT_DIR, LOCK, OLD_LOCK = _campaign.FAULT_DIR, _campaign.LOCK, _campaign.OLD_LOCK
campaign = _campaign.campaign
healthy_after = _campaign.healthy_after
