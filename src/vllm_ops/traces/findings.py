"""What the traces hold, said plainly: which steps are decode steps, whose trace it is, and what
to run next when there is nothing to judge.

Definitions:

* **Engine** (``engine``): ``vllm`` when a rank has a step of a vLLM annotation family (any
  phase, :mod:`.annotations`), an annotation name of vLLM's ``execute_..._context_..`` form, or a
  top-level ``vllm_version``; ``sglang`` for SGLang's ``step[...]`` steps; else null (a trace of
  another program, such as a training loop). The advisor gives engine settings only for a known
  engine.
* **API** (``api``): ``HIP`` when most launch calls are ``hip*`` ones, ``CUDA`` when there are
  launch calls, else null; messages name the graphs and activities of that API.
* **Step set** (:func:`choose_steps`): the annotation families' steps (or the user's
  ``--decode-pattern``). Only without a pattern, and only when no rank has an engine step of
  any phase, are ``ProfilerStep#N`` spans used as steps (the *fallback*), and not even then when
  annotation names seen name a phase (``decode``, ``prefill``, ``extend``, ``generat``): a
  ProfilerStep would then hold those phases mixed, and the summary suggests the pattern instead.
* **Suggested pattern** (:func:`suggest_pattern`): of the annotation names seen at least twice,
  the most frequent that names a decode phase (else one that names a step), as an anchored
  regex with the digit runs as ``\\d+``.
* **Nothing to judge** (:func:`nothing_to_judge`): why no verdict can be given, and the
  command or setting that gets one, in this order: no GPU kernels; no decode steps (mixed
  steps reported as mixed with their decode requests, GPU time and decode share of their
  tokens; prefill steps only; or no step at all, with the names seen and a pattern to try);
  decode steps without GPU activity; graph launches without their kernels. The *decode share*
  of mixed steps is their generation tokens over their scheduled tokens, where the names give
  both.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence

from .annotations import MIXED, PREFILL

_PHASE_WORD = re.compile(r"(?i)decode|prefill|extend|generat")
_DECODE_WORD = re.compile(r"(?i)decode|generat")
_STEP_WORD = re.compile(r"(?i)step|iter")
_VLLM_NAME = re.compile(r"^execute_(?:N_)?context_N\(")
_SGLANG_NAME = re.compile(r"^step\[(?:DECODE|EXTEND|MIXED)\b")
_NOT_STEPS = re.compile(r"^(?:nccl:|## |ProfilerStep#|c10d::|record_param_comms)")
# Why a trace of ProfilerStep#N spans that nothing names vLLM's or SGLang's gets no engine advice.
NOT_AN_ENGINE = ("not an inference engine's trace: its steps are ProfilerStep#N spans and nothing in it is vLLM's or "
                 "SGLang's (no engine step annotation, no vllm_version), so the figures are given and no engine advice")
MIXED_PATTERNS = {"vllm": "_generation_[1-9]", "sglang": r"^step\[(DECODE|MIXED)", None: "_generation_[1-9]"}


def names_seen(r: Mapping) -> list[tuple[str, int]]:
    """The annotation names a rank's trace holds (normalized), GPU ones first."""
    seen: dict[str, int] = {}
    for name, count in list(r.get("gpu_annotation_names") or []) + list(r.get("cpu_annotation_names") or []):
        seen.setdefault(name, count)
    return list(seen.items())


def engine(ranks: Sequence[Mapping]) -> str | None:
    """``vllm``, ``sglang`` or None (see the module docstring)."""
    families = {s.get("family") for r in ranks for st in (r.get("sets") or {}).values() for s in st["steps"]}
    names = [n for r in ranks for n, _ in names_seen(r)]
    if families & {"vllm", "vllm_detailed"} or any(r.get("vllm_version") for r in ranks) or \
            any(_VLLM_NAME.match(n) for n in names):
        return "vllm"
    if "sglang" in families or any(_SGLANG_NAME.match(n) for n in names):
        return "sglang"
    return None


def api(ranks: Sequence[Mapping]) -> str | None:
    """``CUDA``, ``HIP`` or None, from the launch calls of every rank."""
    cuda = sum((r.get("launch_apis") or {}).get("CUDA", 0) for r in ranks)
    hip = sum((r.get("launch_apis") or {}).get("HIP", 0) for r in ranks)
    return "HIP" if hip > cuda else "CUDA" if cuda else None


def suggest_pattern(ranks: Sequence[Mapping]) -> str | None:
    """An anchored regex for the step annotations the traces seem to use (see the docstring)."""
    counts: dict[str, int] = {}
    for r in ranks:
        for name, count in names_seen(r):
            if count >= 2 and not _NOT_STEPS.match(name):
                counts[name] = max(counts.get(name, 0), count)
    for word in (_DECODE_WORD, _STEP_WORD):
        hits = sorted((n for n in counts if word.search(n)), key=lambda n: (-counts[n], n))
        if hits:
            return "^" + re.sub(r"(?<![A-Za-z])N(?![A-Za-z])", r"\\d+", re.escape(hits[0]).replace(r"\ ", " ")) + "$"
    return None


