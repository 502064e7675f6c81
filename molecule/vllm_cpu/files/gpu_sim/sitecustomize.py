"""Simulated GPUs for vLLM's CPU build in the vllm_cpu scenario (test fixture).

On a GPU host vLLM's CUDA processes (the EngineCore, each worker) hold /dev/nvidiaN open, and
that is how the gpu_release role finds them. vLLM's CPU build opens no device, so this module,
found through PYTHONPATH in the server's environment, opens the simulated device files named in
GPU_SIM_HOLD (colon-separated) and keeps them open until the process exits, in the processes
that would hold a GPU: the `vllm serve` process and the processes multiprocessing spawns from it
(forked ones inherit the descriptors). Helpers that never touch a GPU, such as multiprocessing's
resource tracker, hold nothing. The nvidia-smi stand-in then lists the holders as compute apps.
It is imported before vLLM and changes nothing in it.
"""

import contextlib
import os


def _holds_gpus(argv):
    serve = len(argv) > 2 and os.path.basename(argv[1]) == "vllm" and argv[2] == "serve"
    spawned = any("multiprocessing.spawn" in arg for arg in argv)
    return serve or spawned


def _argv():
    try:
        with open("/proc/self/cmdline", "rb") as handle:
            return [arg.decode("utf-8", "replace") for arg in handle.read().split(b"\0") if arg]
    except OSError:
        return []


_GPU_SIM_FDS = []

if os.environ.get("GPU_SIM_HOLD") and _holds_gpus(_argv()):
    for _path in filter(None, os.environ["GPU_SIM_HOLD"].split(":")):
        with contextlib.suppress(OSError):
            _GPU_SIM_FDS.append(os.open(_path, os.O_RDONLY | os.O_CLOEXEC))
