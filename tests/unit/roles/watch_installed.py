"""The watch as the vllm role installs it on a host, for every test that imports it.

roles/vllm/tasks/watch.yml copies ``roles/vllm/files/vllm_ops_watch.py`` and, beside it, five files of the
collection's ``plugins/module_utils`` under the names the watch imports: ``loads.py`` as ``vllm_ops_loads``,
``step_model.py`` as ``vllm_ops_step_model``, ``vllm_fabric_lib.py`` as ``vllm_ops_fabric_lib``,
``profiler.py`` as ``vllm_ops_profiler`` and ``watch_config.py`` as ``vllm_ops_watch_config``. The
watch reads them once, when it is first imported (without one of the first four it goes on without that
piece), so a test that imported it with fewer neighbours would change what every later test sees: import
it from here.
"""

import sys
from pathlib import Path

from vllm_ops_host import loads, profiler, step_model, vllm_fabric_lib, watch_config

INSTALLED_AS = {"vllm_ops_loads": loads, "vllm_ops_step_model": step_model, "vllm_ops_fabric_lib": vllm_fabric_lib,
                "vllm_ops_profiler": profiler, "vllm_ops_watch_config": watch_config}
for _name, _module in INSTALLED_AS.items():
    sys.modules.setdefault(_name, _module)
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "roles" / "vllm" / "files"))

import vllm_ops_watch as watch  # noqa: E402

__all__ = ["INSTALLED_AS", "watch"]
