"""The history CSV: fixed columns, header on a new file, append, refusal on another header."""

import csv
import re

import pytest

from vllm_ops.campaign import COLUMN_DOCS, COLUMNS, CampaignInputError, append_history, history_row

from campaign_helpers import make_summary, rank_entry

EXPECTED_COLUMNS = (
    "campaign_id", "finished_at", "host", "model", "vllm_version", "tensor_parallel_size",
    "nccl_algo", "nccl_proto", "nccl_max_nchannels", "requests", "concurrency", "prompt_tokens",
    "output_tokens", "ttft_ms_p50", "tpot_ms_p50", "cuda_ms_per_step", "allreduce_ms_per_step",
    "allreduce_share", "allreduce_skew_corrected_ms", "verdict", "verdict_rank", "straggler", "steady_steps",
    "steady_period_ms", "steady_busy_ms", "steady_idle_ms", "steady_transfer_ms", "steady_wait_ms",
    "decode_steps", "warnings", "report", "downtime_s", "longest_gap_s",
    "loads", "load_ready_s", "load_weights_gbps", "disk_gbps",
)
LOAD_COLUMNS = 4
NO_VERDICT = dict.fromkeys(("verdict", "verdict_rank", "straggler", "steady_steps", "steady_period_ms",
                            "steady_busy_ms", "steady_idle_ms", "steady_transfer_ms", "steady_wait_ms"))


def test_the_columns_are_fixed_and_documented():
    assert COLUMNS == EXPECTED_COLUMNS
    assert all(COLUMN_DOCS[c] for c in COLUMNS)


def test_row(campaign, two_ranks):
    row = history_row(campaign, two_ranks)
    assert tuple(row) == COLUMNS
    assert row == {
        "campaign_id": "c20250131T120000", "finished_at": "2025-01-31T12:14:07Z", "host": "vllm-sandbox",
        "model": "Qwen/Qwen3-8B", "vllm_version": "0.11.0", "tensor_parallel_size": 2,
        "nccl_algo": "Ring", "nccl_proto": "LL", "nccl_max_nchannels": "8",
        "requests": 8, "concurrency": 1, "prompt_tokens": 512, "output_tokens": 128,
        "ttft_ms_p50": 40.5, "tpot_ms_p50": 16.4,
        "cuda_ms_per_step": 21.0, "allreduce_ms_per_step": 12.0, "allreduce_share": round(12 / 21, 4),
        "allreduce_skew_corrected_ms": 3.5, **NO_VERDICT, "decode_steps": 10, "warnings": 0,
        "report": "artifacts/vllm-sandbox/c20250131T120000/report.md", "downtime_s": None, "longest_gap_s": None,
        "loads": None, "load_ready_s": None, "load_weights_gbps": None, "disk_gbps": None,
    }


def test_the_downtime_the_poller_recorded_goes_in_the_row(campaign, two_ranks):
    row = history_row(dict(campaign, downtime={"seconds_not_ready": 17.25, "gaps": 2, "longest_gap_s": 9.1}),
                      two_ranks)
    assert (row["downtime_s"], row["longest_gap_s"]) == (17.25, 9.1)


def test_the_loads_the_job_recorded_go_in_the_row(campaign, two_ranks):
    model_loads = {"count": 2, "ready_s": [40.0, 50.0], "disk": {"gbps": 2.1},
                   "loads": [{"ready": True, "weights": {"gbps": 0.3}}, {"ready": True, "weights": {"gbps": 0.5}}]}
    row = history_row(dict(campaign, model_loads=model_loads), two_ranks)
    # the medians of the two loads, computed here
    assert (row["loads"], row["load_ready_s"], row["load_weights_gbps"], row["disk_gbps"]) == (2, 45.0, 0.4, 2.1)


def test_a_file_from_before_the_downtime_columns_is_migrated(tmp_path, campaign, two_ranks):
    path = tmp_path / "history.csv"
    old_columns = EXPECTED_COLUMNS[:-2 - LOAD_COLUMNS]
    old_row = [f"v{i}" for i in range(len(old_columns))]
    with open(path, "w", newline="") as fh:
        csv.writer(fh, lineterminator="\n").writerows([old_columns, old_row])
    assert append_history(path, history_row(campaign, two_ranks)) is False
    rows = list(csv.reader(path.open()))
    assert tuple(rows[0]) == EXPECTED_COLUMNS
    assert rows[1] == [*old_row, "", "", *[""] * LOAD_COLUMNS]  # the old campaign, nothing recorded for the new columns
    assert rows[2][0] == "c20250131T120000" and len(rows) == 3


