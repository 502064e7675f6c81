"""What one decode step must read from HBM on one tensor-parallel rank, from a checkpoint's
record (:func:`vllm_ops_host.checkpoint.read_checkpoint`, or ``capture.json``'s ``checkpoint``).

For a step of B tokens (:func:`step_reads`; bytes per rank):

- ``always`` and ``shared_experts``: the part's bytes / TP;
- ``routed_experts``: per MoE layer, its bytes per expert x the expected distinct experts
  :func:`expected_experts` ``E * (1 - (1 - k/E)^B)``, summed over the layers, / TP. At B = 1
  that is exactly k; above, it is the count under uniform routing, the most any routing gives
  (skewed routing reuses experts), so for B > 1 this term can overstate what the step reads;
- ``embedding``: B rows x the embedding's bytes per row / TP (a step reads only its tokens' rows);
- ``lm_head``: the LM head's bytes (the embedding's, where they are tied) / TP;
- ``weights`` = the sum of those; ``kv_cache`` = the keys read (the sum of the decode requests'
  context lengths: vLLM's detailed step annotations' ``sk``) x the KV bytes per token, whole on
  every rank with MLA (each rank keeps the whole latent), / TP by KV head otherwise (at least one
  head per rank), 0 for a model without attention (the record's ``kv.layout`` ``none``: no KV cache,
  whatever the context); ``total`` = weights + kv_cache.

Per rank is the checkpoint's bytes divided by the TP size, as vLLM shards them; tensors it
replicates on every rank (norms, the router, MLA's low-rank projections) make the true per-rank
figure a little larger, so the floor stays a floor. Unclassified tensors (no rule of
:data:`vllm_ops_host.checkpoint.RULES`) and ``not_in_decode`` ones are not counted. A term that
cannot be computed is None, with the reason in ``missing``; a sum with a None term is None.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping

from vllm_ops_host import checkpoint as ckpt

from .errors import LedgerInputError

PER_RANK_TERMS = ("always", "shared_experts", "routed_experts", "embedding", "lm_head")


def expected_experts(experts: int, per_token: int, tokens: int) -> float:
    """Expected distinct experts of one MoE layer for ``tokens`` tokens, each routed to
    ``per_token`` of the ``experts`` uniformly at random: ``E * (1 - (1 - k/E)^B)``."""
    if experts < 1 or not 0 < per_token <= experts or tokens < 0:
        raise LedgerInputError(f"expected experts: need E >= 1, 0 < k <= E and B >= 0, got E={experts}, "
                               f"k={per_token}, B={tokens}")
    return experts * (1.0 - (1.0 - per_token / experts) ** tokens)


def load_checkpoint(source: str | os.PathLike | Mapping) -> dict:
    """A checkpoint's record: read from a model directory's headers (the same reader the hosts
    run), or a record already read: the mapping, or a JSON file holding it (the record as
    ``vllm_checkpoint`` returns it, or a ``capture.json``, whose ``checkpoint`` it is), checked.
    Raises LedgerInputError, the package's error, where the shared reader raises its own."""
    if isinstance(source, Mapping):
        check_record(source)
        return dict(source)
    path = os.fspath(source)
    if not os.path.exists(path):
        raise LedgerInputError(f"{path}: no such file or directory (give the model's directory or a JSON file of "
                               "its checkpoint record)")
    if os.path.isfile(path):
        return _record_file(path)
    try:
        return ckpt.read_checkpoint(path)
    except ckpt.CheckpointError as exc:
        raise LedgerInputError(str(exc)) from None


def _record_file(path: str) -> dict:
    """The checkpoint record a JSON file holds (itself, or a capture.json's ``checkpoint``)."""
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except OSError as exc:
        raise LedgerInputError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise LedgerInputError(f"{path}: neither a model directory nor a checkpoint record in JSON ({exc})") from None
    if isinstance(data, Mapping) and "checkpoint" in data and data.get("tool") != ckpt.TOOL:
        data = data["checkpoint"]
        if data is None:
            raise LedgerInputError(f"{path}: the capture recorded no checkpoint (vllm_capture_checkpoint_enabled "
                                   "was off); give the model directory")
    try:
        check_record(data)
    except LedgerInputError as exc:
        raise LedgerInputError(f"{path}: {exc}") from None
    return dict(data)


