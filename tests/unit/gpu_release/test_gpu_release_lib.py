"""gpu_release_lib: the pure parts (names, /proc texts, classification, nvidia-smi output)."""

import re

import pytest
from ansible_collections.vllm_ops.serving.plugins.module_utils import gpu_release_lib as lib

import gpu_release_helpers  # noqa: F401  (puts the role's module_utils on sys.path)


@pytest.mark.parametrize(
    "path, index",
    [("/dev/nvidia0", 0), ("/dev/nvidia7", 7), ("/dev/nvidia12", 12), ("/tmp/x/nvidia3", 3),
     ("/dev/nvidiactl", None), ("/dev/nvidia-uvm", None), ("/dev/nvidia0x", None)],
)
def test_device_index_is_the_number_in_nvidiaN(path, index):
    assert lib.device_index(path) == index


def test_discover_lists_per_gpu_nodes_in_index_order_and_nothing_shared(tmp_path):
    for name in ("nvidia10", "nvidia2", "nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm",
                 "nvidia-uvm-tools", "nvidia-modeset", "nvidia-caps", "null"):
        (tmp_path / name).write_bytes(b"")
    assert lib.discover_devices(str(tmp_path)) == [
        str(tmp_path / n) for n in ("nvidia0", "nvidia1", "nvidia2", "nvidia10")]


def test_discover_on_a_host_without_gpus_is_empty(tmp_path):
    assert lib.discover_devices(str(tmp_path / "missing")) == []
    assert lib.discover_devices(str(tmp_path)) == []


@pytest.mark.parametrize("path", ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools",
                                  "/dev/nvidia-modeset", "/dev/nvidia-nvswitchctl"])
def test_shared_control_nodes_are_refused(path):
    [error] = lib.validate_devices(["/dev/nvidia0", path])
    assert path in error and "shared control node" in error


def test_relative_device_paths_are_refused():
    assert lib.validate_devices(["nvidia0"]) == [
        "device 'nvidia0' is not an absolute path to a device node"]


def test_invalid_pattern_names_the_option_and_the_pattern():
    with pytest.raises(lib.ReleaseError, match=r"owned_patterns: invalid regular expression '\('"):
        lib.compile_patterns(["^VLLM::", "("], "owned_patterns")


@pytest.mark.parametrize("name, unit", [("vllm-kimi-k25-int4", "vllm-kimi-k25-int4.service"),
                                        ("vllm.service", "vllm.service"),
                                        ("session-3.scope", "session-3.scope"),
                                        (" vllm ", "vllm.service")])
def test_unit_names_get_the_service_suffix(name, unit):
    assert lib.normalize_unit(name) == unit


def test_parse_stat_survives_parentheses_and_spaces_in_the_command():
    fields = " ".join(str(n) for n in range(4, 53))  # ppid=4 ... starttime is field 22
    state, ppid, start = lib.parse_stat("42 (evil) (name ) R %s" % fields)
    assert (state, ppid, start) == ("R", 4, 22)


@pytest.mark.parametrize(
    "text, unit",
    [
        ("0::/system.slice/vllm-kimi-k25-int4.service\n", "vllm-kimi-k25-int4.service"),
        # cgroup v1 / hybrid: the name=systemd hierarchy says it, cpu does not count
        ("4:memory:/system.slice/other.service\n1:name=systemd:/system.slice/vllm.service\n0::/\n",
         "vllm.service"),
        ("0::/system.slice/vllm.service/payload\n", "vllm.service"),
        ("0::/user.slice/user-1000.slice/user@1000.service/app.slice/job.service\n", "job.service"),
        ("0::/user.slice/user-0.slice/session-4.scope\n", "session-4.scope"),
        ("0::/\n", None),
        ("", None),
    ],
)
def test_unit_from_cgroup(text, unit):
    assert lib.unit_from_cgroup(text) == unit


def _fake_proc(tmp_path, pid, comm, cmdline, uid, cgroup, state="S"):
    base = tmp_path / str(pid)
    base.mkdir(parents=True)
    rest = " ".join(["7"] + ["0"] * 17 + ["123456"] + ["0"] * 30)
    (base / "stat").write_text("%d (%s) %s %s\n" % (pid, comm, state, rest))
    (base / "comm").write_text(comm + "\n")
    (base / "cmdline").write_bytes(b"\0".join(a.encode() for a in cmdline) + b"\0")
    (base / "status").write_text("Name:\t%s\nUid:\t%d\t%d\t%d\t%d\n" % (comm, uid, uid, uid, uid))
    (base / "cgroup").write_text(cgroup)


