"""Ansible filters over the vllm_ops trace summarizer (documented in the sidecar YAML files).

Thin on purpose: the logic lives in ``vllm_ops.traces`` where pytest reaches it; this
file only maps arguments and turns the library's errors into AnsibleFilterError.
"""

from __future__ import annotations

from collections.abc import Mapping

from ansible.errors import AnsibleFilterError

try:
    from vllm_ops.traces import TraceInputError, summarize, to_markdown
    from vllm_ops.traces.topology import parse_topology
except ImportError as exc:  # the controller's Python lacks the project's package
    _IMPORT_ERROR: ImportError | None = exc
else:
    _IMPORT_ERROR = None


def _require(name: str) -> None:
    if _IMPORT_ERROR is not None:
        raise AnsibleFilterError(
            f"{name}: the vllm_ops package is not importable by the controller's Python "
            f"({_IMPORT_ERROR}); run ansible from the project's .venv"
        )


def vllm_trace_summary(paths, decode_pattern=None, prefill_pattern=None, keep_going=False, top=10,
                       categories=None, jobs=None, context=None, allreduce_floor=None):
    """Trace files or directories (one file per rank) -> the summary dict."""
    name = "vllm_trace_summary"
    _require(name)
    if isinstance(paths, str):
        paths = [paths]
    if not isinstance(paths, (list, tuple)) or not all(isinstance(p, str) for p in paths):
        raise AnsibleFilterError(f"{name}: expected a path or a list of paths, got {type(paths).__name__}")
    if not isinstance(keep_going, bool):
        raise AnsibleFilterError(f"{name}: keep_going must be a boolean, got {keep_going!r}")
    try:
        return summarize([str(p) for p in paths], decode_pattern=decode_pattern, prefill_pattern=prefill_pattern,
                         keep_going=keep_going, top=top, categories=categories, jobs=jobs, context=context,
                         allreduce_floor=allreduce_floor or None)
    except TraceInputError as exc:
        raise AnsibleFilterError(f"{name}: {exc}") from None


def vllm_trace_markdown(summary):
    """The summary dict -> Markdown tables."""
    name = "vllm_trace_markdown"
    _require(name)
    if not isinstance(summary, Mapping):
        raise AnsibleFilterError(f"{name}: expected the dict vllm_trace_summary returns, got {type(summary).__name__}")
    try:
        return to_markdown(summary)
    except TraceInputError as exc:
        raise AnsibleFilterError(f"{name}: {exc}") from None
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        raise AnsibleFilterError(f"{name}: malformed summary: {exc}") from None


def vllm_trace_topology(text):
    """``nvidia-smi topo -m`` output -> {interconnect, gpus, links}."""
    name = "vllm_trace_topology"
    _require(name)
    if text is not None and not isinstance(text, str):
        raise AnsibleFilterError(f"{name}: expected the text nvidia-smi topo -m printed, got {type(text).__name__}")
    return parse_topology(text)


class FilterModule:
    """vLLM trace summary filters."""

    def filters(self):
        return {
            "vllm_trace_summary": vllm_trace_summary,
            "vllm_trace_markdown": vllm_trace_markdown,
            "vllm_trace_topology": vllm_trace_topology,
        }
