"""Trace summarizer: where decode time goes in torch.profiler traces of vLLM.

Public API::

    from vllm_ops.traces import SummaryOptions, summarize, to_markdown, TraceInputError
    summary = summarize(["traces/"], SummaryOptions(keep_going=False, top=10))
    print(to_markdown(summary))

See ``summary`` for the semantics and the analyzers, ``options`` for the choices, ``categories`` for
the kernel table and ``reader`` for the streaming parser.
"""

from .categories import DEFAULT_RULES, Classifier, Rule, parse_rules
from .errors import TraceInputError
from .options import SummaryOptions
from .render import to_markdown
from .run import DEFAULT_DECODE_PATTERN, DEFAULT_PREFILL_PATTERN, FALLBACK_DECODE_PATTERN
from .summary import summarize

__all__ = [
    "DEFAULT_DECODE_PATTERN", "DEFAULT_PREFILL_PATTERN", "DEFAULT_RULES", "FALLBACK_DECODE_PATTERN",
    "Classifier", "Rule", "SummaryOptions", "TraceInputError", "parse_rules", "summarize", "to_markdown",
]
