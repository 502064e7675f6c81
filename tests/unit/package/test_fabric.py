"""vllm_ops.fabric: the PCIe links and the peer-to-peer matrix, read, put on ranks, judged."""

from __future__ import annotations

import pytest

from vllm_ops import fabric

BUS = ["00000000:18:00.0", "00000000:2A:00.0", "00000000:3A:00.0", "00000000:5D:00.0"]


def reading(index, width=16, width_max=16, gen=5, gen_max=5, util=45, bus=None, uuid=None):
    return {"index": index, "bus_id": bus or BUS[index], "uuid": uuid or f"GPU-{index:08d}-aaaa",
            "gen_current": gen, "gen_max": gen_max, "gen_gpu_max": gen_max, "gen_host_max": gen_max,
            "width_current": width, "width_max": width_max, "utilization_pct": util, "at_s": 0.0}


def worker(rank, gpu, pid, mib=136582, name=None):
    return {"pid": pid, "process_name": name or f"VLLM::Worker_TP{rank}", "bus_id": BUS[gpu], "used_mib": mib}


def capture(gpus, apps=(), tp=2, environment=None, p2p=None, read=True, reason=None):
    return {"tensor_parallel_size": tp, "environment": environment or {},
            "fabric": {"read": read, "reason": reason, "during": "during the profiled requests", "interval_s": 2.0,
                       "samples": 3, "failed_samples": 0, "query": [], "gpus": list(gpus),
                       "compute_apps": list(apps), "p2p_read": p2p, "errors": []}}


# --- reading nvidia-smi ----------------------------------------------------------------------------

def test_csv_readings_with_units_missing_values_and_bus_ids_upper_case():
    fields = ["index", "pci.bus_id", "pcie.link.gen.gpucurrent", "pcie.link.gen.max", "pcie.link.width.current",
              "pcie.link.width.max", "utilization.gpu"]
    text = "1, 00000000:2a:00.0, 5, 5, 4, 16, 87 %\n0, 00000000:18:00.0, [N/A], 5, 16, 16, [Not Supported]\n\n"
    rows = fabric.parse_link_csv(text, fields)
    assert [r["index"] for r in rows] == [0, 1]  # sorted by index
    assert rows[0]["gen_current"] is None and rows[0]["utilization_pct"] is None
    assert rows[1] == {"index": 1, "bus_id": "00000000:2A:00.0", "gen_current": 5, "gen_max": 5,
                       "width_current": 4, "width_max": 16, "utilization_pct": 87}


def test_csv_of_the_wrong_width_or_an_unknown_field_is_refused():
    with pytest.raises(fabric.FabricInputError, match="2 values for 4 fields"):
        fabric.parse_link_csv("0, 16\n", fabric.PREFLIGHT_FIELDS)
    with pytest.raises(fabric.FabricInputError, match="not link fields"):
        fabric.parse_link_csv("", ["index", "memory.used"])
    with pytest.raises(fabric.FabricInputError, match="expected text"):
        fabric.parse_link_csv(None, fabric.PREFLIGHT_FIELDS)


# As the real tool prints it (an 8-GPU PCIe host with one pair refused by its chipset), the
# header underlined with ANSI codes as some drivers do, and the legend with DR.
P2P = ("\t\x1b[4mGPU0\tGPU1\tGPU2\x1b[0m\n"
       " GPU0\tX\tOK\tCNS\n GPU1\tOK\tX\tOK\n GPU2\tCNS\tOK\tX\n\n"
       "Legend:\n\n  X    = Self\n  OK   = Status Ok\n  CNS  = Chipset not supported\n"
       "  DR   = Disabled by regkey\n  U    = Unknown\n")


def test_p2p_matrix_pairs_once_each_and_the_legend_ignored():
    matrix = fabric.parse_p2p(P2P)
    assert matrix == {"read": True, "gpus": [0, 1, 2], "pairs": {"0-1": "OK", "0-2": "CNS", "1-2": "OK"}}


