"""The decode ledger: how far a steady decode step is from its floor, part by part.

Public API::

    from vllm_ops.ledger import decode_ledger, describe, load_checkpoint
    ledger = decode_ledger(summary, load_checkpoint("/srv/models/Kimi-K2.5"),
                           allreduce_floor="artifacts/h1/<job>/allreduce/allreduce-unit.json")
    print(describe(ledger["ranks"][0]))

``reads`` (what a decode step must read, from the checkpoint's record), ``bandwidth`` (the GPU's,
measured or from the table of known GPUs), ``inputs`` (the one adapter over the trace summary) and
``ledger`` (the floors, the parts, the headroom, the levers) each answer one question; their
docstrings define every figure.
"""

from . import fit
from .bandwidth import SPEC_GBPS, device_bandwidth
from .errors import LedgerInputError
from .inputs import ledger_inputs
from .ledger import FLOORED_PARTS, GEMM_WORDS, LEVERS, MEMORY_BOUND_FACTOR, PARTS, decode_ledger, describe
from .reads import expected_experts, load_checkpoint, step_reads

__all__ = [
           "FLOORED_PARTS",
           "GEMM_WORDS",
           "LEVERS",
           "MEMORY_BOUND_FACTOR",
           "PARTS",
           "SPEC_GBPS",
           "LedgerInputError",
           "decode_ledger",
           "describe",
           "device_bandwidth",
           "expected_experts",
           "fit",
           "ledger_inputs",
           "load_checkpoint",
           "step_reads",
]