def check_record(record: Mapping) -> None:
    """Refuse what is not a checkpoint record. A record with ``error`` is valid (it says why
    there are no figures)."""
    if not isinstance(record, Mapping) or record.get("tool") != ckpt.TOOL or record.get("schema") != ckpt.SCHEMA:
        raise LedgerInputError(f"not a checkpoint record (expected tool {ckpt.TOOL}, schema {ckpt.SCHEMA})")


def step_reads(record: Mapping, *, tokens: int, tensor_parallel_size: int, key_tokens: int | None = None,
               kv_dtype_bytes: int | None = None) -> dict:
    """Bytes one decode step of ``tokens`` tokens reads on one rank (see the module's docstring).
    ``kv_dtype_bytes`` is the KV cache's element size where the server sets one (``--kv-cache-dtype
    fp8``: 1); default the config's dtype."""
    check_record(record)
    tp = tensor_parallel_size
    if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1:
        raise LedgerInputError(f"tensor_parallel_size must be a positive integer, got {tp!r}")
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1:
        raise LedgerInputError(f"tokens per step must be a positive integer, got {tokens!r}")
    out = {"tokens": tokens, "key_tokens": key_tokens, "tensor_parallel_size": tp, "expected_experts": None,
           "missing": {}}
    if record.get("error"):
        for term in (*PER_RANK_TERMS, "weights", "kv_cache", "total"):
            out[term] = None
        out["missing"]["checkpoint"] = record["error"]
        return out
    parts, model = record["parts"], record["model"]
    out["always"] = parts[ckpt.ALWAYS]["bytes"] / tp
    out["shared_experts"] = parts[ckpt.SHARED]["bytes"] / tp
    out["routed_experts"] = _routed(record, tokens, tp, out)
    row = record["embedding"].get("row_bytes")
    out["embedding"] = min(tokens, record["embedding"]["rows"]) * row / tp if row is not None else 0.0
    out["lm_head"] = record["lm_head"]["bytes"] / tp
    terms = [out[t] for t in PER_RANK_TERMS]
    out["weights"] = None if any(v is None for v in terms) else sum(terms)
    out["kv_cache"] = _kv(model, key_tokens, tp, kv_dtype_bytes, out["missing"])
    out["total"] = None if out["weights"] is None or out["kv_cache"] is None else out["weights"] + out["kv_cache"]
    return out


def _routed(record: Mapping, tokens: int, tp: int, out: dict) -> float | None:
    layers = record["routed_experts"]["layers"]
    if not layers:
        return 0.0
    k = record["model"].get("experts_per_token")
    if not isinstance(k, int) or k < 1:
        out["missing"]["routed_experts"] = ("config.json gives no num_experts_per_tok: the experts a token runs "
                                            "are unknown")
        return None
    total, counts = 0.0, []
    for row in layers:
        expected = expected_experts(row["experts"], min(k, row["experts"]), tokens)
        counts.append(expected)
        total += row["bytes"] / row["experts"] * expected
    out["expected_experts"] = sum(counts) / len(counts)
    return total / tp


def _kv(model: Mapping, key_tokens: int | None, tp: int, kv_dtype_bytes: int | None, missing: dict) -> float | None:
    kv = model.get("kv") or {}
    per_token = kv.get("bytes_per_token")
    if key_tokens == 0:
        return 0.0  # no context: nothing to read, whatever a token's size
    if per_token is None:
        missing["kv_cache"] = kv.get("note") or "config.json gives no KV cache size per token"
        return None
    if kv.get("layout") == "none":
        return 0.0  # no attention: no KV cache to read
    if key_tokens is None:
        missing["kv_cache"] = ("the context lengths are unknown (vLLM's detailed step annotations carry them: "
                               "profiler_config detailed_trace_annotation)")
        return None
    if kv_dtype_bytes is not None:
        per_token = per_token * kv_dtype_bytes / model["dtype_bytes"]
    if kv.get("layout") == "mla":
        share = 1.0
    else:
        heads = kv["kv_heads"]
        share = (heads // tp if heads >= tp else 1) / heads
    return key_tokens * per_token * share