@pytest.mark.parametrize("text", [None, "", "No devices were found\n", "Invalid combination of input arguments."])
def test_p2p_without_a_matrix_is_not_read(text):
    assert fabric.parse_p2p(text) == {"read": False, "gpus": [], "pairs": {}}


# --- judging one link ------------------------------------------------------------------------------

def test_a_narrow_link_is_degraded_with_its_bandwidth_share():
    judged = fabric.judge_link(reading(1, width=4))
    assert judged == {"degraded": ["width"], "generation_judged": True, "bandwidth_share": 0.25}


def test_a_slow_link_under_load_is_degraded_and_its_share_counts_the_generation():
    judged = fabric.judge_link(reading(0, gen=1, util=60))
    assert judged["degraded"] == ["generation"]
    assert judged["bandwidth_share"] == round(0.25 / 3.938, 4)  # Gen1 of Gen5, x16 of x16


@pytest.mark.parametrize("util", [0, None])
def test_the_generation_of_an_idle_or_unknown_load_reading_is_no_evidence(util):
    judged = fabric.judge_link(reading(0, gen=1, util=util))
    assert judged == {"degraded": [], "generation_judged": False, "bandwidth_share": 1.0}


def test_generation_not_judged_when_asked_not_to_and_a_healthy_link_is_clean():
    assert fabric.judge_link(reading(0, gen=2), judge_generation=False)["degraded"] == []
    assert fabric.judge_link(reading(0)) == {"degraded": [], "generation_judged": True, "bandwidth_share": 1.0}


def test_unknown_widths_and_generations_are_not_judged():
    judged = fabric.judge_link(reading(0, width=None, gen=6, gen_max=6))
    assert judged == {"degraded": [], "generation_judged": True, "bandwidth_share": None}


# --- ranks on GPUs ---------------------------------------------------------------------------------

def test_observed_workers_put_ranks_on_the_gpu_they_hold_most_memory_on():
    gpus = [reading(i) for i in range(4)]
    # Rank 0 on GPU 2 and rank 1 on GPU 0 (CUDA_VISIBLE_DEVICES=2,0, say); each also holds a little
    # on its peer's GPU, as NCCL's peer mappings do.
    apps = [worker(0, 0, 701, mib=500), worker(0, 2, 701), worker(1, 0, 702), worker(1, 2, 702, mib=500),
            {"pid": 9, "process_name": "/usr/bin/python3", "bus_id": BUS[3], "used_mib": 900}]
    mapping = fabric.rank_map(2, {}, gpus, apps)
    assert mapping["basis"].startswith("observed")
    assert mapping["ranks"] == {0: {"gpu": 2, "bus_id": BUS[2], "pid": 701},
                                1: {"gpu": 0, "bus_id": BUS[0], "pid": 702}}


def test_tp1_worker_is_rank_0_and_a_rank_claimed_twice_is_not_observed():
    gpus = [reading(i) for i in range(2)]
    assert fabric.rank_map(1, {}, gpus, [worker(0, 1, 5, name="VLLM::Worker")])["ranks"] == {
        0: {"gpu": 1, "bus_id": BUS[1], "pid": 5}}
    twice = [worker(0, 1, 5), worker(0, 0, 6), worker(1, 0, 7)]
    mapping = fabric.rank_map(2, {}, gpus, twice)
    assert mapping["basis"].startswith("assumed")
    assert mapping["ranks"][0]["gpu"] == 0


def test_cuda_visible_devices_indexes_and_uuids():
    gpus = [reading(i) for i in range(4)]
    by_index = fabric.rank_map(2, {"CUDA_VISIBLE_DEVICES": "3,1", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}, gpus)
    assert {r: p["gpu"] for r, p in by_index["ranks"].items()} == {0: 3, 1: 1}
    assert "CUDA_DEVICE_ORDER=PCI_BUS_ID" in by_index["basis"]
    by_uuid = fabric.rank_map(2, {"CUDA_VISIBLE_DEVICES": "GPU-00000002,GPU-00000000-aaaa"}, gpus)
    assert {r: p["gpu"] for r, p in by_uuid["ranks"].items()} == {0: 2, 1: 0}
    assert "assumed in PCI bus order" in by_uuid["basis"]
    unplaced = fabric.rank_map(2, {"CUDA_VISIBLE_DEVICES": "MIG-1,7"}, gpus)
    assert unplaced["ranks"] == {}


