"""Kernel categories: an ordered, documented table that callers can extend.

A GPU activity is classified by its name; the first rule whose regular expression
matches (``re.search``) wins, so order matters:

* collectives come first, because fused kernels such as FlashInfer's
  all-reduce + RMSNorm must count as all-reduce, not as norm;
* ``moe_gemm`` and ``attention`` come before ``gemm``, because MoE and
  FlashAttention kernels carry ``cutlass::gemm::...`` in their template arguments;
* ``norm`` comes before ``quantize`` (a fused norm+quant kernel is a norm) and
  before ``elementwise`` (torch's layer norm lives in ``at::native``).

Memory copies and sets are classified by their trace category (``gpu_memcpy`` and
``gpu_memset``), not by name. A name no rule matches is ``other``.

Callers extend the table with ``extra`` rules, which are tried *before* the
built-in ones; a rule may name a new category or an existing one.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from .errors import TraceInputError

ALLREDUCE = "allreduce"
MEMCPY = "memcpy"
MEMSET = "memset"
OTHER = "other"


@dataclass(frozen=True)
class Rule:
    """One row of the table: kernels whose name matches ``pattern`` are ``category``."""

    category: str
    pattern: str
    note: str = ""


# The built-in table, in the order it is tried. Keep the notes: `--list-categories`
# prints them and the README points here.
DEFAULT_RULES: tuple[Rule, ...] = (
    Rule(ALLREDUCE, r"nccl(?:Dev)?Kernel_AllReduce",
         "NCCL all-reduce (ncclDevKernel_AllReduce_* since 2.19, ncclKernel_AllReduce_* before)"),
    Rule(ALLREDUCE, r"cross_device_reduce",
         "vLLM custom all-reduce (cross_device_reduce_1stage/2stage)"),
    Rule(ALLREDUCE, r"(?i)multimem_all_reduce|one_shot_all_reduce|two_shot_all_reduce",
         "PyTorch symmetric memory all-reduce"),
    Rule(ALLREDUCE, r"(?i)all_?reduce",
         "FlashInfer / TRT-LLM all-reduce (incl. fused all-reduce + norm, lamport), any other all-reduce"),
    Rule("collective", r"(?i)nccl(?:Dev)?Kernel_|all_?gather|reduce_?scatter|all_?to_?all|sendrecv",
         "other collectives: NCCL all-gather, reduce-scatter, broadcast, send/recv, all-to-all"),
    Rule("moe_gemm", r"(?i)marlin_moe|moe_wna16|fused_moe|moe::|^(?:void )?bmm_|routing|expert"
                     r"|topk_?gating|topk_?softmax|grouped_?topk|moe_align|moe_sum|cutlass_moe|grouped_?gemm"
                     r"|_matmul_ogs_",
         "MoE: Marlin MoE, fused_moe, TRT-LLM-gen bmm_* expert GEMMs, Triton MoE (_matmul_ogs_*), routing, "
         "top-k gating, finalize"),
    Rule("attention", r"(?i)flash_fwd|flash_bwd|flash::|flashattn|fmha|attention|attn|paged_?kv"
                      r"|Batch(?:Prefill|Decode)|Single(?:Prefill|Decode)|_mla|mla_|reshape_and_cache|rotary|(?<![a-z])rope(?![a-z])",
         "attention kernels, KV-cache writes (reshape_and_cache) and rotary embedding"),
    Rule("gemm", r"(?i)gemm|gemv|marlin|nvjet|cutlass|cublas|xmma|matmul|scaled_mm|splitKreduce|wgmma|scudnn"
                 r"|^Cijk_",
         "dense GEMM: Marlin W4A16, cuBLAS/cuBLASLt (nvjet, sm90_xmma, splitKreduce), hipBLASLt/Tensile (Cijk_*), "
         "CUTLASS, scaled_mm, cuDNN implicit-GEMM convolutions"),
    Rule("norm", r"(?i)rms_?norm|layer_?norm|group_?norm|batch_?norm|bn_fw|bn_bw|_norm_kernel",
         "RMSNorm, LayerNorm (also fused add + norm, norm + quant)"),
    Rule("quantize", r"(?i)quant",
         "(de)quantization: fp8/int8/fp4 scaled quant, block-scale quantize"),
    Rule("elementwise", r"(?i)elementwise|at::native::|act_and_mul|silu|gelu|relu|softmax|triton_|copy|fill",
         "pointwise and small torch kernels (at::native::*), activations, Triton pointwise, copies"),
)


class Classifier:
    """Classify activity names with ``extra`` rules first, then the built-in table.

    Results are cached per name: a trace repeats a few hundred names millions of times.
    """

    def __init__(self, extra: Iterable[Rule] = (), rules: Sequence[Rule] = DEFAULT_RULES):
        self.rules: tuple[Rule, ...] = tuple(extra) + tuple(rules)
        compiled = []
        for rule in self.rules:
            try:
                compiled.append((rule.category, re.compile(rule.pattern)))
            except re.error as exc:
                raise TraceInputError(
                    f"category {rule.category!r}: invalid regular expression {rule.pattern!r}: {exc}"
                ) from None
        self._compiled = compiled
        self._cache: dict[tuple[str, str], str] = {}

    @property
    def categories(self) -> list[str]:
        """Every category this classifier can return, in table order."""
        seen: list[str] = []
        for name in [r.category for r in self.rules] + [MEMCPY, MEMSET, OTHER]:
            if name not in seen:
                seen.append(name)
        return seen

    def classify(self, name: str, cat: str = "kernel") -> str:
        key = (cat, name)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        if cat == "gpu_memcpy":
            result = MEMCPY
        elif cat == "gpu_memset":
            result = MEMSET
        else:
            result = OTHER
            for category, regex in self._compiled:
                if regex.search(name):
                    result = category
                    break
        self._cache[key] = result
        return result


def parse_rules(spec: object) -> list[Rule]:
    """Turn user input into rules.

    Accepts ``None``; a list of ``"NAME=REGEX"`` strings (the CLI's ``--category``);
    a list of ``{"name": ..., "pattern": ...}`` mappings; or a mapping
    ``{NAME: REGEX or [REGEX, ...]}`` (the filter's ``categories`` option).
    """
    if spec is None:
        return []
    rules: list[Rule] = []
    if isinstance(spec, Mapping):
        for name, patterns in spec.items():
            if isinstance(patterns, str):
                patterns = [patterns]
            if not isinstance(patterns, (list, tuple)):
                raise TraceInputError(f"category {name!r}: expected a regex or a list of regexes")
            rules.extend(_rule(name, p) for p in patterns)
        return rules
    if isinstance(spec, (list, tuple)):
        for item in spec:
            if isinstance(item, str):
                name, sep, pattern = item.partition("=")
                if not sep:
                    raise TraceInputError(f"category rule {item!r}: expected NAME=REGEX")
                rules.append(_rule(name, pattern))
            elif isinstance(item, Mapping):
                rules.append(_rule(item.get("name"), item.get("pattern")))
            else:
                raise TraceInputError(f"category rule {item!r}: expected NAME=REGEX or a name/pattern mapping")
        return rules
    raise TraceInputError(f"categories: expected a list or a mapping, got {type(spec).__name__}")


def _rule(name: object, pattern: object) -> Rule:
    if not isinstance(name, str) or not name.strip():
        raise TraceInputError(f"category rule: the name must be a non-empty string, got {name!r}")
    if not isinstance(pattern, str) or not pattern:
        raise TraceInputError(f"category {name!r}: the pattern must be a non-empty string, got {pattern!r}")
    return Rule(name.strip(), pattern, "user rule")
