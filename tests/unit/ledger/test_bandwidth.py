"""The device's bandwidth (vllm_ops.ledger.bandwidth): measured from the all-reduce floor's copy, else
the table of known GPUs by the name the trace gives, labelled as a spec figure."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vllm_ops.ledger import SPEC_GBPS, device_bandwidth
from vllm_ops.ledger.bandwidth import spec_bandwidth

RESULTS = Path(__file__).resolve().parents[2] / "gpu" / "results"


@pytest.mark.parametrize(("name", "entry", "gbps"), [
    ("NVIDIA H200", "H200", 4800),
    ("NVIDIA H100 80GB HBM3", "H100 SXM", 3350),
    ("NVIDIA H100 PCIe", "H100 PCIe", 2000),
    ("NVIDIA H100 NVL", "H100 NVL", 3900),
    ("NVIDIA H20", "H20", 4000),
    ("NVIDIA A100-SXM4-80GB", "A100 80GB SXM", 2039),
    ("NVIDIA A100 80GB PCIe", "A100 80GB PCIe", 1935),
    ("NVIDIA A100-PCIE-40GB", "A100 40GB", 1555),
    ("NVIDIA L4", "L4", 300),
    ("NVIDIA L40S", "L40S", 864),
    ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "RTX PRO 6000 Blackwell", 1792),
    ("AMD Instinct MI300X", "MI300X", 5300),
])
def test_the_table_by_the_names_gpus_report(name, entry, gbps):
    found = spec_bandwidth(name)
    assert (found.name, found.gbps) == (entry, gbps)


def test_unknown_gpus_are_not_guessed():
    assert spec_bandwidth("Test GPU") is None and spec_bandwidth(None) is None
    out = device_bandwidth("Test GPU")
    assert out["gbps"] is None and out["source"] is None and "not in the table of known GPUs" in out["note"]
    assert len({g.name for g in SPEC_GBPS}) == len(SPEC_GBPS)


def test_the_measured_copy_on_the_h200():
    floor = json.loads((RESULTS / "allreduce_h200_ws1_copy.json").read_text())
    copy = floor["device_copy"]
    out = device_bandwidth("NVIDIA H200", floor)
    # read + written over the median time of one copy
    assert out["gbps"] == round(2 * copy["bytes"] / (copy["median_us"] * 1e-6) / 1e9, 1)
    assert out["source"] == "measured" and out["gpu"] == "NVIDIA H200" and "copy" in out["how"]


def test_the_median_over_ranks():
    floor = {"gpu_name": "NVIDIA H200", "device_copy": {"hbm_gbps": 4000.0, "hbm_gbps_by_rank": [4000.0, 3000.0,
                                                                                                 4100.0]}}
    assert device_bandwidth("NVIDIA H200", floor)["gbps"] == 4000.0
    assert "median of 3 ranks" in device_bandwidth("NVIDIA H200", floor)["how"]


@pytest.mark.parametrize(("floor", "note"), [
    (None, "no all-reduce floor given"),
    ("allreduce_h200_ws1_default.json", "has no device_copy"),
    ({"gpu_name": "NVIDIA H200", "device_copy": {"bytes": 1, "error": "rank 3: CUDA out of memory"}},
     "the device copy failed: rank 3: CUDA out of memory"),
    ({"gpu_name": "NVIDIA H100 80GB HBM3", "device_copy": {"hbm_gbps": 3000.0}},
     "the copy was measured on a NVIDIA H100 80GB HBM3, the trace ran on a NVIDIA H200: not used"),
])
def test_without_a_usable_measurement_the_spec_is_used_and_labelled(floor, note):
    if isinstance(floor, str):
        floor = json.loads((RESULTS / floor).read_text())  # measured before the copy was
    out = device_bandwidth("NVIDIA H200", floor)
    assert (out["gbps"], out["source"]) == (4800.0, "spec")
    assert "not measured" in out["how"] and note in out["note"]
