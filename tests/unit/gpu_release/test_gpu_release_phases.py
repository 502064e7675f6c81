"""The four phases of gpu_release_lib.release, each on its own: discover, classify_holders,
signal_holders, verify (and the summary line release builds from them)."""

import os
import signal

import pytest
from ansible_collections.vllm_ops.serving.plugins.module_utils import gpu_release_lib as lib

from gpu_release_helpers import alive

OWNED = ["^VLLM::"]
NO_SMI = "no-such-nvidia-smi"


def plan_for(devices, **options):
    options.setdefault("owned_patterns", OWNED)
    options.setdefault("nvidia_smi", NO_SMI)
    return lib.discover(devices=[str(d) for d in devices], **options)


def holder(pid, kind, cmdline, state="S", user="root", reason="test"):
    """A classified holder as classify_holders gives it (what verify reads)."""
    return {"pid": pid, "ppid": 1, "user": user, "uid": 0, "comm": cmdline.split()[0][:15],
            "cmdline": cmdline, "unit": None, "state": state, "starttime": 1, "kind": kind,
            "reason": reason}


def outcome_of(found, signalled=(), killed=(), forced=(), would_signal=()):
    return {"found": found, "signalled": list(signalled), "killed": list(killed),
            "forced": list(forced), "would_signal": list(would_signal)}


def root_warning():
    return [] if os.geteuid() == 0 else [
        "not running as root: fuser sees only this user's processes, so holders of other "
        "users are missed (use become: true)"]


# ---------------------------------------------------------------- discover

def test_discover_lists_the_nodes_and_the_tools_it_will_use(tmp_path):
    dev = tmp_path / "dev"
    dev.mkdir()
    for name in ("nvidia1", "nvidia0", "nvidiactl", "nvidia-uvm"):
        (dev / name).write_bytes(b"")
    plan = lib.discover(owned_units=["vllm", " ", "job.scope"], fuser="no-such-fuser",
                        nvidia_smi=NO_SMI, dev_dir=str(dev))
    nodes = [str(dev / "nvidia0"), str(dev / "nvidia1")]
    assert plan["devices"] == nodes and plan["present"] == nodes
    assert [plan["entries"][n]["index"] for n in nodes] == [0, 1]
    assert plan["rules"]["units"] == {"vllm.service", "job.scope"}
    assert (plan["fuser"], plan["nvidia_smi"], plan["memory_before"]) == (None, None, None)
    assert plan["warnings"] == [
        "no-such-fuser not found (psmisc not installed): holders found by reading /proc directly",
        *root_warning(),
        "no-such-nvidia-smi not found on this host: GPU memory not checked, release verified "
        "by fuser alone",
    ]


def test_discover_on_a_host_without_gpus_warns(tmp_path):
    plan = lib.discover(nvidia_smi=NO_SMI, dev_dir=str(tmp_path))
    assert plan["devices"] == [] and plan["entries"] == {}
    assert plan["warnings"][0] == "no %s/nvidiaN device nodes on this host: nothing to release" % tmp_path


def test_discover_keeps_a_missing_node_out_of_the_present_ones(devices, tmp_path):
    missing = tmp_path / "dev" / "nvidia7"
    plan = plan_for([*devices, missing])
    assert plan["present"] == [str(d) for d in devices]
    assert plan["entries"][str(missing)]["exists"] is False
    assert "device %s does not exist: skipped" % missing in plan["warnings"]


def test_discover_maps_nodes_to_gpus_by_minor_number_and_reads_the_memory(tmp_path, fake_nvidia_smi):
    # A container given the host's GPUs 3 and 5: nvidia-smi calls them 0 and 1; GPU 9 is unknown.
    dev = tmp_path / "dev"
    dev.mkdir()
    for name in ("nvidia3", "nvidia5", "nvidia9"):
        (dev / name).write_bytes(b"")
    smi = fake_nvidia_smi([{"index": 0, "minor": 3, "idle_mib": 12},
                           {"index": 1, "minor": 5, "idle_mib": 40960}])
    plan = lib.discover(devices=[str(dev / n) for n in ("nvidia3", "nvidia5", "nvidia9")],
                        nvidia_smi=smi)
    assert [plan["entries"][str(dev / n)]["index"] for n in ("nvidia3", "nvidia5", "nvidia9")] == [0, 1, None]
    assert plan["memory_before"] == {0: 12, 1: 40960}
    assert plan["nvidia_smi"] == smi
    assert ("%s: no GPU with minor number 9 in nvidia-smi: its memory is not checked" % (dev / "nvidia9")
            in plan["warnings"])


