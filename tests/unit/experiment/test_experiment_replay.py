"""An experiment whose load replayed a recording: the replay's file, each run judged against the recording
from what the server counted, invalid runs left out of the figures, and the report saying which load it was.

The recording is written here in the recorder's format (docs/traffic.md); every expected figure is computed
here from the lines written, never by the code under test.
"""

from __future__ import annotations

import json
import math
import statistics

from vllm_ops.experiment import cli, plan
from vllm_ops.experiment.inputs import load_experiment
from vllm_ops.experiment.report import build_report

BLOCK = 64
START = 1_800_000_000.0
# (ms after the window opened, prompt tokens, completion tokens, hash ids): two prompt groups, the long ones
# sharing a system prompt of three blocks, a burst of three at 4 s, written out of arrival order.
LINES = [
    (4000, 700, 40, [0, 1, 2, 7, 8, 9, 10, 11, 12, 13, 14]),
    (1000, 650, 30, [0, 1, 2, 3, 4, 5, 6, 15, 16, 17, 18]),
    (0, 100, 10, [19, 20]),
    (4010, 90, 12, [21, 22]),
    (4020, 80, 8, [23, 24]),
    (9000, 120, 20, [25, 26]),
]


def write_recording(directory):
    directory.mkdir(parents=True)
    (directory / "traffic-1-aaaa.jsonl").write_text("".join(
        json.dumps({"timestamp": ts, "input_length": i, "output_length": o, "hash_ids": ids, "status": 200,
                    "endpoint": "completions", "stream": True}) + "\n" for ts, i, o, ids in LINES))
    (directory / "traffic-1-aaaa.json").write_text(json.dumps({
        "schema": "vllm-ops/traffic/1", "block": BLOCK, "epoch": "aaaa", "start": START, "end": START + 60,
        "vllm_version": "0.32.0", "requests": len(LINES)}))
    return directory


def buckets(lengths):
    """The server's cumulative histogram of ``lengths`` over vLLM's 1-2-5 buckets, as /metrics gives it."""
    bounds = [m * 10 ** e for e in range(4) for m in (1, 2, 5)]
    out = {f"{float(b)}": float(sum(1 for x in lengths if x <= b)) for b in bounds}
    return out | {"+Inf": float(len(lengths))}


def module_result(rep, tpot, prompt_tokens, inputs):
    """One registered result of vllm_bench_serve for a replay run that sent every request."""
    outputs = [o for _, _, o, _ in LINES]
    return {"item": [0, rep], "path": f"/var/lib/x/c0-r{rep}.json",
            "metrics": {"request_success_total": float(len(LINES)), "prompt_tokens_total": float(prompt_tokens),
                        "generation_tokens_total": float(sum(outputs))},
            "histograms": {"request_prompt_tokens": buckets(inputs),
                           "request_generation_tokens": buckets(outputs)},
            "summary": {"completed": len(LINES), "failed": 0, "duration": 9.4, "median_tpot_ms": tpot}}


def bench_file(tpot):
    d = {"completed": len(LINES), "failed": 0, "duration": 9.4, "output_throughput": 1000.0 / tpot,
         "max_concurrency": None, "num_prompts": len(LINES)}
    for x, scale in (("ttft", 3.0), ("tpot", 1.0), ("itl", 1.0), ("e2el", 30.0)):
        d[f"median_{x}_ms"] = tpot * scale
        d[f"p99_{x}_ms"] = tpot * scale * 1.5
    return d