def test_without_anything_ranks_follow_pci_bus_order_and_say_it_is_assumed():
    gpus = [reading(i) for i in (3, 0, 2, 1)]
    mapping = fabric.rank_map(2, None, gpus, [])
    assert {r: p["bus_id"] for r, p in mapping["ranks"].items()} == {0: BUS[0], 1: BUS[1]}
    assert mapping["basis"].startswith("assumed: rank r on the r-th GPU in PCI bus order")


# --- the capture's assessment, findings, words -----------------------------------------------------

def test_the_degraded_link_is_named_with_its_gpu_bus_and_rank():
    gpus = [reading(0), reading(1, width=4)]
    found = fabric.findings(fabric.assess(capture(gpus, [worker(0, 0, 11), worker(1, 1, 12)])))
    assert len(found) == 1
    (f,) = found
    assert (f["kind"], f["rank"], f["gpu"], f["bus_id"]) == ("pcie-link-degraded", 1, 1, BUS[1])
    assert f["evidence"]["width_current"] == 4 and f["evidence"]["width_max"] == 16
    assert f["evidence"]["bandwidth_share"] == 0.25 and f["evidence"]["degraded"] == ["width"]
    assert f["evidence"]["rank_basis"].startswith("observed")
    assert "lspci -vvv -s 0000:2a:00.0" in f["next"][0] and "nvidia-smi -q -i 1" in f["next"][0]
    assert fabric.describe(f) == ("PCIe link of GPU 1 (00000000:2A:00.0, rank 1) at x4 of x16, Gen5 of Gen5 "
                                  "(25% of its bandwidth), read during the profiled requests")
    assert fabric.warnings(capture(gpus, [worker(0, 0, 11), worker(1, 1, 12)])) == [fabric.describe(f)]


def test_an_idle_gpu_s_low_generation_is_no_finding_but_its_narrow_width_is():
    gpus = [reading(0, gen=1, util=0), reading(1, gen=1, util=0, width=8)]
    found = fabric.findings(fabric.assess(capture(gpus)))
    assert [(f["gpu"], f["evidence"]["degraded"]) for f in found] == [(1, ["width"])]
    assert "generation not judged (idle reading)" in fabric.describe(found[0])
    assert "(50% of its bandwidth)" in fabric.describe(found[0])


def test_p2p_pairs_between_the_service_s_gpus_that_are_not_ok_are_findings():
    gpus = [reading(i) for i in range(3)]
    assessment = fabric.assess(capture(gpus, tp=3, p2p=P2P))
    assert assessment["p2p"]["unavailable"] == [{"gpus": [0, 2], "ranks": [0, 2], "status": "CNS",
                                                 "meaning": "chipset not supported"}]
    (f,) = fabric.findings(assessment)
    assert f["kind"] == "p2p-unavailable"
    assert fabric.describe(f) == ("peer-to-peer read between GPU 0 and GPU 2 (ranks 0 and 2): "
                                  "CNS (chipset not supported)")
    # GPU 2 serves no rank at TP 2: its pair does not matter to this service.
    assert fabric.findings(fabric.assess(capture(gpus, tp=2, p2p=P2P))) == []


def test_a_capture_that_read_nothing_or_predates_the_reading_is_not_checked():
    not_read = fabric.assess(capture([], read=False, reason="nvidia-smi not found on the host"))
    assert (not_read["checked"], not_read["reason"]) == (False, "nvidia-smi not found on the host")
    old = fabric.assess({"tensor_parallel_size": 2, "environment": {}})
    assert old["checked"] is False and "before this release" in old["reason"]
    assert fabric.findings(old) == [] and fabric.warnings({"tensor_parallel_size": 2}) == []


