"""What the trace and the checkpoint show of the model and the server, so that advice fits them:
dense or MoE, quantized or not, the tensor-parallel size, CUDA graphs or eager steps.

:func:`facts` returns ``{moe, quantized, tensor_parallel_size, cuda_graphs, from}``, each true,
false or null (unknown), with ``from`` saying where each came from:

* ``moe``: the checkpoint's record declares routed experts (``model.routed_experts``) or holds
  routed-expert tensors (``routed_experts.layers``); else, without a record, the trace ran MoE
  kernels (``moe_gemm``) where its kernels are recorded: true; recorded kernels without any:
  false; else null.
* ``quantized``: the record's config has a ``quantization_config``, or its tensors hold a dtype
  other than BF16, F16 and F32 (:data:`PLAIN_DTYPES`): true; a record whose tensors are all of
  those: false; a record without dtypes (written before they were kept): null. Without a record:
  true where the trace ran quantize kernels (or Marlin's), else null (a bf16 trace and a
  quantized one whose kernels carry no such name look alike).
* ``tensor_parallel_size`` and ``cuda_graphs``: as given (the summary's context).

:func:`fits` says whether an experiment's ``needs`` (a tuple of :data:`NEEDS`) hold: a need on an
unknown fact holds (advice is dropped only on evidence).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

PLAIN_DTYPES = ("BF16", "F16", "F32")
NEEDS = ("moe", "dense", "quantized", "not_quantized", "tp>1", "tp1", "graphs", "eager")


def facts(checkpoint: Mapping | None = None, tensor_parallel_size: int | None = None,
          cuda_graphs: bool | None = None, moe_seen: bool | None = None, quantized_seen: bool | None = None) -> dict:
    """The facts advice is filtered by (see the module docstring)."""
    record = checkpoint if isinstance(checkpoint, Mapping) and not checkpoint.get("error") else None
    moe = quantized = None
    where = {"moe": None, "quantized": None}
    if record is not None:
        model = record.get("model") if isinstance(record.get("model"), Mapping) else {}
        routed = record.get("routed_experts") if isinstance(record.get("routed_experts"), Mapping) else {}
        declared = model.get("routed_experts")
        moe = bool((isinstance(declared, int) and declared > 0) or routed.get("layers"))
        where["moe"] = "checkpoint"
        dtypes = record.get("dtypes")
        if model.get("quantization") or (dtypes and any(d not in PLAIN_DTYPES for d in dtypes)):
            quantized, where["quantized"] = True, "checkpoint"
        elif dtypes:
            quantized, where["quantized"] = False, "checkpoint"
    if moe is None and moe_seen is not None:
        moe, where["moe"] = moe_seen, "trace"
    if quantized is None and quantized_seen:
        quantized, where["quantized"] = True, "trace"
    return {"moe": moe, "quantized": quantized, "tensor_parallel_size": tensor_parallel_size,
            "cuda_graphs": cuda_graphs, "from": where}


def fits(needs: Iterable[str], known: Mapping | None) -> bool:
    """Whether every need holds on the facts ``known`` (an unknown fact holds every need)."""
    known = known or {}
    tp = known.get("tensor_parallel_size")
    value = {"moe": known.get("moe"), "dense": None if known.get("moe") is None else not known["moe"],
             "quantized": known.get("quantized"),
             "not_quantized": None if known.get("quantized") is None else not known["quantized"],
             "tp>1": None if not isinstance(tp, int) else tp > 1, "tp1": None if not isinstance(tp, int) else tp == 1,
             "graphs": known.get("cuda_graphs"),
             "eager": None if known.get("cuda_graphs") is None else not known["cuda_graphs"]}
    return all(value[n] is not False for n in needs)