def test_an_experiment_on_a_replay_says_what_it_replayed_and_leaves_out_replays_that_missed(tmp_path, capsys):
    recording = write_recording(tmp_path / "artifacts/traffic/h1")
    exp = tmp_path / "exp"
    assert cli.main(["replay", str(recording), "--out", str(exp / "bench")]) == 0
    printed = json.loads(capsys.readouterr().out.splitlines()[-1])

    # The replay's file: arrival order from 0 ms, the recorder's ids renumbered in order of first appearance.
    ordered = sorted(LINES)
    replayed = [json.loads(x) for x in (exp / "bench/replay.jsonl").read_text().splitlines()]
    assert [r["timestamp"] for r in replayed] == [ts - ordered[0][0] for ts, *_ in ordered]
    assert [r["input_length"] for r in replayed] == [i for _, i, _, _ in ordered]
    first_seen = list(dict.fromkeys(i for *_, ids in ordered for i in ids))
    assert [r["hash_ids"] for r in replayed] == [[first_seen.index(i) for i in ids] for *_, ids in ordered]
    # What it must reproduce, printed and kept beside it.
    inputs = [i for _, i, _, _ in LINES]
    assert printed["requests"] == len(LINES) and printed["block"] == BLOCK
    assert printed["input_tokens"] == sum(inputs) and printed["span_s"] == 9.0
    expected = json.loads((exp / "bench/replay.json").read_text())
    assert expected["input_lengths"] == [i for _, i, _, _ in ordered]

    # vLLM's default chunk of 16 against blocks of 64: each id gives 16 tokens, a prompt at most its ids x 16.
    trapped = sum(min(i, len(ids) * 16) for _, i, _, ids in LINES)
    assert trapped < sum(inputs) / 3
    runs = (plan.runs([module_result(r, 10.0 + 0.1 * r, sum(inputs), inputs) for r in (1, 2, 3)],
                      "baseline", 1, "bench/baseline", expected)
            + plan.runs([module_result(r, 8.0 + 0.1 * r, sum(inputs), inputs) for r in (1, 2, 3)],
                        "faster", 1, "bench/faster", expected)
            + plan.runs([module_result(r, 5.0, trapped, [16] * len(LINES)) for r in (1, 2, 3)],
                        "trapped", 1, "bench/trapped", expected))
    assert [r["fidelity"]["valid"] for r in runs] == [True] * 6 + [False] * 3
    assert "--timed-trace-chunk-hash-size was vLLM's default 16, not the recording's block of 64" in \
        runs[-1]["fidelity"]["message"]

    for run in runs:
        tpot = {"baseline": 10.0, "faster": 8.0, "trapped": 5.0}[run["variant"]] + 0.1 * run["repeat"]
        (exp / run["file"]).parent.mkdir(parents=True, exist_ok=True)
        (exp / run["file"]).write_text(json.dumps(bench_file(tpot)))
    (exp / "experiment.json").write_text(json.dumps({
        "id": "20261206T020000Z", "host": "h1", "model": "/models/x", "vllm_version": "0.32.0",
        "load": {"concurrencies": [0], "repeats": 3, "warmups": 0, "num_prompts": 64, "traffic": str(recording),
                 "traffic_speed": 1.0},
        "noise_floor_pct": 1.0, "base": {"environment": {}, "extra_args": []},
        "variants": [{"name": n, "environment": {}, "extra_args": [], "status": "ok"} for n in ("faster", "trapped")],
        "runs": runs}))

    report = build_report([load_experiment(exp)])
    by_name = {v["name"]: v for v in report["variants"]}
    # The faithful replays compared: 8.2 ms against 10.2 ms (the medians of the three runs each).
    tpot = by_name["faster"]["headline"]["tpot"]
    assert math.isclose(tpot["change_pct"], 100 * (8.2 / 10.2 - 1), abs_tol=1e-3) and tpot["verdict"] == "better"
    # The trapped replays' 5 ms would have won: they are left out, and no verdict rests on them.
    assert by_name["trapped"]["points"][0]["status"] == "invalid" and by_name["trapped"]["category"] == "not compared"
    assert report["replay"]["invalid_runs"] == 3 and report["replay"]["runs"] == 9 and not report["replay"]["valid"]
    assert report["replay"]["requests"] == len(LINES) and report["replay"]["traffic"] == str(recording)
    assert report["headline"].startswith("best: faster: TPOT") and "on the replayed traffic" in report["headline"]

    history = tmp_path / "experiments.csv"
    assert cli.main(["analyze", str(exp), "--history", str(history)]) == 0
    rows = history.read_text().splitlines()[1:]
    assert len(rows) == 3 and all(r.split(",")[7] == "0" and r.endswith(f",replay {recording}") for r in rows)
    text = (exp / "report.md").read_text()
    assert f"the replay of {recording}: {len(LINES)} requests over 9 s" in text
    assert "3 of 9 replays did not reproduce the recording" in text
    assert "trapped on h1: 3 of 3 replays did not reproduce the recording" in text
    assert "concurrency 0" not in text


