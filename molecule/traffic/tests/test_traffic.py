"""The users' traffic on the sandbox (docs/traffic.md): a known mix sent to the service, recorded by its
recorder, fetched by playbooks/traffic.yml and replayed by experiment.yml with vLLM's timed_trace dataset
(the stand-in's bench models it), each replay judged against the recording from the server's /metrics.

The mix: four long prompts sharing a system prompt of exactly three blocks, sent apart, then a burst of four
short ones; the stand-in counts a prompt's words as its tokens and answers every request with max_tokens
tokens (ignore_eos), so every length and id the recording must hold is computed here from what was sent.
"""

from __future__ import annotations

import json
import math
import shlex

from testlib import UNIT, run_playbook, wait_for

HOST = "vllm-mol-traffic"
DIRECTORY = "/var/lib/vllm/traffic"
BLOCK = 64  # the role's default vllm_traffic_block_tokens
SYSTEM = [f"sys{i}word" for i in range(3 * BLOCK)]  # a shared prefix of exactly three blocks
LONG = [(SYSTEM + [f"long{n}x{i}" for i in range(40)], 12) for n in range(4)]
SHORT = [([f"short{n}x{i}" for i in range(20)], 6) for n in range(4)]
SENT = LONG + SHORT
VARIANT = {"name": "max-num-seqs=16", "extra_args": ["--max-num-seqs", "16"]}


def curl(words, max_tokens):
    body = json.dumps({"model": "kimi-k2.5", "prompt": " ".join(words), "max_tokens": max_tokens,
                       "ignore_eos": True})
    return (f"curl -sf -o /dev/null -H 'Content-Type: application/json' -d {shlex.quote(body)} "
            "http://127.0.0.1:8000/v1/completions")


def sidecars(host):
    paths = host.check_output(f"ls {DIRECTORY}/traffic-*.json 2>/dev/null || true").split()
    return {path: json.loads(host.file(path).content_string) for path in paths}


def experiment(artifacts, traffic, **more):
    play = run_playbook("experiment.yml", "-e", json.dumps({
        "vllm_job_artifacts_dir": str(artifacts), "vllm_experiment_variants": [VARIANT],
        "vllm_bench_traffic": str(traffic), **more}))
    assert play.rc == 0, play.output[-5000:]
    (directory,) = [p for p in (artifacts / HOST).iterdir() if p.is_dir()]
    return play, directory, json.loads((directory / "experiment.json").read_text()), \
        json.loads((directory / "report.json").read_text())


