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
    def make(*records, gate=None):
        d = tmp_path / "artifacts" / "rollout" / "20261201T100000Z"
        (d / "hosts").mkdir(parents=True)
        for r in records:
            if r["stage"] == "canary" and gate is not None:
                (tmp_path / "gate.json").write_text(json.dumps(gate))
                r["gate"] = str(tmp_path / "gate.json")
            (d / "hosts" / f"{r['host']}.json").write_text(json.dumps(r))
        return d
    return make
