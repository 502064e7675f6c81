"""Fixtures of the rollout tests (helpers in rollout_helpers.py), written in tmp_path."""

import json

import pytest

from rollout_helpers import write_canary


@pytest.fixture
def canary_dir(tmp_path):
    def make(before, after, **kw):
        return write_canary(tmp_path / "canary", before, after, **kw)
    return make


@pytest.fixture
def rollout_dir(tmp_path):
    def make(*records, gate=None, gates=None, root="artifacts"):
        """``gate``: the gate.json of every canary; ``gates``: host -> its own; ``root``: another
        folder under tmp_path for a second rollout in one test."""
        d = tmp_path / root / "rollout" / "20261201T100000Z"
        (d / "hosts").mkdir(parents=True)
        for r in records:
            own = (gates or {}).get(r["host"], gate)
            if r["stage"] == "canary" and own is not None:
                (d.parent / f"gate-{r['host']}.json").write_text(json.dumps(own))
                r["gate"] = str(d.parent / f"gate-{r['host']}.json")
            (d / "hosts" / f"{r['host']}.json").write_text(json.dumps(r))
        return d
    return make