def test_a_random_load_beside_a_fetched_recording_says_how_to_replay_it(tmp_path, make_dir):
    exp = make_dir(tmp_path / "artifacts/h1/20261201T142500Z")
    assert build_report([load_experiment(exp)])["recordings"] == {}
    recording = write_recording(tmp_path / "artifacts/traffic/h1")
    report = build_report([load_experiment(exp)])
    assert report["recordings"] == {"h1": str(recording)} and report["replay"] is None
    assert cli.main(["analyze", exp]) == 0
    assert f"`-e vllm_bench_traffic={recording}` measures on what its users send" in \
        (tmp_path / "artifacts/h1/20261201T142500Z/report.md").read_text()


def test_a_speculating_variant_on_the_replay_is_shown_beside_its_figures_on_random_tokens(tmp_path, make_dir, fx):
    history = tmp_path / "artifacts/h1/experiments.csv"
    random_exp = make_dir(tmp_path / "artifacts/h1/20261201T142500Z")
    assert cli.main(["analyze", random_exp, "--history", str(history)]) == 0
    # The fixture's max-num-seqs=64 on random tokens: 150 of 300 draft tokens accepted, TPOT at concurrency 1
    # of [10.05, 10.0, 10.1] against the baseline's six runs.
    random_change = 100 * (10.05 / statistics.median(fx.BASE_TPOT_1[0] + fx.BASE_TPOT_1[1]) - 1)

    recording = write_recording(tmp_path / "artifacts/traffic/h1")
    exp = tmp_path / "artifacts/h1/20261206T020000Z"
    assert cli.main(["replay", str(recording), "--out", str(exp / "bench")]) == 0
    spec = {"spec_decode_num_drafts_total": 40.0, "spec_decode_num_draft_tokens_total": 120.0,
            "spec_decode_num_accepted_tokens_total": 6.0}
    runs = []
    for name, tpot, counters in (("baseline", 10.0, {}), ("max-num-seqs=64", 10.5, spec)):
        for rep in (1, 2, 3):
            file = f"bench/{name}/c0-r{rep}.json"
            (exp / file).parent.mkdir(parents=True, exist_ok=True)
            (exp / file).write_text(json.dumps(bench_file(tpot)))
            runs.append({"variant": name, "round": 1, "concurrency": 0, "repeat": rep, "file": file,
                         "metrics": {"request_success_total": float(len(LINES)), **counters},
                         "fidelity": {"valid": True, "message": "the replay reproduced the recording", "checks": []}})
    (exp / "experiment.json").write_text(json.dumps({
        "id": "20261206T020000Z", "host": "h1", "model": "/models/x", "vllm_version": "0.32.0",
        "load": {"concurrencies": [0], "repeats": 3, "warmups": 0, "num_prompts": 64, "traffic": str(recording),
                 "traffic_speed": 1.0},
        "noise_floor_pct": 1.0, "base": {"environment": {"NCCL_PROTO": "LL"}, "extra_args": ["--trust-remote-code"]},
        "variants": [{"name": "max-num-seqs=64", "environment": {}, "extra_args": ["--max-num-seqs", "64"],
                      "status": "ok"}],
        "runs": runs}))
    assert cli.main(["analyze", str(exp), "--history", str(history)]) == 0

    (entry,) = json.loads((exp / "report.json").read_text())["beside"]
    assert entry["here"]["load"] == f"replay {recording}" and entry["here"]["concurrency"] == 0
    assert entry["here"]["acceptance"] == 6.0 / 120.0
    assert math.isclose(entry["here"]["tpot_change_pct"], 100 * (10.5 / 10.0 - 1), abs_tol=1e-3)
    there = entry["there"]
    assert (there["load"], there["experiment_id"], there["concurrency"]) == ("random", "20261201T142500Z", 1)
    assert there["acceptance"] == 150 / 300
    assert math.isclose(there["tpot_change_pct"], random_change, abs_tol=1e-3)
    text = (exp / "report.md").read_text()
    assert "| max-num-seqs=64 | random | 0.500 |" in text
    assert f"| max-num-seqs=64 | replay {recording} | 0.050 |" in text
