"""The tune's plan: which server variants test the verdict's next experiments, which of them the
all-reduce floor can pre-screen in seconds, and what the plan costs in model loads and minutes.

Input, one of:

- the verdict's ``next_tests`` (:mod:`vllm_ops.traces.experiments`: ``{text, test, variants, sweeps,
  ledger_part, expected_ms}`` each), with the summary's ledger where it has one
  (:func:`vllm_ops.traces.experiments.with_ledger` fills ``expected_ms``);
- a plan file the user edits: ``{tests: [...]}`` in that same form (an earlier tune's plan.json has
  it), or ``{variants: [...], sweeps: [...]}`` in the experiment's format, as
  ``vllm_experiment_variants`` and ``vllm_experiment_sweeps``.

Definitions (:func:`build_plan`):

- **candidates**: every variant of every test (sweeps expanded by the experiment's
  :func:`~vllm_ops.experiment.sweep.expand`), in the tests' order, each checked as any variant is
  (:func:`vllm_ops.validate.variant_errors` over the unit's environment). A speculative-decoding
  test gets the configured method instead of n-gram where one is given (a draft or EAGLE model). A
  candidate whose settings are the unit's own (its environment already the unit's, no arguments)
  is left out, with that reason (``dropped``).
- **the served all-reduce** (:func:`served_allreduce`, ``served_allreduce`` in the plan): the path
  the running service's decode all-reduce takes, named by the trace's kernels (the summary's
  all-reduce time and the part of it in NCCL's kernels): ``nccl`` when NCCL's kernels hold at
  least :data:`NCCL_SERVED_SHARE` of it, ``other`` (vLLM's custom, symmetric-memory or FlashInfer
  all-reduce) otherwise, null when no trace shows an all-reduce (a plan file and no summary of
  the host, or one GPU).
- **pre-screenable** (``prescreen``): a candidate that changes only what the floor benchmark runs
  as the server would, on a service whose all-reduce is NCCL's: NCCL variables (``NCCL_*``) and
  the all-reduce path switches set to the values that keep vLLM on NCCL
  (:data:`NCCL_PATH_SWITCHES`). The benchmark times NCCL itself, so a candidate with arguments
  (``--disable-custom-all-reduce``, speculative decoding, ...), another variable, a path switch
  that takes vLLM off NCCL, or any candidate where the served all-reduce is not (known to be)
  NCCL's, can only be judged by a load; ``why`` says so.
- **loads**: at least ``loads_min`` = the candidates that cannot be pre-screened, at most
  ``loads_max`` = min(``max_loads``, all candidates). The plan is **over the budget** when
  ``loads_min`` exceeds ``max_loads``: even if every pre-screen failed, its other variants could
  not all be loaded; it is refused with its cost (check mode and a real run alike).
- **cost** (:func:`cost`): model loads = the profile's (1 on the restart path, 0 live or with a plan
  file) + the variants' (``loads_max`` at most) + 1 (the normal service back, or the winner
  deployed); minutes of downtime = loads x the host's last measured load
  (:func:`vllm_ops.loadcost.last_load`: the loads the newest job recorded, phase by phase, else a tune's
  timed loads, else a job's downtime gaps).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from ..experiment import ExperimentInputError, expand
from ..experiment.settings import settings_text
from ..records.summary import checked
from ..traces.experiments import TESTS
from ..validate import variant_errors
from .errors import TuneInputError

SCHEMA = "vllm-ops/tune-plan/1"
# Environment settings under which vLLM's all-reduce stays NCCL's, as the floor benchmark runs it.
NCCL_PATH_SWITCHES = {"VLLM_ALLREDUCE_USE_FLASHINFER": "0", "VLLM_ALLREDUCE_USE_SYMM_MEM": "0"}
# The variables that choose vLLM's all-reduce path.
PATH_SWITCH_PREFIX = "VLLM_ALLREDUCE_"
# The share of the decode all-reduce time in NCCL's kernels from which the served all-reduce is NCCL's.
NCCL_SERVED_SHARE = 0.95
_TEST_KEYS = ("text", "test", "variants", "sweeps", "ledger_part", "expected_ms")
_OTHER_PATHS = "vLLM's custom, symmetric-memory or FlashInfer all-reduce"


def served_allreduce(summary: Mapping | None, where: str | None = None) -> dict:
    """``{path, words}``: the all-reduce the traced service ran (see the module's docstring); ``where``
    names the summary in the words."""
    if summary is None:
        return {"path": None, "words": "not known: no trace summary of this host"}
    ar = checked(summary).get("allreduce") or {}
    total, nccl = ar.get("ms_per_step_mean"), ar.get("nccl_ms_per_step_mean")
    source = f" ({where})" if where else ""
    if not isinstance(total, (int, float)) or not total or not isinstance(nccl, (int, float)):
        return {"path": None, "words": f"not known: the trace shows no decode all-reduce{source}"}
    if nccl >= NCCL_SERVED_SHARE * total:
        return {"path": "nccl", "words": f"NCCL's (its kernels hold {nccl / total:.0%} of the decode all-reduce"
                                         f"{source})"}
    return {"path": "other", "words": f"not NCCL's ({_OTHER_PATHS}: NCCL's kernels hold {nccl / total:.0%} of the "
                                      f"decode all-reduce{source})"}


def prescreen_why(candidate: Mapping, served: str | None) -> str | None:
    """Why the floor benchmark cannot pre-screen ``candidate`` on a service whose all-reduce takes
    the path ``served`` (:func:`served_allreduce`), or None when it can."""
    if candidate.get("extra_args"):
        return (f"it passes arguments ({' '.join(candidate['extra_args'])}), which the floor benchmark does not run: "
                "only a load judges it")
    env = candidate.get("environment") or {}
    others = [k for k in env if not k.startswith("NCCL_") and not k.startswith(PATH_SWITCH_PREFIX)]
    if others:
        return (f"it sets {', '.join(others)}, which the floor benchmark (NCCL alone) does not run as the server "
                "would: only a load judges it")
    off_nccl = [k for k, v in env.items() if k.startswith(PATH_SWITCH_PREFIX) and NCCL_PATH_SWITCHES.get(k) != str(v)]
    if off_nccl:
        return (f"it sets {', '.join(f'{k}={env[k]}' for k in off_nccl)}, which can take vLLM's all-reduce off NCCL "
                "(the floor benchmark times NCCL alone): only a load judges it")
    if not env:
        return "it changes nothing the floor benchmark runs"
    if served != "nccl":
        why = ("is not known (no trace shows it)" if served is None
               else f"is not NCCL's ({_OTHER_PATHS})")
        return (f"the served all-reduce {why}, and the floor benchmark times NCCL alone: its NCCL settings may not "
                "touch what the server runs, so only a load judges it")
    return None


def _tests(source: object, where: str) -> list[dict]:
    """The tests of a plan source: a list of next_tests, or a mapping with tests, or variants/sweeps."""
    if isinstance(source, Mapping) and "tests" in source:
        source = source["tests"]
    elif isinstance(source, Mapping):
        unknown = sorted(set(source) - {"variants", "sweeps", "schema"})
        if unknown:
            raise TuneInputError(f"{where}: unknown keys {', '.join(unknown)}; a plan file has tests, or variants "
                                 "and sweeps (the experiment's format)")
        source = [{"text": "the plan file's variants and sweeps", "test": "plan file",
                   "variants": list(source.get("variants") or []), "sweeps": list(source.get("sweeps") or [])}]
    if not isinstance(source, list):
        raise TuneInputError(f"{where}: expected a list of tests, or a mapping with tests or variants/sweeps")
    out = []
    for i, t in enumerate(source):
        if not isinstance(t, Mapping):
            raise TuneInputError(f"{where}: tests[{i}] must be a mapping {{text, variants, sweeps}}, got {t!r}")
        unknown = sorted(set(t) - set(_TEST_KEYS) - {"candidates"})
        if unknown:
            raise TuneInputError(f"{where}: tests[{i}] has unknown keys {', '.join(unknown)}; a test has "
                                 f"{', '.join(_TEST_KEYS)}")
        for key in ("variants", "sweeps"):
            if not isinstance(t.get(key) or [], list):
                raise TuneInputError(f"{where}: tests[{i}].{key} must be a list, got {t.get(key)!r}")
        expected = t.get("expected_ms")
        if expected is not None and (isinstance(expected, bool) or not isinstance(expected, (int, float))):
            raise TuneInputError(f"{where}: tests[{i}].expected_ms must be a number of milliseconds or null")
        sweeps = list(t.get("sweeps") or [])
        # JSON files sort their keys (summary.json, plan.json): a sweep of the catalogue, unchanged, takes its
        # axes in the catalogue's order again, so that its variants keep their names and order wherever it came from
        known = TESTS.get(t.get("test")) if isinstance(t.get("test"), str) else None
        if known and sweeps == known["sweeps"]:
            sweeps = [dict(sw) for sw in known["sweeps"]]
        out.append({"text": str(t.get("text") or f"test {i + 1}"), "test": t.get("test"),
                    "variants": list(t.get("variants") or []), "sweeps": sweeps,
                    "ledger_part": t.get("ledger_part"), "expected_ms": expected})
    return out


def _speculative(candidate: dict, config: Mapping) -> dict:
    method = str(config.get("method") or "")
    name = f"spec-{method.replace('_', '-')}" if method else "spec"
    return {**candidate, "name": name, "extra_args": ["--speculative-config", json.dumps(dict(config), sort_keys=True)]}


def build_plan(source: object, *, unit_environment: Mapping, unit_args: Sequence[str], max_loads: int,
               speculative_config: Mapping | None = None, where: str = "plan", origin: Mapping | None = None,
               served: Mapping | None = None) -> dict:
    """The plan (see the module's docstring) of ``source``; ``served``: :func:`served_allreduce`'s record
    (default: not known). TuneInputError on bad input."""
    served = dict(served) if served is not None else served_allreduce(None)
    if isinstance(max_loads, bool) or not isinstance(max_loads, int) or max_loads < 0:
        raise TuneInputError(f"vllm_tune_max_loads must be a whole number of loads, 0 or more, got {max_loads!r}")
    unit_env = {str(k): str(v) for k, v in (unit_environment or {}).items() if v is not None}
    tests = _tests(source, where)
    candidates, dropped, manual = [], [], []
    for index, test in enumerate(tests):
        try:
            variants = [*test["variants"], *(expand(test["sweeps"]) if test["sweeps"] else [])]
        except ExperimentInputError as exc:
            raise TuneInputError(f"{where}: tests[{index}] ({test['text']}): {exc}") from None
        if not variants:
            manual.append(test["text"])
        names = []
        for v in variants:
            if not isinstance(v, Mapping):
                raise TuneInputError(f"{where}: tests[{index}] ({test['text']}): a variant must be a mapping, "
                                     f"got {v!r}")
            c = {"name": v.get("name"), "environment": dict(v.get("environment") or {}),
                 "extra_args": [str(a) for a in v.get("extra_args") or []], "test": test["test"], "test_index": index,
                 "expected_ms": test["expected_ms"]}
            if test["test"] == "speculative" and speculative_config:
                c = _speculative(c, speculative_config)
            if all(unit_env.get(k) == (None if x is None else str(x)) for k, x in c["environment"].items()) \
                    and not c["extra_args"]:
                dropped.append({"name": c["name"], "why": "its settings are the unit's own"})
                continue
            # The same variant from two experiments (the verdict's advice and a ledger lever on the same part):
            # one candidate, one load at most.
            twin = next((p for p in candidates if p["name"] == c["name"] and p["environment"] == c["environment"]
                         and p["extra_args"] == c["extra_args"]), None)
            if twin is not None:
                names.append(c["name"])
                continue
            c["prescreen_why"] = prescreen_why(c, served["path"])
            c["prescreen"] = c["prescreen_why"] is None
            c["settings"] = settings_text(_changes(c["environment"], unit_env), c["extra_args"])
            candidates.append(c)
            names.append(c["name"])
        test["candidates"] = names
    errors = variant_errors(where, [{k: c[k] for k in ("name", "environment", "extra_args")} for c in candidates],
                            unit_env, server=True)
    if errors:
        raise TuneInputError(" ".join(errors) + " Edit the plan (vllm_tune_plan_file) and run again.")
    unscreened = [c["name"] for c in candidates if not c["prescreen"]]
    loads_min, loads_max = len(unscreened), min(max_loads, len(candidates))
    over = loads_min > max_loads
    return {
        "schema": SCHEMA, "origin": dict(origin or {}), "served_allreduce": served,
        "tests": tests, "candidates": candidates, "dropped": dropped,
        "manual": manual, "prescreen": [c["name"] for c in candidates if c["prescreen"]], "unscreened": unscreened,
        # allreduce_bench_variants of the pre-screen: the candidates' environments laid over the unit's
        "prescreen_variants": [{"name": c["name"], "environment": c["environment"]} for c in candidates
                               if c["prescreen"]],
        "budget": {"max_loads": max_loads, "loads_min": loads_min, "loads_max": max(loads_min, loads_max),
                   "over": over,
                   "message": (f"the plan needs at least {loads_min} variant load(s) ({', '.join(unscreened)}: "
                               f"no floor can pre-screen them) and vllm_tune_max_loads is {max_loads}: raise "
                               "vllm_tune_max_loads, or drop variants from the plan (vllm_tune_plan_file; this plan "
                               "as a file is the tune's plan.json)") if over else None},
    }


def _changes(environment: Mapping, unit_env: Mapping) -> dict:
    """What a variant's environment changes: the variables whose value is not the unit's."""
    return {k: v for k, v in environment.items() if unit_env.get(k) != (None if v is None else str(v))}


def cost(plan: Mapping, profile_loads: int, load: Mapping) -> dict:
    """``{profile, variants_min, variants_max, final, loads_min, loads_max, load_s, load_source,
    downtime_min_s, downtime_max_s}``: the model loads the plan costs, and in seconds of downtime at
    the host's last measured load (None when none was measured)."""
    b = plan["budget"]
    loads_min, loads_max = profile_loads + b["loads_min"] + 1, profile_loads + b["loads_max"] + 1
    s = load.get("seconds")
    return {"profile": profile_loads, "variants_min": b["loads_min"], "variants_max": b["loads_max"], "final": 1,
            "loads_min": loads_min, "loads_max": loads_max, "load_s": s, "load_source": load.get("source"),
            "downtime_min_s": None if s is None else round(loads_min * s, 1),
            "downtime_max_s": None if s is None else round(loads_max * s, 1)}


def plan_words(plan: Mapping, c: Mapping) -> str:
    """The plan and its cost in one paragraph, for check mode and the play's output."""
    origin = plan.get("origin") or {}
    head = f"plan from {origin.get('words') or 'the plan given'}: "
    n, pre = len(plan["candidates"]), len(plan["prescreen"])
    if not n:
        parts = ["nothing to load (no next experiment is a server variant)"]
    else:
        screened = ", ".join(plan["prescreen"])
        parts = [f"{n} candidate(s)" + (f", {pre} pre-screened first with the all-reduce floor ({screened}) in "
                                        "seconds each, only those that beat the unit's settings beyond its noise "
                                        "kept" if pre else ""),
                 f"then at most {plan['budget']['max_loads']} variant load(s), best first"
                 + (f" (at least {plan['budget']['loads_min']}: {', '.join(plan['unscreened'])} cannot be "
                    "pre-screened)" if plan["unscreened"] else "")]
    served = plan.get("served_allreduce")
    # said where it decided something: a candidate pre-screened, or one loaded for want of NCCL's all-reduce
    if served and (pre or any((x.get("prescreen_why") or "").startswith("the served all-reduce")
                              for x in plan["candidates"])):
        parts.append(f"the served all-reduce is {served['words']}"
                     + ("" if served.get("path") == "nccl" else ": no NCCL-only candidate is pre-screened"))
    if plan["manual"]:
        parts.append("not a variant, left to you: " + "; ".join(plan["manual"]))
    minutes = ("" if c["load_s"] is None else
               f", about {c['downtime_min_s'] / 60:.1f}-{c['downtime_max_s'] / 60:.1f} min of downtime at "
               f"{c['load_s']:.0f} s a load ({c['load_source']})")
    if c["load_s"] is None:
        minutes = f"; minutes unknown: {c['load_source']} (a Kimi-K2.5 load is about 30 min)"
    loads = (f"{c['loads_min']}" if c["loads_min"] == c["loads_max"] else f"{c['loads_min']}-{c['loads_max']}")
    parts.append(f"cost {loads} model load(s) ({c['profile']} profile, {c['variants_min']}-{c['variants_max']} "
                 f"variant(s), 1 back to the normal service){minutes}")
    return head + "; ".join(parts)
