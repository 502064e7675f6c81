"""gpu_release_lib.release with real processes holding simulated device files."""

import os
import signal
import subprocess
import sys

import pytest
from ansible_collections.vllm_ops.serving.plugins.module_utils import gpu_release_lib as lib

from gpu_release_helpers import alive

OWNED = ["^VLLM::", "vllm serve", r"vllm\.entrypoints"]


def run(devices, **options):
    options.setdefault("owned_patterns", OWNED)
    options.setdefault("term_timeout_s", 1)
    options.setdefault("kill_timeout_s", 30)
    options.setdefault("settle_timeout_s", 0)
    options.setdefault("nvidia_smi", "no-such-nvidia-smi")
    return lib.release(devices=[str(d) for d in devices], **options)


def test_nothing_to_release_is_ok_and_unchanged(devices):
    result, error = run(devices)
    assert error is None
    assert result["changed"] is False
    assert result["signalled"] == [] and result["msg"].startswith("nothing to release")
    assert all(entry["holders"] == [] for entry in result["devices"].values())


def test_owned_holder_gets_sigterm_and_is_gone(devices, holders):
    worker = holders.owned(devices[0])
    result, error = run(devices)
    assert error is None
    assert not alive(worker) and worker.wait() == -signal.SIGTERM
    assert result["changed"] is True
    assert result["signalled"] == [worker.pid] and result["killed"] == []
    entry = result["devices"][str(devices[0])]
    assert entry["index"] == 0 and entry["signalled"] == [worker.pid]
    [holder] = entry["holders"]
    assert (holder["pid"], holder["kind"], holder["user"]) == (worker.pid, "owned", "root")
    assert holder["cmdline"].startswith("VLLM::Worker_TP0 -c")


def test_holder_ignoring_sigterm_is_killed_after_the_timeout(devices, holders):
    stubborn = holders.owned(devices[0], ignore_term=True)
    polite = holders.owned(devices[1])
    result, error = run(devices)
    assert error is None
    assert stubborn.wait() == -signal.SIGKILL and polite.wait() == -signal.SIGTERM
    assert result["signalled"] == sorted([stubborn.pid, polite.pid])
    assert result["killed"] == [stubborn.pid]
    assert result["devices"][str(devices[0])]["killed"] == [stubborn.pid]
    assert result["devices"][str(devices[1])]["killed"] == []


def test_one_process_holding_several_devices_is_signalled_once(devices, holders):
    worker = holders.owned(*devices)
    result, error = run(devices)
    assert error is None and worker.wait() == -signal.SIGTERM
    assert result["signalled"] == [worker.pid]
    for device in devices:
        assert result["devices"][str(device)]["signalled"] == [worker.pid]


def test_zombies_count_as_gone(devices, holders):
    # The test process does not reap its child until the end, so after SIGTERM the worker is
    # a zombie: the release must not wait for it or SIGKILL it.
    worker = holders.owned(devices[0])
    result, error = run(devices, term_timeout_s=300)
    assert error is None
    assert result["killed"] == []
    with open("/proc/%d/stat" % worker.pid) as handle:
        assert handle.read().rsplit(")", 1)[1].split()[0] == "Z"


def test_foreign_holder_is_left_alive_and_named_after_the_owned_ones_are_released(
        devices, holders):
    worker = holders.owned(devices[0])
    job = holders.foreign(devices[1])
    result, error = run(devices)
    assert not alive(worker) and alive(job)
    assert result["signalled"] == [worker.pid] and result["changed"] is True
    assert "PID %d (command 'sleep 600', user root) holds %s" % (job.pid, devices[1]) in error
    assert "gpu_release_force_foreign" in error
    [foreign] = result["foreign"]
    assert (foreign["pid"], foreign["comm"], foreign["devices"]) == (job.pid, "sleep",
                                                                    [str(devices[1])])


def test_force_foreign_signals_foreign_holders_and_says_so(devices, holders):
    job = holders.foreign(devices[1])
    result, error = run(devices, force_foreign=True)
    assert error is None
    assert job.wait() == -signal.SIGTERM
    assert result["forced_foreign"] == [job.pid] and result["foreign"] == []
    assert any("force_foreign" in w and str(job.pid) in w for w in result["warnings"])


def test_check_mode_lists_what_would_be_signalled_and_signals_nothing(devices, holders):
    worker = holders.owned(devices[0], ignore_term=True)
    job = holders.foreign(devices[1])
    result, error = run(devices, check_mode=True)
    assert alive(worker) and alive(job)
    assert result["changed"] is True
    assert result["would_signal"] == [worker.pid] and result["signalled"] == []
    assert result["devices"][str(devices[0])]["would_signal"] == [worker.pid]
    assert "would signal PID(s) %d" % worker.pid == result["msg"]
    # a real run would fail on the foreign holder, so check mode says so too
    assert "PID %d" % job.pid in error


def test_check_mode_with_force_foreign_would_signal_it(devices, holders):
    job = holders.foreign(devices[0])
    result, error = run(devices, check_mode=True, force_foreign=True)
    assert error is None and alive(job)
    assert result["would_signal"] == [job.pid]


