"""The nvidia-smi stand-in reports simulated GPUs as the real tool formats them."""

import re
import subprocess
import sys

import pytest

from vllm_ops.fabric import parse_p2p  # the controller's reader, run on the stand-in's output

from standin_support import H200_MIB, WAIT_S, alive, wait_for

UUID = r"GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"


@pytest.fixture
def holder(sandbox):
    """Start a process holding some device files open, optionally with a claim."""
    procs = []

    def start(*indexes, claim_mib=None):
        paths = [str(sandbox.dev / f"nvidia{i}") for i in indexes]
        code = ("import os, sys, time\n"
                "fds = [os.open(p, os.O_RDWR) for p in sys.argv[1:]]\n"
                "print('ready', flush=True)\n"
                "time.sleep(600)\n")
        proc = subprocess.Popen([sys.executable, "-c", code, *paths], stdout=subprocess.PIPE,
                                text=True)
        procs.append(proc)
        assert proc.stdout.readline().strip() == "ready"
        if claim_mib is not None:
            (sandbox.claims / str(proc.pid)).write_text(f"{claim_mib}\n")
        return proc

    yield start
    for proc in procs:
        proc.kill()
        proc.wait(timeout=WAIT_S)


def test_list_gpus_numeric_device_files_only(sandbox):
    result = sandbox.smi("-L")
    assert result.returncode == 0
    lines = result.stdout.splitlines()
    assert len(lines) == 8  # nvidiactl is not a GPU
    for index, line in enumerate(lines):
        assert re.fullmatch(rf"GPU {index}: NVIDIA H200 \(UUID: {UUID}\)", line)
    assert len({line.split("UUID: ")[1] for line in lines}) == 8
    assert sandbox.smi("-L").stdout == result.stdout  # stable across calls


def test_query_gpu_csv_header_units_and_idle_memory(sandbox):
    result = sandbox.smi("--query-gpu=index,name,uuid,memory.used,memory.total,memory.free",
                         "--format=csv")
    lines = result.stdout.splitlines()
    assert lines[0] == ("index, name, uuid, memory.used [MiB], memory.total [MiB], "
                        "memory.free [MiB]")
    assert re.fullmatch(rf"0, NVIDIA H200, {UUID}, 0 MiB, {H200_MIB} MiB, {H200_MIB} MiB",
                        lines[1])
    assert len(lines) == 9


def test_memory_used_sums_live_holders_claims(sandbox, holder):
    holder(1, claim_mib=1000)
    holder(1, claim_mib=2000)
    holder(2)  # no claim file: counted as 256 MiB
    (sandbox.claims / "999999999").write_text("5000")  # stale claim, no such holder
    result = sandbox.smi("--query-gpu=memory.free,index,memory.used",
                         "--format=csv,noheader,nounits")
    rows = [line.split(", ") for line in result.stdout.splitlines()]
    used = {int(index): int(mem) for _, index, mem in rows}
    assert used == {0: 0, 1: 3000, 2: 256, 3: 0, 4: 0, 5: 0, 6: 0, 7: 0}
    assert rows[1] == [str(H200_MIB - 3000), "1", "3000"]


def test_index_filter_and_nounits_header(sandbox, holder):
    holder(3, claim_mib=42)
    result = sandbox.smi("-i", "3", "--query-gpu=index,memory.used", "--format=csv,nounits")
    assert result.stdout.splitlines() == ["index, memory.used [MiB]", "3, 42"]
    assert sandbox.smi("-i", "9", "-L").returncode == 6


def test_compute_apps_lists_each_holder_per_gpu(sandbox, holder):
    one = holder(0, claim_mib=136582)
    two = holder(4, 5)
    result = sandbox.smi("--query-compute-apps=pid,process_name,used_memory,gpu_uuid,gpu_bus_id",
                         "--format=csv")
    lines = result.stdout.splitlines()
    assert lines[0] == "pid, process_name, used_gpu_memory [MiB], gpu_uuid, gpu_bus_id"
    rows = [line.split(", ") for line in lines[1:]]
    assert [(int(r[0]), r[2]) for r in rows] == [(one.pid, "136582 MiB"),
                                                 (two.pid, "256 MiB"), (two.pid, "256 MiB")]
    assert all(r[1] == sys.executable for r in rows)  # argv[0], as the real tool shows
    assert all(re.fullmatch(r"00000000:[0-9A-F]{2}:00\.0", r[4]) for r in rows)
    uuids = [re.search(r"UUID: (GPU-[^)]+)", line)[1]
             for line in sandbox.smi("-L").stdout.splitlines()]
    assert [r[3] for r in rows] == [uuids[0], uuids[4], uuids[5]]
    alias = sandbox.smi("--query-compute-apps=used_gpu_memory,pid", "--format=csv,noheader")
    assert alias.stdout.splitlines()[0] == f"136582 MiB, {one.pid}"


def test_compute_apps_with_nothing_running_prints_only_the_header(sandbox):
    result = sandbox.smi("--query-compute-apps=pid,used_memory", "--format=csv")
    assert (result.returncode, result.stdout) == (0, "pid, used_gpu_memory [MiB]\n")
    assert sandbox.smi("--query-compute-apps=pid", "--format=csv,noheader").stdout == ""


@pytest.mark.parametrize("query", ["--query-gpu=index,foo", "--query-compute-apps=pid,foo"])
def test_unknown_field_exits_2(sandbox, query):
    result = sandbox.smi(query, "--format=csv")
    assert result.returncode == 2
    assert 'Field "foo" is not a valid field to query.' in result.stdout