def test_discover_refuses_bad_input_before_running_any_tool(devices, tmp_path):
    ran = tmp_path / "nvidia-smi-ran"
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\ntouch %s\n" % ran)
    smi.chmod(0o755)
    with pytest.raises(lib.ReleaseError, match=r"^owned_patterns: invalid regular expression '\('"):
        plan_for(devices, owned_patterns=["("], nvidia_smi=str(smi))
    with pytest.raises(lib.ReleaseError, match=r"^ignored_patterns: invalid regular expression '\['"):
        plan_for(devices, ignored_patterns=["["], nvidia_smi=str(smi))
    # A shared node is named first, even with an invalid pattern too.
    with pytest.raises(lib.ReleaseError, match=r"^device /dev/nvidiactl is a shared control node"):
        lib.discover(devices=["/dev/nvidiactl"], owned_patterns=["("], nvidia_smi=str(smi))
    assert not ran.exists()


# ---------------------------------------------------------------- classify

def test_classify_holders_gives_each_holder_its_kind_and_reason(devices, holders):
    worker = holders.owned(devices[0])
    daemon = holders.owned(devices[0], title="nvidia-persistenced")
    job = holders.foreign(devices[1])
    guarded = holders.owned(devices[1], title="VLLM::Worker_TP1")
    plan = plan_for(devices, ignored_patterns=["^nvidia-persiste"])
    found = lib.classify_holders(plan, protected={guarded.pid})
    kinds = {device: sorted((h["pid"], h["kind"], h["reason"]) for h in hs) for device, hs in found.items()}
    assert kinds == {
        str(devices[0]): sorted([(worker.pid, "owned", "matches owned pattern '^VLLM::'"),
                                 (daemon.pid, "ignored", "matches ignored pattern '^nvidia-persiste'")]),
        str(devices[1]): sorted([(job.pid, "foreign", "matches no owned pattern or unit"),
                                 (guarded.pid, "protected", "this module or one of its ancestors")]),
    }
    assert alive(worker) and alive(job), "classifying signals nothing"


def test_classify_holders_skips_missing_nodes(devices, tmp_path):
    plan = plan_for([devices[0], tmp_path / "dev" / "nvidia7"])
    assert lib.classify_holders(plan, protected=set()) == {str(devices[0]): []}


# ---------------------------------------------------------------- signal

def test_signal_holders_terminates_owned_kills_the_stubborn_and_leaves_foreign(devices, holders):
    polite = holders.owned(devices[0])
    stubborn = holders.owned(devices[0], ignore_term=True)
    job = holders.foreign(devices[1])
    plan = plan_for(devices)
    outcome = lib.signal_holders(plan, protected=set(), term_timeout_s=1)
    assert polite.wait() == -signal.SIGTERM and stubborn.wait() == -signal.SIGKILL
    assert alive(job)
    assert sorted(outcome["signalled"]) == sorted([polite.pid, stubborn.pid])
    assert outcome["killed"] == [stubborn.pid]
    assert (outcome["forced"], outcome["would_signal"]) == ([], [])
    # the last classification: what is still there
    assert {d: [h["pid"] for h in hs] for d, hs in outcome["found"].items()} == {
        str(devices[0]): [], str(devices[1]): [job.pid]}
    first = plan["entries"][str(devices[0])]
    assert sorted(h["pid"] for h in first["holders"]) == sorted([polite.pid, stubborn.pid])
    assert first["signalled"] == sorted([polite.pid, stubborn.pid]) and first["killed"] == [stubborn.pid]
    second = plan["entries"][str(devices[1])]
    assert ([h["pid"] for h in second["holders"]], second["signalled"]) == ([job.pid], [])


def test_signal_holders_forced_signals_foreign_holders_and_records_them(devices, holders):
    job = holders.foreign(devices[1])
    outcome = lib.signal_holders(plan_for(devices), protected=set(), force_foreign=True)
    assert job.wait() == -signal.SIGTERM
    assert outcome["signalled"] == [job.pid] and outcome["forced"] == [job.pid]


def test_signal_holders_in_check_mode_only_says_what_it_would_signal(devices, holders):
    worker = holders.owned(devices[0], ignore_term=True)
    job = holders.foreign(devices[1])
    plan = plan_for(devices)
    outcome = lib.signal_holders(plan, protected=set(), check_mode=True)
    assert alive(worker) and alive(job)
    assert (outcome["signalled"], outcome["killed"], outcome["would_signal"]) == ([], [], [worker.pid])
    assert plan["entries"][str(devices[0])]["would_signal"] == [worker.pid]
    assert plan["entries"][str(devices[1])]["would_signal"] == []