def test_owned_unit_makes_any_process_owned(devices, holders, monkeypatch):
    job = holders.foreign(devices[0])
    real_read = lib.read_process

    def in_unit(pid, proc_root="/proc"):
        info = real_read(pid, proc_root)
        if info is not None and pid == job.pid:
            info["unit"] = "vllm-kimi-k25-int4.service"
        return info

    monkeypatch.setattr(lib, "read_process", in_unit)
    result, error = run(devices, owned_units=["vllm-kimi-k25-int4"])
    assert error is None and job.wait() == -signal.SIGTERM
    assert result["devices"][str(devices[0])]["holders"][0]["reason"] == (
        "in owned unit vllm-kimi-k25-int4.service")


def test_ignored_daemons_are_listed_never_signalled_and_do_not_fail(devices, holders):
    daemon = holders.owned(devices[0], title="nvidia-persistenced")
    result, error = run(devices, ignored_patterns=["^nvidia-persiste"], force_foreign=True)
    assert error is None and alive(daemon)
    assert result["changed"] is False
    assert [i["pid"] for i in result["ignored"]] == [daemon.pid]


def test_the_module_and_its_ancestors_are_never_signalled(devices):
    # This test process holds the file and matches the owned pattern: it must survive.
    with open(str(devices[0]), "rb"):
        result, error = run(devices, owned_patterns=[".*"], force_foreign=True)
    assert result["signalled"] == []
    assert "PID %d" % os.getpid() in error and "ancestors" in error


def test_missing_device_is_a_warning(devices, tmp_path):
    result, error = run([*devices, tmp_path / "dev" / "nvidia5"])
    assert error is None
    assert result["devices"][str(tmp_path / "dev" / "nvidia5")]["exists"] is False
    assert any("nvidia5 does not exist" in w for w in result["warnings"])


def test_shared_nodes_are_refused_before_anything_is_signalled(devices, holders):
    worker = holders.owned(devices[0])
    with pytest.raises(lib.ReleaseError, match="nvidiactl is a shared control node"):
        run([*devices, "/dev/nvidiactl"])
    assert alive(worker)


def test_default_devices_are_discovered(tmp_path, holders):
    (tmp_path / "nvidia0").write_bytes(b"")
    (tmp_path / "nvidiactl").write_bytes(b"")
    worker = holders.owned(tmp_path / "nvidia0", tmp_path / "nvidiactl")
    result, error = lib.release(owned_patterns=OWNED, dev_dir=str(tmp_path),
                                nvidia_smi="no-such-nvidia-smi", term_timeout_s=1)
    assert error is None and not alive(worker)
    assert list(result["devices"]) == [str(tmp_path / "nvidia0")]


def test_without_nvidia_smi_it_warns_and_relies_on_fuser(devices):
    result, error = run(devices, nvidia_smi="no-such-nvidia-smi")
    assert error is None
    assert result["memory_before"] is None and result["memory_after"] is None
    assert any("no-such-nvidia-smi not found" in w and "fuser alone" in w
               for w in result["warnings"])


def test_memory_is_verified_after_the_release(devices, holders, fake_nvidia_smi):
    worker = holders.owned(devices[0], ignore_term=True)
    smi = fake_nvidia_smi([
        {"index": 0, "idle_mib": 2, "busy_mib": 97000, "busy_while_pid": worker.pid},
        {"index": 1, "idle_mib": 0},
    ])
    result, error = run(devices, nvidia_smi=smi, settle_timeout_s=60)
    assert error is None
    assert result["memory_before"] == [{"index": 0, "used_mib": 97000},
                                       {"index": 1, "used_mib": 0}]
    assert result["memory_after"] == [{"index": 0, "used_mib": 2}, {"index": 1, "used_mib": 0}]
    assert result["nvidia_smi"] == smi and "GPU memory after (MiB): 0: 2, 1: 0" in result["msg"]


def test_memory_still_used_fails_with_per_gpu_figures(devices, fake_nvidia_smi):
    # Nothing holds the files, yet the driver reports memory (a holder fuser cannot see).
    smi = fake_nvidia_smi([{"index": 0, "idle_mib": 3}, {"index": 1, "idle_mib": 40960}])
    result, error = run(devices, nvidia_smi=smi, memory_threshold_mib=1024)
    assert "GPU memory above 1024 MiB after waiting up to 0 s: GPU 1 40960 MiB" in error
    assert result["changed"] is False
    assert result["memory_after"][1] == {"index": 1, "used_mib": 40960}


def test_nvidia_smi_failing_after_the_release_fails_the_run(devices, fake_nvidia_smi):
    smi = fake_nvidia_smi([], fail=True)
    result, error = run(devices, nvidia_smi=smi)
    assert "cannot verify GPU memory" in error and "rc 9" in error
    assert any("memory before release unknown" in w for w in result["warnings"])


