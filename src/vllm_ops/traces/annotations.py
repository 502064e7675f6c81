"""Step annotations: which annotation names are engine steps, and what their names say.

Each annotation family is one entry of :data:`FAMILIES`: a name, a regular expression over
the whole annotation name and a parser of its match. The reader keeps every span (CPU
``user_annotation`` and GPU ``gpu_user_annotation``) whose name some family, or the user's
decode pattern, recognizes; nothing else in the reader knows the forms. A new form is one
entry here.

Families (tried in order, first match wins):

* ``vllm`` — vLLM's native form, ``execute_context_{n}({tokens})_generation_{m}({tokens})``,
  optionally ``execute_{T}_context_...``; token fields are digits, possibly with ``_``
  (``(888_788544)``): the first number is the token count of that group.
* ``vllm_detailed`` — ``detailed_trace_annotation`` (vLLM 0.26 and later):
  ``execute_{T}_context_{n}(sq{a}sk{b}sqsq{c}sqsk{d})_generation_{m}(sq..sk..sqsq..sqsk..)``;
  ``sq`` is the sum of query lengths (the group's scheduled tokens), ``sk`` the sum of key
  lengths.
* ``sglang`` — SGLang's form (as TraceLens parses it): ``step[DECODE bs=N ...]``,
  ``step[EXTEND bs=N toks=T ...]`` (a prefill step) or ``step[MIXED bs=N c=n g=m ...]``,
  optionally with the detailed ``c_sq=``/``g_sq=`` (and ``sk``, ``sqsq``, ``sqsk``) fields;
  ``bs`` is the requests in the step.
* ``profiler_step`` — ``ProfilerStep#N`` (torch's ``profiler.step()``): a step of unknown
  content, used as a decode step only when no rank has an engine step of any phase (see
  :mod:`.summary`).

Parsed fields (``StepName``): ``phase`` is ``decode`` (no context request, at least one
generation request), ``prefill`` (context requests only), ``mixed`` (both) or ``empty``
(neither: vLLM annotates idle iterations too; never a step); ``context_requests`` (n) and
``generation_requests`` (m); ``batch_size`` = n + m, the requests in the step;
``scheduled_tokens`` = T where the name gives it, else the sum of the groups' token counts;
``context_tokens`` and ``generation_tokens``: the token counts of the context (prefill) and the
generation (decode) group (vLLM: the group's first number, or its ``sq``; SGLang: ``c_sq``/``g_sq``,
``toks`` of an EXTEND step, ``bs`` of a plain DECODE step); ``key_tokens``: the sum of the decode
requests' key lengths, their context read from the KV cache (the generation group's ``sk`` in vLLM's
detailed form, SGLang's ``g_sk``; vLLM's native form does not give it). Fields a name does not give
are None.
``ENGINE_FAMILIES`` are the families of inference engines (vLLM, SGLang): a step of one of them
says the trace is an engine's, whatever its phase.

A user's ``--decode-pattern`` overrides the families for decode steps: a span whose name it
matches is a decode step (parsed fields where a family also parses the name, else None).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

DECODE, PREFILL, MIXED, EMPTY = "decode", "prefill", "mixed", "empty"
PHASES = (DECODE, PREFILL, MIXED)


@dataclass(frozen=True)
class StepName:
    """What an annotation name says of its step."""

    family: str
    phase: str | None
    context_requests: int | None = None
    generation_requests: int | None = None
    scheduled_tokens: int | None = None
    context_tokens: int | None = None
    generation_tokens: int | None = None
    key_tokens: int | None = None

    @property
    def batch_size(self) -> int | None:
        if self.context_requests is None or self.generation_requests is None:
            return None
        return self.context_requests + self.generation_requests


def _phase(n: int, m: int) -> str:
    if n == 0:
        return DECODE if m > 0 else EMPTY
    return MIXED if m > 0 else PREFILL


def _first_int(text: str) -> int:
    digits = re.match(r"\d+", text)
    return int(digits.group(0)) if digits else 0


def _sq(text: str) -> int:
    hit = re.match(r"sq(\d+)", text)
    return int(hit.group(1)) if hit else 0


def _sk(text: str) -> int | None:
    hit = re.match(r"sq\d+sk(\d+)", text)
    return int(hit.group(1)) if hit else None


def _vllm_parser(family: str, group_tokens: Callable[[str], int],
                 group_keys: Callable[[str], int | None] | None = None) -> Callable[[re.Match], StepName]:
    """The parser of one vLLM form: request counts, the scheduled tokens (T where the name gives
    it, else the sum of the groups' token counts, read by ``group_tokens``) and, where the form
    has them, the generation group's key lengths (``group_keys``)."""

    def parse(m: re.Match) -> StepName:
        n, m_ = int(m["n"]), int(m["m"])
        total = m["total"]
        ctok, gtok = group_tokens(m["ctok"]), group_tokens(m["gtok"])
        tokens = int(total) if total else ctok + gtok
        keys = group_keys(m["gtok"]) if group_keys is not None else None
        return StepName(family, _phase(n, m_), n, m_, tokens, ctok, gtok, keys)

    return parse


def _profiler_step(_m: re.Match) -> StepName:
    return StepName("profiler_step", None)


def _sglang(m: re.Match) -> StepName:
    """``step[MODE bs=N key=value ...]``: DECODE (generation requests only), EXTEND (context
    requests only: a prefill step) or MIXED (``c=``/``g=`` request counts where given)."""
    kv = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", m["body"])}
    mode, bs = m["mode"], kv.get("bs")
    if mode == "DECODE":
        g_tok = kv.get("g_sq", bs)
        return StepName("sglang", DECODE if bs else EMPTY, 0, bs, g_tok, 0, g_tok, kv.get("g_sk"))
    if mode == "EXTEND":
        c_tok = kv.get("toks", kv.get("c_sq"))
        return StepName("sglang", PREFILL if bs else EMPTY, bs, 0, c_tok, c_tok, 0)
    n, m_ = kv.get("c"), kv.get("g")
    c_tok, g_tok = kv.get("c_sq"), kv.get("g_sq")
    tokens = c_tok + g_tok if c_tok is not None and g_tok is not None else kv.get("toks")
    return StepName("sglang", MIXED, n, m_, tokens, c_tok, g_tok, kv.get("g_sk"))


_TOKENS = r"\d+(?:_\d+)*"
_DETAILED = r"sq\d+sk\d+sqsq\d+sqsk\d+"

# name -> (regex over the whole name, parser). Order matters: first match wins.
FAMILIES: tuple[tuple[str, re.Pattern, Callable[[re.Match], StepName]], ...] = (
    ("vllm", re.compile(
        rf"^execute_(?:(?P<total>\d+)_)?context_(?P<n>\d+)\((?P<ctok>{_TOKENS})\)"
        rf"_generation_(?P<m>\d+)\((?P<gtok>{_TOKENS})\)$"), _vllm_parser("vllm", _first_int)),
    ("vllm_detailed", re.compile(
        rf"^execute_(?:(?P<total>\d+)_)?context_(?P<n>\d+)\((?P<ctok>{_DETAILED})\)"
        rf"_generation_(?P<m>\d+)\((?P<gtok>{_DETAILED})\)$"), _vllm_parser("vllm_detailed", _sq, _sk)),
    ("sglang", re.compile(r"^step\[(?P<mode>DECODE|EXTEND|MIXED)\b(?P<body>[^\]]*)\]$"), _sglang),
    ("profiler_step", re.compile(r"^ProfilerStep#\d+$"), _profiler_step),
)
FALLBACK_FAMILY = "profiler_step"
ENGINE_FAMILIES = ("vllm", "vllm_detailed", "sglang")


def parse_step_name(name: str) -> StepName | None:
    """The first family that recognizes ``name``, parsed; None for any other annotation."""
    for _family, regex, parse in FAMILIES:
        hit = regex.match(name)
        if hit:
            return parse(hit)
    return None


class StepMatcher:
    """Decides, per annotation name, whether it is a step and of which phase.

    By default the families above decide. A user's ``decode_pattern`` (``prefill_pattern``)
    replaces them for decode (prefill) steps: a name it matches (``re.search``) is a step of
    that phase, with the fields a family parses from the name where one does, and a name it
    does not match is never a step of that phase. Mixed steps come from the families only.
    ``empty`` steps are never steps. Results are cached per name; the cache is bounded, since
    detailed names differ from step to step.
    """

    _CACHE_MAX = 4096

    def __init__(self, decode_pattern: str | None = None, prefill_pattern: str | None = None):
        self.patterns = {DECODE: re.compile(decode_pattern) if decode_pattern else None,
                         PREFILL: re.compile(prefill_pattern) if prefill_pattern else None}
        self._cache: dict[str, StepName | None] = {}

    def __call__(self, name: str) -> StepName | None:
        hit = self._cache.get(name, False)
        if hit is not False:
            return hit
        parsed = parse_step_name(name)
        for phase, regex in self.patterns.items():
            if regex is None:
                continue
            if regex.search(name):
                parsed = StepName(parsed.family if parsed else "pattern", phase,
                                  *(() if parsed is None else (parsed.context_requests,
                                                               parsed.generation_requests,
                                                               parsed.scheduled_tokens,
                                                               parsed.context_tokens,
                                                               parsed.generation_tokens,
                                                               parsed.key_tokens)))
                break
            if parsed is not None and (parsed.phase == phase or (phase == DECODE and parsed.phase is None)):
                parsed = None
        if parsed is not None and parsed.phase == EMPTY:
            parsed = None
        if len(self._cache) < self._CACHE_MAX:
            self._cache[name] = parsed
        return parsed
