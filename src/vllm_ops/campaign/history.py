"""One CSV line per campaign in ``artifacts/<host>/history.csv``, so campaigns compare.

The columns are fixed (:data:`COLUMNS`, described in :data:`COLUMN_DOCS`). A file whose
header differs is never appended to: the error says so, and the operator moves it aside.

An empty cell is a figure that was not measured, never a zero: the GPU-time columns are
empty for a campaign whose traces hold no GPU kernels (vLLM's CPU backend), while
``decode_steps`` still counts the steps the CPU annotations show.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from .. import loadcost
from ..csvfile import append_csv_rows
from ..job import JobInputError, iso_utc, now_iso
from ..records.summary import checked
from .errors import CampaignInputError
from .figures import decode_figures, steady_figures

NCCL_VARS = ("NCCL_ALGO", "NCCL_PROTO", "NCCL_MAX_NCHANNELS")

COLUMN_DOCS: dict[str, str] = {
    "campaign_id": "the campaign's id (campaign.id)",
    "finished_at": "when the campaign finished, ISO 8601 UTC (YYYY-MM-DDTHH:MM:SSZ)",
    "host": "the inventory host",
    "model": "the served model",
    "vllm_version": "vLLM's version on the host",
    "tensor_parallel_size": "TP size the server ran with",
    "nccl_algo": "NCCL_ALGO in the service environment (empty: unset, NCCL's default)",
    "nccl_proto": "NCCL_PROTO in the service environment (empty: unset)",
    "nccl_max_nchannels": "NCCL_MAX_NCHANNELS in the service environment (empty: unset)",
    "requests": "profiled requests",
    "concurrency": "requests in flight at once",
    "prompt_tokens": "prompt length of each request, tokens",
    "output_tokens": "output length of each request, tokens",
    "ttft_ms_p50": "median time to first token, ms",
    "tpot_ms_p50": "median time per output token, ms",
    "cuda_ms_per_step": "decode CUDA ms per step, mean over the ranks with GPU kernels (empty: not measured, "
                        "e.g. no GPU kernels in the traces)",
    "allreduce_ms_per_step": "all-reduce ms per decode step, mean over the same ranks (empty: not measured)",
    "allreduce_share": "allreduce_ms_per_step / cuda_ms_per_step (0..1; empty: not measured)",
    "allreduce_skew_corrected_ms": "all-reduce ms per step without waiting for other ranks (empty: not measured)",
    "verdict": "what bounds the steady decode step (host-bound, imbalanced, communication-bound, compute-bound, "
               "inconclusive; empty: not measured or a summary without a verdict)",
    "verdict_rank": "the rank the verdict is about (empty: none)",
    "straggler": "the rank that arrives last at most collectives, when one is named (empty: none)",
    "steady_steps": "decode steps in the verdict rank's steady mean (outliers left out)",
    "steady_period_ms": "that rank's mean steady decode step, start to next start, ms",
    "steady_busy_ms": "of which the GPU was busy (union of activities), ms",
    "steady_idle_ms": "of which the GPU was idle, ms (period - busy)",
    "steady_transfer_ms": "all-reduce transfer per steady step, without waiting, ms",
    "steady_wait_ms": "the longest wait of another rank for the verdict rank, ms per steady step",
    "decode_steps": "decode steps in the traces (fewest over the ranks with figures; over every rank, from the "
                    "CPU annotations, when no trace has GPU kernels)",
    "warnings": "how many warnings the trace summary has",
    "report": "path of the campaign's Markdown report",
    "downtime_s": "seconds the service's /health did not answer 200 during the campaign (empty: not recorded)",
    "longest_gap_s": "the longest of those gaps, s (empty: not recorded)",
    "loads": "model loads the campaign caused (vllm_ops.loadcost; empty: not recorded)",
    "load_ready_s": "the median time to ready of those loads, s (empty: none got ready, or not recorded)",
    "load_weights_gbps": "the median rate their weights phase read the checkpoint at, GB/s (empty: not measured)",
    "disk_gbps": "the disk's floor the campaign's checks measured, GB/s (empty: not measured)",
}
# Columns added since the first version, in order: a file whose header stops before them is
# rewritten with them (its rows get empty cells) instead of being refused.
ADDED_COLUMNS = ("downtime_s", "longest_gap_s", "loads", "load_ready_s", "load_weights_gbps", "disk_gbps")
COLUMNS: tuple[str, ...] = tuple(COLUMN_DOCS)


def _mapping(meta: Mapping, key: str) -> Mapping:
    value = meta.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise CampaignInputError(f"campaign.{key} must be a mapping, got {type(value).__name__}")
    return value


def _required(meta: Mapping, key: str) -> str:
    value = meta.get(key)
    if not isinstance(value, str) or not value.strip():
        raise CampaignInputError(f"campaign.{key} must be a non-empty string, got {value!r}")
    return value


def history_row(meta: Mapping, summary: Mapping) -> dict:
    """The history line of one campaign: ``meta`` is the report's ``campaign`` dict (``id``,
    ``host``, ``finished_at``, ``model``, ``vllm_version``, ``tensor_parallel_size``,
    ``environment``, ``load``, ``latency``, and ``report``, the report's path), ``summary`` the
    trace summary. Keys are :data:`COLUMNS`; missing values are None. ``finished_at`` defaults
    to now."""
    if not isinstance(meta, Mapping):
        raise CampaignInputError(f"expected the campaign metadata as a mapping, got {type(meta).__name__}")
    summary = checked(summary)
    env, load, latency = _mapping(meta, "environment"), _mapping(meta, "load"), _mapping(meta, "latency")
    downtime = _mapping(meta, "downtime") or {}
    finished = meta.get("finished_at")
    try:
        finished_at = iso_utc(finished, "campaign.finished_at") if finished is not None else now_iso()
    except JobInputError as exc:
        raise CampaignInputError(str(exc)) from None
    fig = decode_figures(summary)
    steady = steady_figures(summary)
    row = {
        "campaign_id": _required(meta, "id"),
        "finished_at": finished_at,
        "host": _required(meta, "host"),
        "model": meta.get("model"),
        "vllm_version": meta.get("vllm_version"),
        "tensor_parallel_size": meta.get("tensor_parallel_size"),
        **{name.lower(): env.get(name) for name in NCCL_VARS},
        **{k: load.get(k) for k in ("requests", "concurrency", "prompt_tokens", "output_tokens")},
        "ttft_ms_p50": (_mapping(latency, "ttft_ms") or {}).get("p50"),
        "tpot_ms_p50": (_mapping(latency, "tpot_ms") or {}).get("p50"),
        "cuda_ms_per_step": fig["cuda_ms_per_step"],
        "allreduce_ms_per_step": fig["allreduce_ms_per_step"],
        "allreduce_share": fig["allreduce_share"],
        "allreduce_skew_corrected_ms": fig["skew_corrected_ms"],
        "verdict": steady["verdict"],
        "verdict_rank": steady["verdict_rank"],
        "straggler": steady["straggler"],
        "steady_steps": steady["steady_steps"],
        "steady_period_ms": steady["period_ms"],
        "steady_busy_ms": steady["busy_ms"],
        "steady_idle_ms": steady["idle_ms"],
        "steady_transfer_ms": steady["transfer_ms"],
        "steady_wait_ms": steady["wait_ms"],
        "decode_steps": fig["decode_steps"],
        "warnings": len(summary.get("warnings") or []),
        "report": meta.get("report"),
        "downtime_s": downtime.get("seconds_not_ready"),
        "longest_gap_s": downtime.get("longest_gap_s"),
        **loadcost.history_figures(_mapping(meta, "model_loads") or None),
    }
    assert tuple(row) == COLUMNS
    return row


def append_history(path: str | os.PathLike, row: Mapping) -> bool:
    """Append ``row`` to the CSV at ``path`` (parents created), writing the header first when the
    file is new or empty. Returns True when the header was written. Refuses, with
    :class:`CampaignInputError`, a file whose header is not :data:`COLUMNS` or a row with other keys.
    Concurrent appenders are serialized with an exclusive lock on the file."""
    return append_csv_rows(path, [row], COLUMNS, added_columns=ADDED_COLUMNS, what="history",
                           error=CampaignInputError)