def choose_steps(ranks: Sequence[Mapping], decode_pattern: str | None) -> dict:
    """``{key, fallback, phase_names}``: which of the reader's step sets to use (``primary``: the
    families or the pattern; ``fallback``: ProfilerStep#N), and the phase-like names that kept
    the fallback off."""
    has_steps = any((r["sets"].get("primary") or {}).get("steps") for r in ranks)
    has_fallback = any(r["sets"].get("fallback") for r in ranks)
    phase_names = sorted({n for r in ranks for n, _ in names_seen(r) if _PHASE_WORD.search(n)
                          and not _NOT_STEPS.match(n)})
    use = decode_pattern is None and not has_steps and has_fallback and not phase_names
    return {"key": "fallback" if use else "primary", "fallback": use,
            "phase_names": phase_names if decode_pattern is None and not has_steps and has_fallback else []}


def command(paths: Sequence[str], *options: str) -> str:
    """``vllm-trace-summary PATHS OPTIONS`` as a user would type it."""
    return " ".join(["vllm-trace-summary", *(shlex.quote(p) for p in paths), *options])


def _names_text(r: Mapping) -> str:
    return ", ".join(f"{n} x{c}" for n, c in names_seen(r)) or "none at all"


def nothing_to_judge(ranks: Sequence[Mapping], pattern: str, user_pattern: bool, paths: Sequence[str],
                     api_name: str | None, engine_name: str | None) -> tuple[str, list[str]] | None:
    """``(reason, next)`` when the traces hold nothing to judge, else None (see the docstring).
    ``ranks`` are the reader's rank dicts with their chosen step set (``set``, ``decode``)."""
    gpu = [r for r in ranks if r["gpu_kernels"] > 0]
    graphs = "HIP graphs" if api_name == "HIP" else "CUDA graphs"
    if not gpu:
        return ("no GPU kernel events in the traces",
                ["profile with GPU activities recorded (torch.profiler activities CPU and CUDA"
                 + ("; ProfilerActivity.CUDA records HIP kernels on ROCm" if api_name == "HIP" else "") + ")"])
    if not any(r["decode"] for r in gpu):
        steps = [s for r in gpu for s in r["set"]["steps"]]
        mixed = [s for s in steps if s["phase"] == MIXED]
        prefill = [s for s in steps if s["phase"] == PREFILL]
        if mixed:
            dec = sum(s["generation_requests"] or 0 for s in mixed)
            pre = sum(s["context_requests"] or 0 for s in mixed)
            busy = sum(s["busy_ms"] or 0.0 for s in mixed)
            tok = [(s["generation_tokens"], s["scheduled_tokens"]) for s in mixed]
            share = (sum(g for g, _ in tok) / sum(t for _, t in tok)
                     if all(g is not None and t for g, t in tok) else None)
            reason = (f"no decode-only steps: {len(mixed)} mixed steps (prefill and decode requests in one step) hold "
                      f"the decode work: {dec} decode requests beside {pre} prefill requests, {busy:.0f} ms of GPU work"
                      + (f", decode {100 * share:.0f}% of their tokens" if share is not None else ""))
            pattern_ = shlex.quote(MIXED_PATTERNS.get(engine_name, MIXED_PATTERNS[None]))
            return reason, [f"judge the mixed steps as steps: {command(paths, '--decode-pattern', pattern_)}",
                            "or profile once every prompt is in (start the profiler after the requests' first tokens) "
                            "to capture decode-only steps"]
        if prefill:
            names = sorted({s["name"] for s in prefill})
            return (f"no decode steps: the capture holds only prefill steps ({len(prefill)}: "
                    f"{', '.join(names[:2])}{', ...' if len(names) > 2 else ''})",
                    ["profile while the requests decode: more output tokens each, the profiler started after their "
                     "first token"])
        suggested = suggest_pattern(gpu)
        seen = "; ".join(f"rank {r['rank']}: {_names_text(r)}" for r in gpu[:2])
        reason = f"no decode steps match '{pattern}'; annotation names seen: {seen}"
        if suggested and not (user_pattern and suggested == pattern):
            return reason, [f"name the decode steps: {command(paths, '--decode-pattern', shlex.quote(suggested))}"]
        return reason, ["name the decode steps' annotation with --decode-pattern REGEX (the names seen are above)"]
    measured = [r for r in gpu if r["decode"]]
    if not any(s["activities"] for r in measured for s in r["decode"]):
        n = sum(len(r["decode"]) for r in measured)
        return (f"{n} decode steps, but no GPU activity starts inside them",
                ["profile with GPU activities recorded (torch.profiler activities CPU and CUDA"
                 + ("; ProfilerActivity.CUDA records HIP kernels on ROCm" if api_name == "HIP" else
                    f", and the kernels that {graphs} replay") + ")"])
    if any(r["graph_launches_without_activity"] for r in measured):
        return (f"{graphs[:-1]} launches without recorded kernels: the trace misses the kernels replayed from "
                "graphs, so busy time is undercounted",
                [f"profile with the kernels of {graphs} traced (a recent CUPTI/roctracer), or once with "
                 "--enforce-eager to compare" if engine_name == "vllm" else
                 f"profile with the kernels of {graphs} traced (a recent CUPTI/roctracer)"])
    return None
