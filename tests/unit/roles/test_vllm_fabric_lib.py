"""The capture's reading of the PCIe links on the host (vllm_capture's module_utils/vllm_fabric_lib.py)."""

from __future__ import annotations

import subprocess

import pytest
from ansible_collections.vllm_ops.serving.plugins.module_utils import vllm_fabric_lib as lib

from vllm_ops import fabric

NEW, OLD = lib.QUERIES
APPS = "4242, VLLM::Worker_TP0, 00000000:18:00.0, 136582\n4243, VLLM::Worker_TP1, 00000000:2A:00.0, 136582\n"
P2P = "\tGPU0\tGPU1\n GPU0\tX\tOK\n GPU1\tOK\tX\n\nLegend:\n\n  X    = Self\n"


def line(index, gen, width, util, fields=NEW):
    values = {"index": index, "pci.bus_id": f"00000000:{['18', '2A'][index]}:00.0", "uuid": f"GPU-{index}",
              "utilization.gpu": util, "pcie.link.gen.gpucurrent": gen, "pcie.link.gen.current": gen,
              "pcie.link.gen.max": 5, "pcie.link.gen.gpumax": 5, "pcie.link.gen.hostmax": 5,
              "pcie.link.width.current": width, "pcie.link.width.max": 16}
    return ", ".join(str(values[f]) for f in fields)


class FakeSmi:
    """subprocess.run for nvidia-smi: a queue of link answers, fixed apps and p2p answers (None: the tool
    refuses the question, exit 2); every call kept."""

    def __init__(self, links, old_driver=False, missing=False, apps=APPS, p2p=P2P):
        self.links = list(links)
        self.old_driver, self.missing, self.apps, self.p2p = old_driver, missing, apps, p2p
        self.calls = []

    def __call__(self, argv, **kwargs):
        self.calls.append(argv[1:])
        if self.missing:
            raise FileNotFoundError(2, "No such file or directory")
        arg = argv[1]
        if arg.startswith("--query-gpu="):
            if self.old_driver and "gpucurrent" in arg:
                return subprocess.CompletedProcess(argv, 2, 'Field "pcie.link.gen.gpucurrent" is not a valid field '
                                                            "to query.\n", "")
            answer = self.links.pop(0) if self.links else "No devices were found"
            rc = 6 if answer == "No devices were found" else 0
            return subprocess.CompletedProcess(argv, rc, answer + "\n", "")
        answer = self.apps if arg.startswith("--query-compute-apps=") else self.p2p
        if answer is None:
            return subprocess.CompletedProcess(argv, 2, "Invalid combination of input arguments.\n", "")
        return subprocess.CompletedProcess(argv, 0, answer, "")


def ticking():
    ticks = iter(range(1000))
    return lambda: float(next(ticks))


def test_the_keys_are_the_controller_s():
    assert lib.FIELD_KEYS == fabric.FIELD_KEYS
    assert set(NEW) <= set(lib.FIELD_KEYS) and set(OLD) <= set(lib.FIELD_KEYS)


def test_per_gpu_the_reading_with_the_link_most_up_is_kept():
    # GPU 0 reads idle at first (Gen1, 0%), then at its maximum; GPU 1 never gets beyond x4.
    smi = FakeSmi(["\n".join([line(0, 1, 16, 0), line(1, 5, 4, 50)]),
                   "\n".join([line(0, 5, 16, 70), line(1, 5, 4, 60)]),
                   "\n".join([line(0, 3, 16, 90), line(1, 4, 4, 90)])])
    sampler = lib.Sampler("nvidia-smi", runner=smi, clock=ticking())
    for _ in range(3):
        assert sampler.sample()
    record = sampler.record()
    assert record["read"] and record["samples"] == 3 and record["failed_samples"] == 0
    assert record["query"] == list(NEW)
    g0, g1 = record["gpus"]
    assert (g0["gen_current"], g0["utilization_pct"], g0["at_s"]) == (5, 70, 1.0)
    assert (g1["gen_current"], g1["width_current"], g1["utilization_pct"]) == (5, 4, 60)
    assert g1["bus_id"] == "00000000:2A:00.0" and g1["gen_host_max"] == 5
    # The processes and the matrix are asked once, with the first reading.
    assert record["compute_apps"][1] == {"pid": 4243, "process_name": "VLLM::Worker_TP1",
                                         "bus_id": "00000000:2A:00.0", "used_mib": 136582}
    assert record["p2p_read"] == P2P
    assert [c[0] for c in smi.calls].count("topo") == 1