def test_row_of_the_real_h200_pair_carries_the_verdict(campaign, h200_summary):
    row = history_row(campaign, h200_summary)
    ev = h200_summary["verdict"]["evidence"]
    # issue 20: the verdict's rank is the one whose host limits the run (1), not the last arriver (0)
    assert (row["verdict"], row["verdict_rank"], row["straggler"]) == ("host-bound", 1, 0)
    assert row["steady_period_ms"] == ev["period_ms"] and row["steady_busy_ms"] == ev["busy_ms"]
    assert row["steady_idle_ms"] == pytest.approx(ev["period_ms"] - ev["busy_ms"], abs=1e-4)
    assert row["steady_transfer_ms"] == ev["allreduce_transfer_ms"] and row["steady_wait_ms"] == ev["other_wait_ms"]
    assert row["steady_steps"] == 10  # steps 1-10: step 0 left out, step 11 has no next step to end its period


def test_minimal_meta_and_no_gpu_data():
    row = history_row({"id": "c2", "host": "h"}, make_summary([rank_entry(0, None)], warnings=["cpu only"]))
    assert row["campaign_id"] == "c2" and row["warnings"] == 1 and row["decode_steps"] == 10
    assert row["cuda_ms_per_step"] is None and row["nccl_algo"] is None and row["report"] is None
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", row["finished_at"])  # defaults to now


@pytest.mark.parametrize(("meta", "message"), [
    ("x", "expected the campaign metadata as a mapping"),
    ({"host": "h"}, r"campaign.id must be a non-empty string"),
    ({"id": "c", "host": ""}, r"campaign.host must be a non-empty string"),
    ({"id": "c", "host": "h", "environment": ["NCCL_ALGO=Ring"]}, "campaign.environment must be a mapping"),
    ({"id": "c", "host": "h", "finished_at": "2025-01-31 12:00"}, "campaign.finished_at: .* has no time zone"),
])
def test_bad_meta(meta, message, two_ranks):
    with pytest.raises(CampaignInputError, match=message):
        history_row(meta, two_ranks)


def test_append_creates_then_appends(tmp_path, campaign, two_ranks):
    path = tmp_path / "artifacts" / "vllm-sandbox" / "history.csv"
    first = history_row(campaign, two_ranks)
    second = history_row(dict(campaign, id="c2", model="org/model, with comma"), two_ranks)
    assert append_history(path, first) is True
    assert append_history(path, second) is False
    text = path.read_text()
    assert text.splitlines()[0] == ",".join(COLUMNS)
    rows = list(csv.DictReader(text.splitlines()))
    assert [r["campaign_id"] for r in rows] == ["c20250131T120000", "c2"]
    assert rows[1]["model"] == "org/model, with comma"
    assert rows[0]["allreduce_share"] == "0.5714" and rows[0]["nccl_algo"] == "Ring"


def test_empty_cells_and_missing_final_newline(tmp_path, two_ranks):
    path = tmp_path / "history.csv"
    path.write_text("")  # an empty file counts as new
    row = history_row({"id": "c1", "host": "h", "finished_at": "2025-01-31T12:00:00Z"}, two_ranks)
    assert append_history(path, row) is True
    path.write_text(path.read_text().rstrip("\n"))
    append_history(path, dict(row, campaign_id="c2"))
    rows = list(csv.DictReader(path.read_text().splitlines()))
    assert [r["campaign_id"] for r in rows] == ["c1", "c2"] and rows[0]["model"] == ""


def test_refuses_a_different_header(tmp_path, campaign, two_ranks):
    path = tmp_path / "history.csv"
    before = "campaign_id,host,allreduce_share\nold,h,0.5\n"
    path.write_text(before)
    with pytest.raises(CampaignInputError, match=r"history.csv: its header differs .* move the file aside"):
        append_history(path, history_row(campaign, two_ranks))
    assert path.read_text() == before


def test_refuses_a_row_with_other_columns(tmp_path):
    with pytest.raises(CampaignInputError, match="needs exactly the columns"):
        append_history(tmp_path / "h.csv", {"campaign_id": "c"})
    with pytest.raises(CampaignInputError, match="a history cell must be a scalar"):
        append_history(tmp_path / "h.csv", {key: ["x"] for key in COLUMNS})
    assert not (tmp_path / "h.csv").exists()  # nothing written for a bad row
