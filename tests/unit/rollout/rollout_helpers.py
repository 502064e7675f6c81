"""Helpers of the rollout tests: a canary's job directory (experiment.json and bench/, as the rollout
role writes them) and a host's record in a rollout's directory."""

import json


def bench(tpot: float, thr: float, completed: int = 16, failed: int = 0) -> dict:
    """A vllm bench serve --save-result dict with the keys the experiment reads."""
    d = {"completed": completed, "failed": failed, "output_throughput": thr, "max_concurrency": 1,
         "num_prompts": completed + failed, "duration": 5.0}
    for x in ("ttft", "tpot", "itl", "e2el"):
        d[f"median_{x}_ms"] = tpot
        d[f"p99_{x}_ms"] = tpot * 1.5
    return d


def write_canary(path, before: dict, after: dict, host="a", noise_floor_pct=1.0, again: dict | None = None) -> str:
    """``before``/``after``: {concurrency: [(tpot, throughput, completed, failed), ...one per repeat]};
    ``again``: the baseline measured again after a rollback (round 2), in the same form."""
    path.mkdir(parents=True, exist_ok=True)
    runs = []
    for name, rnd, slot, side in (("baseline", 1, "baseline", before), ("change", 1, "change", after),
                                  ("baseline", 2, "baseline-2", again or {})):
        for conc, repeats in side.items():
            for rep, (tpot, thr, completed, failed) in enumerate(repeats, start=1):
                file = f"bench/{slot}/c{conc}-r{rep}.json"
                (path / file).parent.mkdir(parents=True, exist_ok=True)
                (path / file).write_text(json.dumps(bench(tpot, thr, completed, failed)))
                runs.append({"variant": name, "round": rnd, "concurrency": conc, "repeat": rep, "file": file,
                             "metrics": {}})
    record = {"id": "20261201T100000Z", "host": host, "started_at": "2026-12-01T10:00:00Z", "model": "kimi-k2.5",
              "vllm_version": "0.32.0", "load": {"concurrencies": sorted(before), "repeats": 3, "num_prompts": 16,
                                                 "input_len": 32, "output_len": 16, "warmups": 1},
              "noise_floor_pct": noise_floor_pct, "base": {"environment": {"NCCL_PROTO": "LL"}, "extra_args": []},
              "variants": [{"name": "change", "environment": {"NCCL_PROTO": "LL128"}, "extra_args": [],
                            "profile": False, "status": "ok", "failure": None}],
              "runs": runs}
    (path / "experiment.json").write_text(json.dumps(record))
    return str(path)


def same(tpot, thr, n=3, completed=16, failed=0):
    return [(tpot, thr, completed, failed)] * n


def host_record(host, stage, outcome, *, restarted=True, before="0.32.0", after="0.33.0", downtime_s=9.5,
                gate=None, error=None) -> dict:
    return {"host": host, "stage": stage, "outcome": outcome, "restarted": restarted, "error": error,
            "job_id": "20261201T100000Z", "job_dir": f"/art/{host}/20261201T100000Z",
            "started_at": "2026-12-01T10:00:00Z", "finished_at": "2026-12-01T10:05:00Z",
            "downtime": {"seconds_not_ready": downtime_s, "gaps": 1, "longest_gap_s": downtime_s, "polls": 100,
                         "failed_polls": 10, "interval_s": 1},
            "change": "vLLM 0.32.0 -> 0.33.0",
            "before": {"version": before, "executable": f"/opt/vllm/{before}/bin/vllm"},
            "after": {"version": after, "executable": f"/opt/vllm/{after}/bin/vllm"},
            "gate": gate, "smoke": None if stage == "canary" else {"completion_tokens": 8, "metrics": True}}
