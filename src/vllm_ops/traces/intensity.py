"""Are the GEMMs memory-bound by their arithmetic intensity alone: the tokens a decode step
multiplies each weight by, against the GPU's FLOP-per-byte ridge. What the verdict says of GEMMs
where no checkpoint is given (with one, the decode ledger measures them against their floor).

A decode step's GEMM reads each weight once and multiplies it by every token of the step: two
FLOPs (a multiply and an add) per weight and token. Per byte of weight read that is ``2 x tokens
/ bytes per weight``, the most when weights are smallest: half a byte (4-bit weights) gives
``4 x tokens``. The activations' bytes only add to the bytes read, so they only lower it. A
kernel whose intensity is below the GPU's ridge (its peak FLOP/s over its memory bandwidth) cannot
keep the ALUs busy: it waits for memory, whatever its weights' format. The ridge is taken at the
dense BF16 tensor-core peak: a format with a faster peak (FP8 compute with 1-byte weights, FP4
with half-byte ones) gains as much FLOP/s as it saves bytes, and 4-bit weights computed in BF16
(W4A16) are the case the bound above covers.

Definitions (per rank, over the steady decode steps the figures average,
:func:`.steady.averaged`; thresholds are the constants below):

* ``tokens_per_step``: the median over the steps of the tokens their names give (scheduled
  tokens, else the batch size: :mod:`.annotations`); null where no step's name gives them (a
  ``--decode-pattern`` step), and then nothing is said.
* ``intensity_max_flop_per_byte``: :data:`MAX_FLOP_PER_WEIGHT_BYTE` x ``tokens_per_step``.
* ``ridge_flop_per_byte``: the GPU's ``bf16_tflops`` over its spec bandwidth
  (:data:`vllm_ops.ledger.bandwidth.SPEC_GBPS`: vendor figures, not measured); null for a GPU the
  table lacks.
* ``kind``: ``memory-bound`` when the intensity is at most the ridge; null otherwise (more tokens
  a step than that: the intensity cannot tell, the checkpoint's floor can).
* ``checkpoint_adds``: what ``--checkpoint`` would add: the GEMMs' floor (their weights read once
  at the bandwidth), how far above it they run, and the step's headroom.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from statistics import median

from ..ledger.bandwidth import spec_bandwidth

MAX_FLOP_PER_WEIGHT_BYTE = 4.0  # 2 FLOP per weight and token, over half a byte per weight (4-bit)
CHECKPOINT_ADDS = ("the GEMMs' floor (their weights read once at the bandwidth), how far above it they run, and the "
                   "step's headroom")
THRESHOLDS = {"max_flop_per_weight_byte": MAX_FLOP_PER_WEIGHT_BYTE}


def tokens_per_step(steps: Sequence[Mapping]) -> float | None:
    """The median tokens a step of ``steps`` holds, from the names (see the module docstring)."""
    tokens = [s.get("scheduled_tokens") or s.get("batch_size") for s in steps]
    known = [t for t in tokens if t]
    return float(median(known)) if known else None


def gemm_bound(steps: Sequence[Mapping], gpu_name: str | None) -> dict | None:
    """The GEMMs' bound by intensity over one rank's ``steps`` on ``gpu_name`` (see the module
    docstring), or None where the steps' names give no tokens."""
    tokens = tokens_per_step(steps)
    if tokens is None:
        return None
    spec = spec_bandwidth(gpu_name)
    ridge = spec.bf16_tflops * 1e12 / (spec.gbps * 1e9) if spec is not None and spec.bf16_tflops else None
    intensity = MAX_FLOP_PER_WEIGHT_BYTE * tokens
    return {"tokens_per_step": tokens, "intensity_max_flop_per_byte": intensity,
            "ridge_flop_per_byte": round(ridge, 1) if ridge is not None else None,
            "gpu": spec.name if spec is not None else gpu_name,
            "peak_tflops": spec.bf16_tflops if spec is not None else None,
            "bandwidth_gbps": spec.gbps if spec is not None else None,
            "kind": "memory-bound" if ridge is not None and intensity <= ridge else None,
            "checkpoint_adds": CHECKPOINT_ADDS}
