"""vllm_ops.campaign.diskspace and `vllm-campaign-report estimate`: the room a capture needs."""

from __future__ import annotations

import json
import math

import pytest

from vllm_ops.campaign.cli import main
from vllm_ops.campaign.diskspace import DEFAULT_BYTES_PER_STEP, MARGIN, estimate
from vllm_ops.campaign.errors import CampaignInputError

LAST = {"id": "20261201T105022Z", "traces": [{"rank": 0, "bytes": 790578}, {"rank": 1, "bytes": 823251}],
        "load": {"requests": 4, "concurrency": 1, "output_tokens": 64}}


def test_the_last_campaign_gives_the_bytes_per_step_and_rank():
    got = estimate(LAST, requests=8, concurrency=2, output_tokens=128, ranks=8)
    # computed here: the last capture ran 4 batches of 65 steps; the next runs 4 batches of 129
    per_step = math.ceil((790578 + 823251) / 2 / (4 * 65))
    assert got["bytes_per_step"] == per_step and got["steps"] == 4 * 129
    assert got["bytes"] == math.ceil(per_step * 4 * 129 * 8 * MARGIN)
    assert got["mib"] == math.ceil(got["bytes"] / 2**20)
    assert got["source"] == "campaign 20261201T105022Z: 1613829 bytes over 2 rank(s), 260 steps"


def test_without_a_campaign_the_documented_default_is_used():
    got = estimate(None, requests=4, concurrency=1, output_tokens=64, ranks=8)
    assert got["bytes"] == math.ceil(DEFAULT_BYTES_PER_STEP * 4 * 65 * 8 * MARGIN)
    assert got["source"].startswith("default")


@pytest.mark.parametrize("bad", [{"traces": []}, {"traces": [{"bytes": 1}], "load": {"requests": "x"}}])
def test_a_broken_record_is_refused(bad):
    with pytest.raises(CampaignInputError, match="lacks its traces or load"):
        estimate(bad, requests=1, concurrency=1, output_tokens=2, ranks=1)


def test_the_cli_prints_the_estimate_as_json(tmp_path, capsys):
    (tmp_path / "campaign.json").write_text(json.dumps(LAST))
    assert main(["estimate", "--last", str(tmp_path / "campaign.json"), "--requests", "8", "--concurrency", "2",
                 "--output-tokens", "128", "--ranks", "8"]) == 0
    assert json.loads(capsys.readouterr().out) == estimate(LAST, requests=8, concurrency=2, output_tokens=128, ranks=8)
    assert main(["estimate", "--requests", "0", "--concurrency", "1", "--output-tokens", "2", "--ranks", "1"]) == 2
    assert "requests must be a positive integer, got 0" in capsys.readouterr().err
