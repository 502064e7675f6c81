"""Fixtures: experiment directories written in tmp_path (experiment.json + small bench JSONs).

The fixture experiment (``fixture_dir``), two concurrencies (1, 8), three repeats, noise floor 1%:

- baseline: median TPOT at 1 of [10.0, 10.1, 9.9] (start) and [10.0, 10.05, 9.95] (end); output
  throughput at 8 of [1000, 1010, 990] and [1000, 1005, 995];
- NCCL_PROTO=LL128: a clear winner (TPOT at 1 about -10%, throughput at 8 about +10%);
- max-num-seqs=64: TPOT inside the noise, throughput +5%: better too, ranked second; speculative counters;
- tradeoff: TPOT -5%, throughput -5%;
- inside-noise: both within the noise ("no change");
- worse: TPOT +10%, throughput -10%;
- draft: failed at load, no runs, with journal lines.
"""

import json

import pytest

BASE_TPOT_1 = ([10.0, 10.1, 9.9], [10.0, 10.05, 9.95])
BASE_THR_8 = ([1000.0, 1010.0, 990.0], [1000.0, 1005.0, 995.0])
OTHER_TPOT_8 = [20.0, 20.2, 19.8]  # TPOT at 8 and throughput at 1: the same for every series
OTHER_THR_1 = [100.0, 101.0, 99.0]
JOURNAL = ["vllm-x.service: Main process exited, code=exited, status=1/FAILURE",
           "ValueError: draft model /m/d not found"]

VARIANTS = {  # name -> (environment, extra_args, TPOT at 1, throughput at 8, counters per run)
    "NCCL_PROTO=LL128": ({"NCCL_PROTO": "LL128"}, [], [9.0, 9.1, 8.9], [1100.0, 1110.0, 1090.0], {}),
    "max-num-seqs=64": ({}, ["--max-num-seqs", "64"], [10.05, 10.0, 10.1], [1050.0, 1055.0, 1045.0],
                        {"spec_decode_num_drafts_total": 100, "spec_decode_num_draft_tokens_total": 300,
                         "spec_decode_num_accepted_tokens_total": 150}),
    "tradeoff": ({"NCCL_ALGO": "Tree"}, [], [9.5, 9.55, 9.45], [950.0, 955.0, 945.0], {}),
    "inside-noise": ({"NCCL_MAX_NCHANNELS": "8"}, [], [10.05, 10.1, 10.0], [1005.0, 1000.0, 1010.0], {}),
    "worse": ({"NCCL_PROTO": "Simple"}, [], [11.0, 11.1, 10.9], [900.0, 905.0, 895.0], {}),
}


def bench(tpot: float, thr: float, completed: int = 32, failed: int = 0) -> dict:
    """A vllm bench serve --save-result dict; the other latencies are fixed functions of TPOT."""
    d = {"date": "20261201-142600", "backend": "vllm", "num_prompts": completed + failed, "max_concurrency": 1,
         "duration": 10.0, "completed": completed, "failed": failed, "output_throughput": thr,
         "request_throughput": thr / 128, "total_token_throughput": 2 * thr}
    for x, scale in (("ttft", 3.0), ("tpot", 1.0), ("itl", 1.0), ("e2el", 128.0)):
        d[f"median_{x}_ms"] = tpot * scale
        d[f"mean_{x}_ms"] = tpot * scale
        d[f"p99_{x}_ms"] = tpot * scale * 1.5
    return d


def write_dir(path, host="h1", exp_id="20261201T142500Z", base_tpot=BASE_TPOT_1, base_thr=BASE_THR_8,
              variants=None, failed_variant=True, concurrencies=(1, 8), extra_runs=()) -> str:
    """Write an experiment directory; ``variants`` as :data:`VARIANTS`. Returns its path."""
    variants = VARIANTS if variants is None else variants
    path.mkdir(parents=True, exist_ok=True)
    runs = []

    def add(name, rnd, conc, rep, result, counters=None):
        file = f"bench/{name}/{rnd}/c{conc}-r{rep}.json"
        (path / file).parent.mkdir(parents=True, exist_ok=True)
        (path / file).write_text(json.dumps(result))
        runs.append({"variant": name, "round": rnd, "concurrency": conc, "repeat": rep, "file": file,
                     "metrics": {"num_preemptions_total": 0, "request_success_total": result["completed"],
                                 **(counters or {})}})

    lo, hi = min(concurrencies), max(concurrencies)
    for rnd in (1, 2):
        for rep in range(3):
            if base_tpot is not None:
                add("baseline", rnd, lo, rep + 1, bench(base_tpot[rnd - 1][rep], OTHER_THR_1[rep]))
                add("baseline", rnd, hi, rep + 1, bench(OTHER_TPOT_8[rep], base_thr[rnd - 1][rep]))
    entries = []
    for name, (env, args, tpot, thr, counters) in variants.items():
        entries.append({"name": name, "environment": env, "extra_args": args, "profile": False, "status": "ok",
                        "failure": None})
        for rep in range(3):
            add(name, 1, lo, rep + 1, bench(tpot[rep], OTHER_THR_1[rep]), counters)
            add(name, 1, hi, rep + 1, bench(OTHER_TPOT_8[rep], thr[rep]), counters)
    if failed_variant:
        entries.append({"name": "draft", "environment": {},
                        "extra_args": ["--speculative-config", '{"method": "draft_model", "model": "/m/d"}'],
                        "profile": False, "status": "failed",
                        "failure": {"stage": "load", "message": "vllm-x.service did not become healthy: exited",
                                    "journal": JOURNAL}})
    for name, rnd, conc, rep, result in extra_runs:
        add(name, rnd, conc, rep, result)
    exp = {"id": exp_id, "host": host, "started_at": "2026-12-01T14:25:00Z", "finished_at": "2026-12-01T15:40:00Z",
           "model": "/models/x", "vllm_version": "0.32.0",
           "load": {"input_len": 128, "output_len": 128, "num_prompts": 32, "concurrencies": list(concurrencies),
                    "repeats": 3, "warmups": 2},
           "noise_floor_pct": 1.0, "base": {"environment": {"NCCL_PROTO": "LL"}, "extra_args": ["--trust-remote-code"]},
           "variants": entries, "runs": runs}
    (path / "experiment.json").write_text(json.dumps(exp))
    return str(path)


@pytest.fixture
def fixture_dir(tmp_path) -> str:
    return write_dir(tmp_path / "exp")


@pytest.fixture
def make_dir():
    return write_dir


@pytest.fixture
def fx():
    """The fixture's numbers, for tests that re-derive the expected figures."""
    import types

    return types.SimpleNamespace(BASE_TPOT_1=BASE_TPOT_1, BASE_THR_8=BASE_THR_8, OTHER_TPOT_8=OTHER_TPOT_8,
                                 OTHER_THR_1=OTHER_THR_1, JOURNAL=JOURNAL, VARIANTS=VARIANTS, bench=bench)