def test_bad_format_and_arguments_exit_2(sandbox):
    assert sandbox.smi("--query-gpu=index").returncode == 2
    assert sandbox.smi("--query-gpu=index", "--format=json").returncode == 2
    assert sandbox.smi("--bogus").returncode == 2


def test_no_gpus_exits_6(sandbox):
    for device in sandbox.dev.glob("nvidia*"):
        device.unlink()
    result = sandbox.smi("-L")
    assert (result.returncode, result.stdout.strip()) == (6, "No devices were found")


def test_summary_table_shows_memory_and_processes(sandbox, holder):
    proc = holder(6, claim_mib=777)
    result = sandbox.smi()
    assert result.returncode == 0
    assert "Driver Version:" in result.stdout
    assert re.search(rf"\|\s+777MiB / {H200_MIB}MiB \|", result.stdout)
    assert re.search(rf"\|\s+6\s+N/A\s+N/A\s+{proc.pid}\s+C\s+.*777MiB \|", result.stdout)
    widths = {len(line) for line in result.stdout.splitlines()[1:] if line.startswith(("|", "+"))}
    assert widths == {91}


def test_vllm_workers_show_up_and_release_their_memory(server, sandbox):
    server.start(tp=2)
    server.wait_ready()
    _, workers = server.tree()
    used = sandbox.smi("--query-gpu=index,memory.used", "--format=csv,noheader,nounits")
    claim = int(0.95 * H200_MIB)
    assert used.stdout.splitlines()[:3] == [f"0, {claim}", f"1, {claim}", "2, 0"]
    apps = sandbox.smi("--query-compute-apps=pid,process_name,used_memory",
                       "--format=csv,noheader")
    assert apps.stdout.splitlines() == [f"{workers[0]}, VLLM::Worker_TP0, {claim} MiB",
                                        f"{workers[1]}, VLLM::Worker_TP1, {claim} MiB"]
    server.proc.terminate()
    assert server.wait_exit() == 0
    wait_for(lambda: not any(alive(pid) for pid in workers), what="workers gone")
    after = sandbox.smi("--query-compute-apps=pid", "--format=csv,noheader")
    assert after.stdout == ""


LINK_QUERY = ("--query-gpu=index,pcie.link.gen.gpucurrent,pcie.link.gen.current,pcie.link.gen.max,"
              "pcie.link.gen.gpumax,pcie.link.gen.hostmax,pcie.link.width.current,pcie.link.width.max,"
              "utilization.gpu")


def links(sandbox):
    """{index: (gen current, deprecated gen current, gen max, gpumax, hostmax, width, width max, util)}."""
    result = sandbox.smi(LINK_QUERY, "--format=csv,noheader,nounits")
    assert result.returncode == 0, result.stdout
    rows = [tuple(int(v) for v in line.split(", ")) for line in result.stdout.splitlines()]
    return {row[0]: row[1:] for row in rows}


def test_links_are_gen5_x16_and_drop_to_gen1_while_idle(sandbox, holder):
    holder(1)
    got = links(sandbox)
    assert got[1] == (5, 5, 5, 5, 5, 16, 16, 45)  # held: the link at its maximum, the GPU busy
    assert got[0] == (1, 1, 5, 5, 5, 16, 16, 0)  # idle: Gen1, as a real GPU lowers its speed
    header = sandbox.smi("-i", "0", "--query-gpu=pcie.link.width.current,utilization.gpu", "--format=csv")
    assert header.stdout.splitlines() == ["pcie.link.width.current, utilization.gpu [%]", "16, 0 %"]


def test_the_fault_switch_trains_chosen_links_lower(sandbox, holder):
    for index in range(4):
        holder(index)
    sandbox.set_fault("pcie-link-degraded", "1, 2:gen1 3:x8:gen3\n")
    got = links(sandbox)
    assert got[0][0] == 5 and got[0][5] == 16  # untouched
    assert (got[1][0], got[1][5], got[1][6]) == (5, 4, 16)  # an index alone: x4 at its generation
    assert (got[2][0], got[2][5]) == (1, 16)  # the generation only, even under load
    assert (got[3][0], got[3][5]) == (3, 8)
    assert all(row[2] == 5 and row[6] == 16 for row in got.values())  # the maxima stay
    sandbox.set_fault("pcie-link-degraded", "")
    assert {index: row[5] for index, row in links(sandbox).items()} == {i: 4 for i in range(8)}


def test_p2p_matrix_and_its_fault_switch(sandbox):
    result = sandbox.smi("topo", "-p2p", "r")
    assert result.returncode == 0
    lines = result.stdout.splitlines()
    assert lines[0] == "\t" + "\t".join(f"GPU{i}" for i in range(8))
    assert lines[1] == " GPU0\tX\t" + "\t".join(["OK"] * 7)
    assert "  CNS  = Chipset not supported" in lines
    matrix = parse_p2p(result.stdout)
    assert matrix["gpus"] == list(range(8)) and set(matrix["pairs"].values()) == {"OK"}
    assert len(matrix["pairs"]) == 28
    sandbox.set_fault("p2p-read-unsupported", "0-2")
    pairs = parse_p2p(sandbox.smi("topo", "-p2p", "r").stdout)["pairs"]
    assert {p for p, status in pairs.items() if status != "OK"} == {"0-2"} and pairs["0-2"] == "CNS"
    assert set(parse_p2p(sandbox.smi("topo", "-p2p", "w").stdout)["pairs"].values()) == {"OK"}  # read only
    assert set(parse_p2p(sandbox.smi("topo", "-p2p", "n").stdout)["pairs"].values()) == {"NS"}  # no NVLink on PIX
    assert sandbox.smi("topo", "-p2p", "q").returncode == 2