@pytest.mark.parametrize("bad", [[{"bus_id": "x"}], "gpus", [{"index": "0"}]])
def test_malformed_readings_are_refused_naming_the_field(bad):
    record = capture([])
    record["fabric"]["gpus"] = bad
    with pytest.raises(fabric.FabricInputError, match=r"fabric\.gpus"):
        fabric.assess(record)
    with pytest.raises(fabric.FabricInputError, match="tensor_parallel_size"):
        fabric.assess({**capture([reading(0)]), "tensor_parallel_size": "two"})


def test_advice_for_the_rank_of_a_degraded_link_comes_first():
    found = fabric.findings(fabric.assess(capture([reading(0), reading(1, width=4)])))
    assert fabric.advice_for_rank(found, 1) == [found[0]["next"][0]]
    assert fabric.advice_for_rank(found, 0) == [] and fabric.advice_for_rank(found, None) == []


# --- the deploy preflight --------------------------------------------------------------------------

def ran(stdout, rc=0, **more):
    return {"rc": rc, "stdout": stdout, "stderr": "", "changed": False, **more}


WIDTHS = "0, 00000000:18:00.0, 16, 16\n1, 00000000:2A:00.0, 4, 16\n"


def test_preflight_warns_of_a_narrow_link_naming_gpu_bus_and_assumed_rank():
    out = fabric.preflight(ran(WIDTHS), "warn", 2, {})
    assert out["checked"] and out["warn"] and not out["refuse"]
    assert [x["index"] for x in out["degraded"]] == [1]
    assert out["messages"] == ["PCIe link of GPU 1 (00000000:2A:00.0, rank 1) at x4 of x16 (25% of its bandwidth), "
                               "read at deploy, GPUs idle: the width only is judged"]
    assert out["rank_basis"].startswith("assumed")


def test_preflight_refuses_in_error_mode_and_passes_healthy_links():
    assert fabric.preflight(ran(WIDTHS), "error", 2)["refuse"] is True
    healthy = fabric.preflight(ran("0, 00000000:18:00.0, 16, 16\n"), "error", 1)
    assert healthy["checked"] and not healthy["refuse"] and healthy["messages"] == []


@pytest.mark.parametrize(("result", "reason"), [
    ({"rc": 2, "msg": "[Errno 2] No such file or directory: b'nvidia-smi'", "stdout": "", "stderr": ""},
     "nvidia-smi not found on the host"),  # ansible-core before 2.19
    ({"rc": 2, "msg": "Error executing command.", "stdout": "", "stderr": ""},
     "nvidia-smi could not be run on the host (not found, or not executable)"),  # ansible-core 2.19
    (ran("No devices were found\n", rc=6), "nvidia-smi failed (exit 6): No devices were found"),
    (ran(""), "nvidia-smi listed no GPU"),
    (ran("garbage\n"), "nvidia-smi's answer could not be read"),
    ({"skipped": True, "changed": False}, "the check is off"),
])
def test_preflight_without_a_reading_is_not_checked_never_an_error(result, reason):
    out = fabric.preflight(result, "error", 2)
    assert out["checked"] is False and out["reason"].startswith(reason)
    assert not out["warn"] and not out["refuse"]


@pytest.mark.parametrize(("mode", "normal"), [(False, "off"), ("off", "off"), ("OFF", "off"), ("error", "error"),
                                              ("warn", "warn"), ("warning", None), (True, None), (0, None)])
def test_preflight_modes_yaml_s_bare_off_included(mode, normal):
    assert fabric.preflight_mode(mode) == normal
    out = fabric.preflight(ran(WIDTHS), mode, 2)
    assert out["mode"] == normal
    assert (out["mode_error"] is None) == (normal is not None)
    assert out["refuse"] == (normal == "error") and out["warn"] == (normal == "warn")


def test_preflight_refuses_a_result_that_is_no_mapping():
    with pytest.raises(fabric.FabricInputError, match="expected a mapping"):
        fabric.preflight("0, x, 16, 16", "warn")