def test_a_gpu_held_only_by_a_foreign_process_is_not_waited_for(devices, holders,
                                                               fake_nvidia_smi):
    job = holders.foreign(devices[1])
    smi = fake_nvidia_smi([
        {"index": 0, "idle_mib": 0},
        {"index": 1, "idle_mib": 0, "busy_mib": 2048, "busy_while_pid": job.pid},
    ])
    # A wait on GPU 1 would last the whole hour; the run fails on the foreign holder at once.
    _result, error = run(devices, nvidia_smi=smi, settle_timeout_s=3600)
    assert alive(job)
    assert "PID %d" % job.pid in error and "GPU memory after (MiB): 0: 0, 1: 2048" in error


def test_released_gpus_shared_with_a_foreign_process_wait_only_for_the_driver(
        devices, holders, fake_nvidia_smi):
    # Seen on real GPUs: every CUDA process opens every /dev/nvidiaN, so the owned worker and
    # the foreign job both hold both nodes. GPU 1 keeps the foreign job's memory; the wait
    # must end once the released PID is gone from the driver, not run out the settle timeout.
    owned = holders.owned(devices[0], devices[1], ignore_term=True)
    job = holders.foreign(devices[1])
    smi = fake_nvidia_smi([
        {"index": 0, "idle_mib": 0, "busy_mib": 41579, "busy_while_pid": owned.pid},
        {"index": 1, "idle_mib": 0, "busy_mib": 1643, "busy_while_pid": job.pid},
    ])
    result, error = run(devices, nvidia_smi=smi, term_timeout_s=1, settle_timeout_s=3600)
    assert result["killed"] == [owned.pid]
    assert alive(job)
    assert result["memory_after"] == [{"index": 0, "used_mib": 0}, {"index": 1, "used_mib": 1643}]
    assert "PID %d" % job.pid in error
    assert "GPU memory above" not in error


def test_fuser_errors_are_reported(tmp_path):
    script = tmp_path / "fuser"
    script.write_text("#!/bin/sh\necho 'fuser: broken' >&2\nexit 3\n")
    script.chmod(0o755)
    (tmp_path / "nvidia0").write_bytes(b"")
    with pytest.raises(lib.ReleaseError, match=r"rc 3\): fuser: broken"):
        lib.release(devices=[str(tmp_path / "nvidia0")], fuser=str(script),
                    nvidia_smi="no-such-nvidia-smi")


def test_send_signal_skips_a_reused_pid():
    proc = subprocess.Popen(["sleep", "600"])
    try:
        start = lib.read_process(proc.pid)["starttime"]
        assert lib.send_signal(proc.pid, start + 1, signal.SIGKILL) is False
        assert proc.poll() is None
        assert lib.send_signal(proc.pid, start, signal.SIGKILL) is True
        assert proc.wait() == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_proc_scan_finds_open_and_mapped_holders_like_fuser(devices, holders):
    worker = holders.owned(devices[0])
    code = ("import mmap, sys; f = open(sys.argv[1], 'r+b'); f.write(b'x' * 4096); f.flush(); "
            "m = mmap.mmap(f.fileno(), 4096); f.close(); print('ready', flush=True); "
            "sys.stdin.read()")
    mapper = subprocess.Popen(["python3-mapper", "-c", code, str(devices[1])],
                              executable=sys.executable, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, universal_newlines=True)
    try:
        assert mapper.stdout.readline().strip() == "ready"
        for device, pid in ((devices[0], worker.pid), (devices[1], mapper.pid)):
            assert lib.proc_pids(str(device)) == lib.fuser_pids("fuser", str(device)) == [pid]
    finally:
        mapper.kill()
        mapper.wait()
        mapper.stdout.close()
        mapper.stdin.close()


def test_without_fuser_it_warns_and_reads_proc(devices, holders):
    worker = holders.owned(devices[0])
    result, error = run(devices, fuser="no-such-fuser")
    assert error is None and not alive(worker)
    assert result["signalled"] == [worker.pid] and result["holder_finder"] == "/proc"
    assert any("no-such-fuser not found" in w for w in result["warnings"])


def test_gpu_index_follows_the_minor_number_when_nvidia_smi_knows_it(tmp_path, holders,
                                                                    fake_nvidia_smi):
    # A container given the host's GPU 3: the node is /dev/nvidia3, nvidia-smi calls it GPU 0.
    device = tmp_path / "nvidia3"
    device.write_bytes(b"")
    worker = holders.owned(device, ignore_term=True)
    smi = fake_nvidia_smi([{"index": 0, "minor": 3, "idle_mib": 1, "busy_mib": 97000,
                            "busy_while_pid": worker.pid}])
    result, error = run([device], nvidia_smi=smi, settle_timeout_s=60)
    assert error is None
    assert result["devices"][str(device)]["index"] == 0
    assert result["memory_after"] == [{"index": 0, "used_mib": 1}]


def test_a_node_nvidia_smi_does_not_list_is_not_memory_checked(tmp_path, fake_nvidia_smi):
    device = tmp_path / "nvidia5"
    device.write_bytes(b"")
    smi = fake_nvidia_smi([{"index": 0, "minor": 3, "idle_mib": 50000}])
    result, error = run([device], nvidia_smi=smi)
    assert error is None
    assert result["devices"][str(device)]["index"] is None
    assert any("no GPU with minor number 5" in w for w in result["warnings"])