def test_an_older_driver_is_asked_the_deprecated_field_and_the_answer_kept():
    smi = FakeSmi([line(0, 5, 16, 50, fields=OLD), line(0, 5, 16, 50, fields=OLD)], old_driver=True)
    sampler = lib.Sampler("nvidia-smi", runner=smi, clock=ticking())
    assert sampler.sample() and sampler.sample()
    record = sampler.record()
    assert record["query"] == list(OLD)
    assert "gen_gpu_max" not in record["gpus"][0] and record["gpus"][0]["gen_current"] == 5
    queries = [c[0] for c in smi.calls if c[0].startswith("--query-gpu=")]
    assert queries == ["--query-gpu=" + ",".join(NEW)] + ["--query-gpu=" + ",".join(OLD)] * 2


def test_no_nvidia_smi_is_a_reason_not_an_error():
    sampler = lib.Sampler("no-such-nvidia-smi", runner=FakeSmi([], missing=True))
    assert sampler.sample() is False
    record = sampler.record()
    assert (record["read"], record["reason"]) == (False, "no-such-nvidia-smi not found on the host")
    assert record["gpus"] == [] and record["samples"] == 0


def test_a_failure_after_the_first_reading_is_counted_and_the_reading_kept():
    smi = FakeSmi([line(0, 5, 16, 50)])  # then "No devices were found", exit 6
    sampler = lib.Sampler("nvidia-smi", runner=smi, clock=ticking())
    assert sampler.sample() and sampler.sample()
    record = sampler.record()
    assert record["read"] and record["samples"] == 1 and record["failed_samples"] == 1
    assert record["errors"] == ["nvidia-smi --query-gpu=" + ",".join(NEW) + " failed (exit 6): No devices were found"]


def test_missing_processes_or_matrix_are_errors_of_the_record_only():
    smi = FakeSmi([line(0, 5, 16, 50)], apps=None, p2p=None)
    sampler = lib.Sampler("nvidia-smi", runner=smi, clock=ticking())
    assert sampler.sample()
    record = sampler.record()
    assert record["read"] and record["compute_apps"] == [] and record["p2p_read"] is None
    assert [e.split(":")[0] for e in record["errors"]] == ["compute apps not read", "peer-to-peer matrix not read"]


def test_a_process_name_with_commas_keeps_its_bus_id_and_memory():
    rows = lib.parse_rows("7, python3 -c a,b, 00000000:18:00.0, 12\n", lib.APPS_FIELDS, lib.APPS_KEYS)
    assert rows == [{"pid": 7, "process_name": "python3 -c a,b", "bus_id": "00000000:18:00.0", "used_mib": 12}]
    with pytest.raises(lib.FabricError, match="for 4 fields"):
        lib.parse_rows("0, 16\n", NEW[:4], lib.FIELD_KEYS)


def test_the_thread_reads_from_the_first_token_until_stopped():
    smi = FakeSmi([line(0, 5, 16, 50)] * 50)
    sampler = lib.Sampler("nvidia-smi", interval_s=0, runner=smi)
    sampler.start()
    assert smi.calls == []  # nothing before a token: the GPUs may still idle
    sampler.busy()
    sampler.busy()  # every token calls it; only the first counts
    sampler.stop()
    record = sampler.record()
    assert record["read"] and record["samples"] >= 1


def test_requests_that_never_produced_a_token_leave_nothing_read():
    smi = FakeSmi([line(0, 5, 16, 50)])
    sampler = lib.Sampler("nvidia-smi", runner=smi)
    sampler.start()
    sampler.stop()
    record = sampler.record()
    assert smi.calls == [] and record["read"] is False
    assert "no profiled request produced a token" in record["reason"]


def test_not_asked_has_the_record_s_shape():
    assert set(lib.not_asked("off")) == set(lib.Sampler("x").record())
