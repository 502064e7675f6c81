"""Every filter the project's filter plugins export has its sidecar documentation, and
``ansible-doc -t filter NAME`` shows it; no sidecar is left for a filter that is gone."""

import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[4]
PLUGINS = REPO / "plugins" / "filter"
BIN = Path(sys.executable).parent
GONE = ("vllm_trace_summary", "vllm_trace_markdown", "vllm_trace_topology", "vllm_campaign_headline",
        "vllm_campaign_latency_stats", "vllm_campaign_duration", "vllm_campaign_downtime_text")


def _exported() -> dict[str, str]:
    """{filter name: the plugin file exporting it}, read from each FilterModule."""
    names = {}
    for path in sorted(PLUGINS.glob("*.py")):
        module = importlib.import_module(f"ansible_collections.vllm_ops.serving.plugins.filter.{path.stem}")
        for name in module.FilterModule().filters():
            assert name not in names, f"{name} is exported by {names.get(name)} and {path.name}"
            names[name] = path.name
    return names


EXPORTED = _exported()


def test_each_filter_has_one_sidecar_and_each_sidecar_a_filter():
    sidecars = {p.stem for p in PLUGINS.glob("*.yml")}
    assert sidecars == set(EXPORTED)
    assert "vllm_job_downtime_text" in EXPORTED and not set(GONE) & set(EXPORTED)
    for name in sidecars:
        text = (PLUGINS / f"{name}.yml").read_text()
        assert text.startswith("---\n") and f"name: {name}\n" in text, name


def test_ansible_doc_shows_every_filter():
    tool = BIN / "ansible-doc"
    if not tool.exists():
        pytest.skip(f"{tool} not installed")
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    names = sorted(EXPORTED)
    proc = subprocess.run([str(tool), "-t", "filter", *(f"vllm_ops.serving.{name}" for name in names)],
                          capture_output=True, text=True, env=env, cwd=REPO, timeout=300)
    assert proc.returncode == 0, proc.stderr
    for name in names:
        assert f"{name}.yml" in proc.stdout, name
    assert proc.stdout.count("EXAMPLES") == len(names) and proc.stdout.count("RETURN") >= len(names)
