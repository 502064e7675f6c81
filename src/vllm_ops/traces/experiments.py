"""The data form of the advisor's next experiments: what runs each one, beside its text.

A verdict's ``next_tests[i]`` is the data form of its ``next[i]`` (:func:`data_form`)::

    {text, test, variants: [VARIANT], sweeps: [SWEEP], ledger_part, expected_ms}

- ``test``: the name of the test in :data:`TESTS`, or None for an experiment that is no server
  variant (a check by hand, a fetch, another profile): then ``variants`` and ``sweeps`` are empty.
- ``variants`` and ``sweeps``: in the experiment's own format (``vllm_experiment_variants``, each
  ``{name, environment, extra_args}``; ``vllm_experiment_sweeps``, each ``{name, environment: {VAR:
  [values]}, options: {--flag: [values]}}``, which :func:`vllm_ops.experiment.sweep.expand` turns into
  variants). Every one passes the checks of a variant (:func:`vllm_ops.validate.variant_errors`;
  ``tests/unit/traces/test_trace_experiments.py`` runs them).
- ``ledger_part``: the part of the decode ledger's step (:data:`vllm_ops.ledger.ledger.PARTS`) the
  test goes after, or None (speculative decoding changes the tokens per step, not one part).
- ``expected_ms``: the milliseconds of that part above its floor, which is the most the test can
  recover, where the summary has a ledger (:func:`with_ledger`), else None.

The tests (vLLM 0.32's arguments and environment, read in its CPU build's source):

- ``nccl-sweep``: :data:`NCCL_SWEEP`, the sweep of ``examples/experiments/nccl-sweep.yml`` (six
  variants; a test keeps the two equal);
- ``allreduce-paths``: the variants of ``examples/experiments/allreduce-paths.yml`` (each takes
  one all-reduce implementation away);
- ``async-scheduling``: ``--async-scheduling`` (on by default in 0.32 where it is compatible: the
  variant forces it, and fails to load where it is not);
- ``cuda-graphs``: ``--no-enforce-eager`` (vLLM's boolean flags take ``--no-``; the last of the
  two on the command line wins, so this undoes an ``--enforce-eager`` of the unit);
- ``speculative``: n-gram speculation (:data:`NGRAM`; a draft or EAGLE model where one is
  configured: the tune swaps it in);
- ``max-num-seqs``: ``--max-num-seqs`` 128 and 512, more or fewer requests per step.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

NCCL_SWEEP = {"name": "nccl", "environment": {"NCCL_PROTO": ["LL", "LL128", "Simple"], "NCCL_MAX_NCHANNELS": [8, 16],
                                             "VLLM_ALLREDUCE_USE_FLASHINFER": "0"}}
NGRAM = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4, "prompt_lookup_min": 2}

TESTS: dict[str, dict] = {
    "nccl-sweep": {"sweeps": [NCCL_SWEEP], "variants": [], "ledger_part": "allreduce_transfer"},
    "allreduce-paths": {"sweeps": [], "ledger_part": "allreduce_transfer", "variants": [
        {"name": "no-custom-all-reduce", "environment": {}, "extra_args": ["--disable-custom-all-reduce"]},
        {"name": "no-flashinfer-all-reduce", "environment": {"VLLM_ALLREDUCE_USE_FLASHINFER": "0"}, "extra_args": []},
        {"name": "nccl-only", "environment": {"VLLM_ALLREDUCE_USE_FLASHINFER": "0"},
         "extra_args": ["--disable-custom-all-reduce"]}]},
    "async-scheduling": {"sweeps": [], "ledger_part": "host", "variants": [
        {"name": "async-scheduling", "environment": {}, "extra_args": ["--async-scheduling"]}]},
    "cuda-graphs": {"sweeps": [], "ledger_part": "gpu_idle", "variants": [
        {"name": "cuda-graphs", "environment": {}, "extra_args": ["--no-enforce-eager"]}]},
    "speculative": {"sweeps": [], "ledger_part": None, "variants": [
        {"name": "ngram", "environment": {}, "extra_args": ["--speculative-config", json.dumps(NGRAM)]}]},
    "max-num-seqs": {"variants": [], "ledger_part": None,
                     "sweeps": [{"name": "max-num-seqs", "options": {"--max-num-seqs": [128, 512]}}]},
}


def sweep_words(sweep: Mapping = NCCL_SWEEP) -> str:
    """A sweep's axes in words: ``NCCL_PROTO LL / LL128 / Simple x NCCL_MAX_NCHANNELS 8 / 16``."""
    axes = [(k, v) for table in (sweep.get("environment") or {}, sweep.get("options") or {})
            for k, v in table.items() if isinstance(v, list)]
    return " x ".join(f"{k} {' / '.join(str(x) for x in v)}" for k, v in axes)


def data_form(text: str, test: str | None) -> dict:
    """The data form of one next experiment (see the module's docstring); a copy, so that a
    caller may change it."""
    if test is not None and test not in TESTS:
        raise KeyError(f"no test named {test!r}; the tests are {', '.join(TESTS)}")
    spec = TESTS.get(test) or {"variants": [], "sweeps": [], "ledger_part": None}
    return {"text": text, "test": test, "variants": json.loads(json.dumps(spec["variants"])),
            "sweeps": json.loads(json.dumps(spec["sweeps"])), "ledger_part": spec["ledger_part"],
            "expected_ms": None}


def with_ledger(next_tests: list[Mapping], ledger: Mapping | None, rank: int | None = None) -> list[dict]:
    """``next_tests`` with ``expected_ms`` from the decode ledger where it has the test's part: the
    largest ``recoverable_ms`` of a lever on that part (the ledger's ``levers``, at its top or per rank;
    only ``rank``'s with a rank), else the part's ``above_floor_ms`` in a rank's ``parts``. Without a
    ledger, or for a part it did not measure, ``expected_ms`` stays None: never a guess."""
    levers: dict[str, float] = {}
    parts: dict[str, float] = {}
    if isinstance(ledger, Mapping):
        ranks = [r for r in ledger.get("ranks") or [] if isinstance(r, Mapping)
                 and (rank is None or r.get("rank") == rank)]
        for lever in [*(ledger.get("levers") or []), *(lv for r in ranks for lv in r.get("levers") or [])]:
            if isinstance(lever, Mapping) and isinstance(lever.get("recoverable_ms"), (int, float)):
                levers[lever["part"]] = max(levers.get(lever["part"], 0.0), float(lever["recoverable_ms"]))
        for part in (p for r in ranks for p in r.get("parts") or []):
            if isinstance(part, Mapping) and isinstance(part.get("above_floor_ms"), (int, float)):
                parts[part["part"]] = max(parts.get(part["part"], 0.0), float(part["above_floor_ms"]))
    found = {**parts, **levers}
    out = []
    for entry in next_tests:
        part = entry.get("ledger_part")
        out.append({**entry, "expected_ms": round(found[part], 4) if part in found else entry.get("expected_ms")})
    return out