def test_read_process_gives_command_user_and_unit(tmp_path):
    _fake_proc(tmp_path, 4242, "VLLM::Worker_TP", ["VLLM::Worker_TP0"], 0,
               "0::/system.slice/vllm-kimi-k25-int4.service\n")
    info = lib.read_process(4242, str(tmp_path))
    assert info["comm"] == "VLLM::Worker_TP"
    assert info["cmdline"] == "VLLM::Worker_TP0"
    assert (info["uid"], info["user"]) == (0, "root")
    assert info["unit"] == "vllm-kimi-k25-int4.service"
    assert (info["ppid"], info["starttime"], info["state"]) == (7, 123456, "S")


def test_unknown_uid_is_shown_as_a_number(tmp_path):
    _fake_proc(tmp_path, 77, "job", ["job"], 54321, "0::/\n")
    assert lib.read_process(77, str(tmp_path))["user"] == "54321"


def test_zombies_missing_and_reused_pids_count_as_gone(tmp_path):
    _fake_proc(tmp_path, 10, "worker", ["worker"], 0, "", state="Z")
    _fake_proc(tmp_path, 11, "worker", ["worker"], 0, "")
    assert lib.is_gone(10, None, str(tmp_path))
    assert lib.is_gone(12, None, str(tmp_path))
    assert lib.is_gone(11, 999, str(tmp_path))  # started at another time: another process
    assert not lib.is_gone(11, 123456, str(tmp_path))
    assert lib.read_process(12, str(tmp_path)) is None


def _info(pid=100, comm="python3", cmdline="", unit=None):
    return {"pid": pid, "comm": comm, "cmdline": cmdline, "unit": unit}


OWNED_RES = [re.compile(p) for p in ("^VLLM::", "vllm serve", r"vllm\.entrypoints")]
IGNORED_RES = [re.compile(p) for p in ("^nvidia-persiste", "^nv-hostengine")]


@pytest.mark.parametrize(
    "info, kind",
    [
        (_info(comm="VLLM::EngineCor"), lib.OWNED),
        (_info(cmdline="VLLM::Worker_TP3"), lib.OWNED),
        (_info(cmdline="/opt/venv/bin/python3 /opt/venv/bin/vllm serve /models/kimi"), lib.OWNED),
        (_info(cmdline="python -m vllm.entrypoints.openai.api_server --model m"), lib.OWNED),
        (_info(comm="python3", cmdline="python train.py", unit="vllm.service"), lib.OWNED),
        (_info(comm="python3", cmdline="python train.py", unit="train.service"), lib.FOREIGN),
        (_info(comm="sleep", cmdline="sleep 600"), lib.FOREIGN),
        (_info(comm="nvidia-persiste", cmdline="/usr/bin/nvidia-persistenced"), lib.IGNORED),
        # an ancestor of the module is never signalled, whatever it looks like
        (_info(pid=1, comm="VLLM::Worker_TP"), lib.PROTECTED),
        (_info(pid=55, comm="VLLM::Worker_TP"), lib.PROTECTED),
    ],
)
def test_classify(info, kind):
    got, reason = lib.classify(info, OWNED_RES, {"vllm.service"}, IGNORED_RES, {1, 55})
    assert got == kind, reason


def test_protected_pids_are_this_process_its_ancestors_and_init():
    import os

    protected = lib.protected_pids()
    assert {os.getpid(), os.getppid(), 1} <= protected


def test_nvidia_smi_output_is_parsed(fake_nvidia_smi):
    path = fake_nvidia_smi([{"index": 0, "idle_mib": 3}, {"index": 1, "idle_mib": 99224}])
    assert lib.query_memory(path) == {0: 3, 1: 99224}
    assert lib.query_compute_apps(path) == []
    assert lib.over_threshold({0: 3, 1: 99224, 2: None}, [0, 1, 2], 1024) == [1]
    assert lib.memory_list({1: 5, 0: 3}) == [{"index": 0, "used_mib": 3},
                                            {"index": 1, "used_mib": 5}]


def test_nvidia_smi_failure_says_what_it_printed(fake_nvidia_smi):
    path = fake_nvidia_smi([], fail=True)
    with pytest.raises(lib.ReleaseError, match=r"rc 9\): NVIDIA-SMI has failed"):
        lib.query_memory(path)


def test_resolve_command(tmp_path):
    assert lib.resolve_command("sh")
    assert lib.resolve_command("no-such-nvidia-smi") is None
    assert lib.resolve_command(str(tmp_path / "nvidia-smi")) is None


def test_long_command_lines_are_shortened_in_messages_only():
    info = {"pid": 9, "comm": "python3", "cmdline": "python -c\nimport x\n" + "y" * 300,
            "user": "bob", "unit": "train.service"}
    text = lib.describe(info)
    assert text.startswith("PID 9 (command 'python -c import x yyy")
    assert "...', user bob, unit train.service)" in text and len(text) < 220
    assert lib.describe(dict(info, cmdline="")) == (
        "PID 9 (command '[python3]', user bob, unit train.service)")