# ---------------------------------------------------------------- verify

def test_verify_names_a_foreign_holder_left_alive(devices):
    plan = plan_for(devices)
    found = {str(devices[0]): [], str(devices[1]): [holder(4242, "foreign", "sleep 600", user="bob")]}
    checked = lib.verify(plan, outcome_of(found))
    assert checked["problems"] == [
        "1 holder(s) not owned by the service left alive (set gpu_release_force_foreign: true to "
        "signal them): PID 4242 (command 'sleep 600', user bob) holds %s" % devices[1]]
    [left] = checked["foreign"]
    assert (left["pid"], left["devices"]) == (4242, [str(devices[1])])
    assert (checked["memory_after"], checked["apps_after"], checked["warnings"]) == (None, None, [])


def test_verify_names_an_owned_survivor_except_in_check_mode(devices):
    plan = plan_for(devices)
    found = {str(devices[0]): [holder(77, "owned", "VLLM::Worker_TP0", state="D")], str(devices[1]): []}
    checked = lib.verify(plan, outcome_of(found, signalled=[77], killed=[77]), kill_timeout_s=30)
    assert checked["problems"] == [
        "still holding the GPUs after SIGTERM, SIGKILL and 30 s: PID 77 (command 'VLLM::Worker_TP0', "
        "user root), state D, holds %s" % devices[0]]
    assert lib.verify(plan, outcome_of(found, would_signal=[77]), check_mode=True)["problems"] == []


def test_verify_leaves_protected_holders_alive_even_when_forced(devices):
    plan = plan_for(devices)
    found = {str(devices[0]): [holder(5, "protected", "ansible", reason="this module or one of its ancestors")],
             str(devices[1]): [holder(6, "ignored", "nvidia-persistenced")]}
    checked = lib.verify(plan, outcome_of(found, forced=[9]), force_foreign=True)
    assert checked["problems"] == [
        "1 holder(s) not owned by the service left alive (set gpu_release_force_foreign: true to "
        "signal them): PID 5 (command 'ansible', user root) holds %s [this module or one of its "
        "ancestors]" % devices[0]]
    assert [i["pid"] for i in checked["ignored"]] == [6]
    assert checked["warnings"] == ["gpu_release_force_foreign is true: signalled foreign holders 9"]


def test_verify_fails_on_memory_the_driver_keeps(devices, fake_nvidia_smi):
    smi = fake_nvidia_smi([{"index": 0, "idle_mib": 5000}, {"index": 1, "idle_mib": 0}])
    plan = plan_for(devices, nvidia_smi=smi)
    checked = lib.verify(plan, outcome_of({str(d): [] for d in devices}), settle_timeout_s=0)
    assert checked["memory_after"] == {0: 5000, 1: 0}
    assert checked["problems"] == [
        "GPU memory above 1024 MiB after waiting up to 0 s: GPU 0 5000 MiB; compute apps: none listed"]


def test_verify_in_check_mode_warns_of_memory_with_nothing_to_signal(devices, fake_nvidia_smi):
    smi = fake_nvidia_smi([{"index": 0, "idle_mib": 0}, {"index": 1, "idle_mib": 2048}])
    plan = plan_for(devices, nvidia_smi=smi)
    checked = lib.verify(plan, outcome_of({str(d): [] for d in devices}), check_mode=True)
    assert checked["problems"] == [] and checked["memory_after"] is None
    assert checked["warnings"] == ["check mode: GPU(s) 1 above 1024 MiB now with nothing to signal"]


# ---------------------------------------------------------------- the summary line

def test_summarize_says_what_was_or_would_be_signalled():
    done = outcome_of({}, signalled=[12, 30], killed=[30])
    assert lib.summarize(done, {0: 3, 1: 0}, False, 1.34) == (
        "signalled PID(s) 12, 30 (SIGKILL for 30) in 1.3 s; GPU memory after (MiB): 0: 3, 1: 0")
    assert lib.summarize(outcome_of({}, signalled=[12]), None, False, 0.5) == (
        "signalled PID(s) 12 (SIGKILL for none) in 0.5 s")
    assert lib.summarize(outcome_of({}, would_signal=[12]), None, True, 0) == "would signal PID(s) 12"
    assert lib.summarize(outcome_of({}), None, False, 0) == "nothing to release"
