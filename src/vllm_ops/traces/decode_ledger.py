"""The decode ledger of the summary: what the trace and the checkpoint show of the model
(:func:`facts`, once, for every piece of advice), and, where a checkpoint was given, the ledger of
the steady decode step over the summary's own figures (:func:`analyze`;
:func:`vllm_ops.ledger.decode_ledger` defines every figure)."""

from __future__ import annotations

from collections.abc import Mapping

from .. import ledger as ledger_mod
from .errors import TraceInputError
from .notes import Note, note
from .options import Resolved

__all__ = ["analyze", "facts"]


def facts(entries: list[dict], ctx: Mapping, checkpoint: Mapping | None) -> dict:
    """What the trace and the checkpoint show of the model, once, for the advice of the verdict, the
    regimes and the ledger (:func:`vllm_ops.ledger.fit.facts`): MoE and quantize kernels seen in the
    steady decode steps of the ranks whose kernels are all recorded."""
    seen = [e["decomposition"] for e in entries if e.get("decomposition") and not e["graph_launches_without_activity"]]
    moe = any((d["compute_ms"].get("moe_gemm") or 0) > 0 for d in seen) if seen else None
    quantized = any((d["compute_ms"].get("quantize") or 0) > 0 for d in seen) or any(
        "marlin" in k["name"].lower() for e in entries for k in e.get("top_kernels") or [])
    return ledger_mod.fit.facts(checkpoint, ctx.get("tensor_parallel_size"), ctx.get("cuda_graphs"), moe, quantized)


def analyze(entries: list[dict], coll: Mapping, ctx: Mapping, world: int | None,
            resolved: Resolved) -> tuple[dict | None, list[Note]]:
    """The decode ledger of the steady decode step where a checkpoint was given (else None), and a
    note for GEMMs faster than their weights allow (the checkpoint, the TP size or the bandwidth does
    not fit the run)."""
    if resolved.checkpoint is None:
        return None, []
    if ctx.get("tensor_parallel_size") is None:
        raise TraceInputError("the decode ledger (checkpoint) needs the tensor-parallel size, and the traces give "
                              "none (no distributedInfo world_size): give it (context tensor_parallel_size; "
                              "--tensor-parallel-size N on the command line)")
    options = resolved.options
    partial = {"ranks": entries, "collectives": coll, "context": ctx, "world_size": world}
    out = ledger_mod.decode_ledger(partial, resolved.checkpoint, allreduce_floor=options.allreduce_floor,
                                   tokens=options.tokens, key_tokens=options.key_tokens, facts=ctx.get("model"))
    return out, [note("below_weight_floor", rank=r["rank"], measured_ms=r["gemm"]["measured_ms"],
                      gbps=r["bandwidth"]["gbps"], floor_ms=r["gemm"]["floor_ms"], why=r["gemm"]["why"])
                 for r in out["ranks"] if r["gemm"]["kind"] == "below-weight-floor"]
