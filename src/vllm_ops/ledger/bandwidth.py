"""The GPU's memory bandwidth that the decode floor divides bytes by: measured where the host's
all-reduce floor job measured it, else the vendor's figure for the GPU the trace names.

- **measured** (:func:`measured_bandwidth`): ``device_copy`` of ``allreduce_bench.py``'s JSON
  (the all-reduce floor job runs it with the GPUs free): a device-to-device copy on every
  rank's GPU, ``hbm_gbps`` = (bytes read + bytes written) / the median time of one copy, 1e9
  bytes per second; the figure used is the median over the ranks (``hbm_gbps_by_rank``). Used
  only when the floor was measured on a GPU of the same name as the trace's.
- **spec** (:func:`spec_bandwidth`): :data:`SPEC_GBPS`, the vendors' peak HBM (or GDDR)
  bandwidth by GPU name (first match wins), labelled as such: a measured copy reaches less
  (on one H200, tests/gpu/README.md), so a floor from it is lower than the measured one.
  The same table gives ``bf16_tflops``, the vendor's dense BF16 tensor-core peak (no
  sparsity; None where the table does not hold it), for the GEMMs' arithmetic-intensity ridge
  (:mod:`vllm_ops.traces.intensity`).

:func:`device_bandwidth` returns ``{gbps, source, gpu, how, note}``; ``gbps`` None (and
``source`` None) when neither is known: the floors that need it are then not measured.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Mapping
from typing import NamedTuple


class SpecGPU(NamedTuple):
    name: str
    pattern: str  # searched, case-insensitive, in the GPU name the trace or torch reports
    gbps: float
    memory: str
    bf16_tflops: float | None = None  # dense BF16 tensor-core peak, 1e12 FLOP/s (no sparsity)


# name, pattern, GB/s (1e9 bytes per second), memory, dense BF16 TFLOP/s. First match wins: the more
# specific first.
SPEC_GBPS: tuple[SpecGPU, ...] = (
    SpecGPU("H200", r"\bH200\b", 4800.0, "141 GB HBM3e", 989.0),
    SpecGPU("H100 PCIe", r"\bH100\b.*\bPCIe\b", 2000.0, "80 GB HBM2e", 756.0),
    SpecGPU("H100 NVL", r"\bH100 NVL\b", 3900.0, "94 GB HBM3", 835.0),
    SpecGPU("H100 SXM", r"\bH100\b", 3350.0, "80 GB HBM3", 989.0),
    SpecGPU("H20", r"\bH20\b", 4000.0, "96 GB HBM3", 148.0),
    SpecGPU("B200", r"\bB200\b", 8000.0, "180 GB HBM3e", 2250.0),
    SpecGPU("A100 80GB PCIe", r"\bA100\b.*80GB.*\bPCIe\b", 1935.0, "80 GB HBM2e", 312.0),
    SpecGPU("A100 80GB SXM", r"\bA100\b.*80GB", 2039.0, "80 GB HBM2e", 312.0),
    SpecGPU("A100 40GB", r"\bA100\b", 1555.0, "40 GB HBM2", 312.0),
    SpecGPU("L40S", r"\bL40S\b", 864.0, "48 GB GDDR6", 362.0),
    SpecGPU("L4", r"\bL4\b", 300.0, "24 GB GDDR6"),
    SpecGPU("RTX PRO 6000 Blackwell", r"\bRTX PRO 6000 Blackwell\b", 1792.0, "96 GB GDDR7"),
    SpecGPU("RTX 6000 Ada", r"\bRTX 6000 Ada\b", 960.0, "48 GB GDDR6"),
    SpecGPU("MI300X", r"\bMI300X\b", 5300.0, "192 GB HBM3", 1307.0),
    SpecGPU("MI325X", r"\bMI325X\b", 6000.0, "256 GB HBM3e", 1307.0),
)


def spec_bandwidth(gpu_name: str | None) -> SpecGPU | None:
    """The table's entry for ``gpu_name`` (as torch or the trace's ``deviceProperties`` name it), or None."""
    if not gpu_name:
        return None
    return next((g for g in SPEC_GBPS if re.search(g.pattern, gpu_name, re.IGNORECASE)), None)


def measured_bandwidth(floor: Mapping | None) -> tuple[float | None, str]:
    """(GB/s, how) from an all-reduce floor's ``device_copy``, or (None, why not)."""
    if floor is None:
        return None, "no all-reduce floor given (its job measures the copy)"
    copy = floor.get("device_copy")
    if not isinstance(copy, Mapping):
        return None, "the all-reduce floor has no device_copy (measured before the copy was, or on the CPU)"
    if copy.get("error"):
        return None, f"the device copy failed: {copy['error']}"
    values = copy.get("hbm_gbps_by_rank") or [copy.get("hbm_gbps")]
    by_rank = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0]
    if not by_rank:
        return None, "the all-reduce floor's device_copy has no positive hbm_gbps"
    gbps = statistics.median(by_rank)
    ranks = f", median of {len(by_rank)} ranks" if len(by_rank) > 1 else ""
    timing = copy.get("timing") or "timing not recorded"
    return float(gbps), f"device-to-device copy measured by allreduce_bench ({timing}{ranks})"


def device_bandwidth(gpu_name: str | None = None, floor: Mapping | None = None) -> dict:
    """The bandwidth the floors use (see the module's docstring)."""
    gbps, how = measured_bandwidth(floor)
    note = None
    if gbps is not None:
        measured_on = floor.get("gpu_name")
        if gpu_name and measured_on and measured_on.strip().casefold() != gpu_name.strip().casefold():
            note = f"the copy was measured on a {measured_on}, the trace ran on a {gpu_name}: not used"
            gbps = None
        else:
            return {"gbps": gbps, "source": "measured", "gpu": measured_on or gpu_name, "how": how,
                    "note": None}
    else:
        note = how
    spec = spec_bandwidth(gpu_name)
    if spec is not None:
        return {"gbps": spec.gbps, "source": "spec", "gpu": gpu_name,
                "how": f"the vendor's peak for the {spec.name} ({spec.memory}), not measured", "note": note}
    return {"gbps": None, "source": None, "gpu": gpu_name, "how": None,
            "note": f"{note}; and {gpu_name or 'the GPU (unnamed)'} is not in the table of known GPUs"}