def test_a_recorded_mix_is_fetched_and_replayed_and_a_wrong_block_is_refused_as_evidence(host, tmp_path):
    # A fresh server process: its recorder opens a window of its own at the first request, so the window
    # holds this mix alone.
    host.check_output(f"systemctl restart {UNIT}")
    wait_for(lambda: host.run("curl -sf -o /dev/null http://127.0.0.1:8000/health").rc == 0,
             "the restarted service healthy", timeout_s=120)
    since = host.check_output("date -u +%Y-%m-%dT%H:%M:%SZ")
    before = set(sidecars(host))
    for words, max_tokens in LONG:
        host.check_output(curl(words, max_tokens))
        host.check_output("sleep 0.4")
    host.check_output(" & ".join(curl(w, m) for w, m in SHORT) + " & wait")

    def window():
        new = {p: s for p, s in sidecars(host).items() if p not in before}
        return next(iter(new.values())) if len(new) == 1 and next(iter(new.values()))["requests"] == len(SENT) \
            else None

    wait_for(window, "the mix recorded in a window of its own", timeout_s=30)

    artifacts = tmp_path / "artifacts"
    fetch = run_playbook("playbooks/traffic.yml", "-e", json.dumps({
        "vllm_traffic_artifacts_dir": str(artifacts), "vllm_traffic_since": since}))
    assert fetch.rc == 0, fetch.output[-5000:]
    fetched = artifacts / "traffic" / HOST
    (recording,) = fetched.glob("traffic-*.jsonl")
    lines = [json.loads(line) for line in recording.read_text().splitlines()]
    # Each request's lengths as sent, and its ids: one a block, the long prompts' first three shared.
    assert sorted((x["input_length"], x["output_length"]) for x in lines) == sorted(
        (len(w), m) for w, m in SENT)
    for x in lines:
        assert len(x["hash_ids"]) == math.ceil(x["input_length"] / BLOCK)
    long_ids = [x["hash_ids"] for x in lines if x["input_length"] == len(LONG[0][0])]
    assert len({tuple(ids[:3]) for ids in long_ids}) == 1 and len({ids[3] for ids in long_ids}) == 4
    # Nothing of the words: not in the recording, its sidecar, nor the report of the mix beside them.
    assert {p.suffix for p in fetched.iterdir()} == {".jsonl", ".json"}
    everything = "".join(p.read_text() for p in (*fetched.iterdir(), artifacts / "traffic/mix.json",
                                                   artifacts / "traffic/traffic.md"))
    assert not [word for w, _ in SENT for word in w if word in everything], "no word of a prompt is recorded"
    # The report of the mix: the requests and lengths as sent, the long prompts' three shared blocks of four.
    mix = json.loads((artifacts / "traffic/mix.json").read_text())["hosts"][HOST]["mix"]
    assert mix["requests"] == len(SENT)
    assert mix["input"]["tokens"] == sum(len(w) for w, _ in SENT)
    assert mix["output"]["tokens"] == sum(m for _, m in SENT)
    blocks = sum(math.ceil(len(w) / BLOCK) for w, _ in SENT)
    assert mix["prefix"]["repeated_share"] == 3 * (len(LONG) - 1) / blocks
    again = run_playbook("playbooks/traffic.yml", "-e", json.dumps({
        "vllm_traffic_artifacts_dir": str(artifacts), "vllm_traffic_since": since}))
    assert again.rc == 0 and again.changed == 0, again.changed_tasks

    # The replay: every run judged against the recording, and the report says so.
    play, directory, record, report = experiment(tmp_path / "replayed", fetched)
    assert record["load"]["traffic"] == str(fetched) and record["load"]["concurrencies"] == [0]
    runs = record["runs"]
    assert {r["variant"] for r in runs} == {"baseline", VARIANT["name"]}
    for run in runs:
        assert run["fidelity"]["valid"], run["fidelity"]
        # what the server counted during the run: every prompt token sent by the users, no more
        assert run["metrics"]["prompt_tokens_total"] == sum(len(w) for w, _ in SENT)
        assert run["metrics"]["generation_tokens_total"] == sum(m for _, m in SENT)
    assert report["replay"]["valid"] and report["replay"]["requests"] == len(SENT)
    text = (directory / "report.md").read_text()
    assert f"the replay of {fetched}: {len(SENT)} requests" in text
    assert "every replay reproduced the recording" in text
    assert play.result("Print the headline")["msg"].startswith(f"{HOST}: ")

    # The same recording replayed with vLLM's default chunk of 16 tokens a block: every prompt short, every
    # run invalid and said, no verdict.
    play, directory, record, report = experiment(
        tmp_path / "trapped", fetched,
        vllm_experiment_bench_load={"repeats": 1, "args": ["--timed-trace-chunk-hash-size", "16"]})
    short = sum(min(len(w), 16 * math.ceil(len(w) / BLOCK)) for w, _ in SENT)
    for run in record["runs"]:
        assert not run["fidelity"]["valid"]
        assert run["metrics"]["prompt_tokens_total"] == short
        assert "--timed-trace-chunk-hash-size was vLLM's default 16, not the recording's block of 64" in \
            run["fidelity"]["message"]
    assert not report["replay"]["valid"]
    assert "no baseline replay reproduced the recording" in report["headline"]
