"""plugins/filter/vllm_fabric.py: the fabric filters, thin over vllm_ops.fabric, their errors naming them."""

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.vllm_ops.serving.plugins.filter import vllm_fabric

FILTERS = vllm_fabric.FilterModule().filters()


def test_the_filters_are_exported_and_thin():
    assert set(FILTERS) == {"vllm_pcie_link_preflight", "vllm_fabric_warnings"}
    judged = FILTERS["vllm_pcie_link_preflight"]({"rc": 0, "stdout": "0, 00000000:18:00.0, 8, 16\n"}, "error", 1)
    assert judged["refuse"] and judged["links"][0]["rank"] == 0
    record = {"read": True, "during": "during the profiled requests", "gpus": [
        {"index": 0, "bus_id": "00000000:18:00.0", "width_current": 16, "width_max": 16, "gen_current": 2,
         "gen_max": 5, "utilization_pct": 80}]}
    assert FILTERS["vllm_fabric_warnings"](record, 1) == [
        "PCIe link of GPU 0 (00000000:18:00.0, rank 0) at x16 of x16, Gen2 of Gen5 (13% of its bandwidth), "
        "read during the profiled requests"]
    assert FILTERS["vllm_fabric_warnings"]({"read": False, "reason": "off"}, 8, {}) == []


def test_bad_input_fails_naming_the_filter():
    with pytest.raises(AnsibleFilterError, match=r"^vllm_pcie_link_preflight: the nvidia-smi task's result"):
        FILTERS["vllm_pcie_link_preflight"]("text")
    with pytest.raises(AnsibleFilterError, match=r"^vllm_fabric_warnings: capture.json 'fabric.gpus'"):
        FILTERS["vllm_fabric_warnings"]({"read": True, "gpus": "none"}, 2)
