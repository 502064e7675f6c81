"""`vllm serve --help=all`, the stand-in's and vLLM 0.32's CPU build's, read by the vllm role's release
check (plugins/module_utils/vllm_serve_help_lib.py) before a switch.

Both halves must list exactly the arguments of the stand-in's table (serve_options.py, taken from
the CPU build): so the two lists are identical, and a unit the sandbox passes is checked as vLLM
would take it. Both must show a ProfilerConfig with every field the stand-in models, and the
release they document.
"""

import importlib.util
import subprocess

from contract_support import ROOT, WAIT_S

LIB = ROOT / "plugins/module_utils/vllm_serve_help_lib.py"
TABLE = ROOT / "molecule/resources/standin/lib/vllm_standin/serve_options.py"


def load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


lib = load("vllm_serve_help_lib", LIB)
SERVE_OPTIONS = load("serve_options", TABLE).SERVE_OPTIONS
# The fields of --profiler-config the stand-in validates (molecule/resources/standin, config.py).
MODELLED_FIELDS = {"profiler", "torch_profiler_dir", "torch_profiler_with_stack", "torch_profiler_use_gzip",
                   "torch_profiler_record_shapes", "torch_profiler_with_memory", "torch_profiler_with_flops",
                   "torch_profiler_dump_cuda_time_total", "ignore_frontend", "capture_torch_profiler",
                   "detailed_trace_annotation", "delay_iterations", "max_iterations", "warmup_iterations",
                   "active_iterations", "wait_iterations"}


def test_serve_help_lists_vllm_0_32s_arguments_and_profiler_fields(server):
    done = subprocess.run([*server.command, "serve", "--help=all"], capture_output=True, text=True, env=server.env,
                          timeout=WAIT_S)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    table = {spelling for _, options in SERVE_OPTIONS for spellings in options for spelling in spellings}
    assert lib.arguments(done.stdout) == table
    assert lib.config_fields(done.stdout, "ProfilerConfig") >= MODELLED_FIELDS
    assert lib.help_version(done.stdout) == "0.32.0"
