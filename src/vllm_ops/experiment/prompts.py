"""A prompts file for ``vllm bench serve``'s custom dataset, checked before anything restarts.

vLLM 0.32's ``CustomDataset`` (``vllm/benchmarks/datasets/datasets.py``) reads only a file whose
name ends in ``.jsonl``, one JSON object a line, each with a ``prompt``; ``output_tokens`` is read
only with ``--custom-output-len -1``, which the benchmark here never passes (every request makes
the same number of tokens). It shuffles the prompts with ``--seed`` and repeats them to reach
``--num-prompts``. A file it would refuse is refused here, naming the line, so that the refusal
comes before a model load and not after it.
"""

from __future__ import annotations

import json
from pathlib import Path

from .errors import ExperimentInputError

__all__ = ["check_prompts"]


def check_prompts(path: str | Path) -> dict:
    """``{path, prompts, words}`` of a valid prompts file (``words``: the prompts' whitespace-separated
    words, a rough size); ExperimentInputError naming the line and what to do otherwise."""
    p = Path(path)
    if p.suffix != ".jsonl":
        raise ExperimentInputError(f"prompts file {p}: vLLM's custom dataset reads only a .jsonl file (one JSON "
                                   "object a line); rename it or convert it")
    try:
        lines = p.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise ExperimentInputError(f"prompts file {p}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ExperimentInputError(f"prompts file {p}: not UTF-8 text") from None
    prompts = words = 0
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ExperimentInputError(f"prompts file {p}, line {number}: not JSON ({exc.msg}); each line is one "
                                       '{"prompt": "..."} object') from None
        if not isinstance(row, dict) or not isinstance(row.get("prompt"), str) or not row["prompt"].strip():
            raise ExperimentInputError(f"prompts file {p}, line {number}: each line needs a non-empty string "
                                       '"prompt" ({"prompt": "..."})')
        prompts += 1
        words += len(row["prompt"].split())
    if not prompts:
        raise ExperimentInputError(f"prompts file {p} has no prompt: give at least one line "
                                   '{"prompt": "..."}')
    return {"path": str(p), "prompts": prompts, "words": words}
