"""`vllm bench serve`, the stand-in's against the stand-in, vLLM's against vLLM's CPU build.

Both halves run the same small benchmark (the arguments the experiment role passes) and
check the saved result against the same key list (vLLM 0.32's, taken from the CPU build):
so the two key lists are identical. Counts are checked too; timings are not compared.
A recording's replay runs the command the vllm_bench module builds (vllm_bench_lib.bench_argv), with
the server's /metrics read around it as the module reads them, and is judged as a job judges it.
"""

import json
import re
import subprocess

from ansible_collections.vllm_ops.serving.plugins.module_utils import vllm_bench_lib

from vllm_ops import traffic
from vllm_ops.experiment import plan

from contract_support import WAIT_S, wait_for
from standin_support import BENCH_RESULT_KEYS

PROMPTS, INPUT_LEN, OUTPUT_LEN = 3, 8, 4
TABLE = re.compile(r"^={12} Serving Benchmark Result ={12}$", re.M)


def wait_healthy(srv):
    def healthy():
        assert srv.proc.poll() is None, f"exited with {srv.proc.returncode}{srv.tail()}"
        return srv.health(timeout=10) == 200

    wait_for(healthy, timeout=WAIT_S, interval=0.2, what=f"{srv.name} /health 200")


def run_bench(srv, tmp_path, dataset=None, name="result.json"):
    """The server's own `vllm bench serve` (same command and environment as its `serve`); with
    ``dataset`` (a JSONL prompts file) vLLM's custom dataset, as the vllm_bench role passes it."""
    load = (["--dataset-name", "random", "--random-input-len", str(INPUT_LEN), "--random-output-len", str(OUTPUT_LEN)]
            if dataset is None else
            ["--dataset-name", "custom", "--dataset-path", str(dataset), "--custom-output-len", str(OUTPUT_LEN),
             "--skip-chat-template"])
    argv = [*srv.command, "bench", "serve", "--base-url", f"http://127.0.0.1:{srv.port}",
            "--model", str(srv.model), "--tokenizer", str(srv.model), *load,
            "--num-prompts", str(PROMPTS), "--max-concurrency", "2", "--request-rate", "inf",
            "--ignore-eos", "--num-warmups", "1", "--seed", "0", "--temperature", "0",
            "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,90,99",
            "--disable-tqdm", "--save-result", "--result-dir", str(tmp_path / "bench"),
            "--result-filename", name]
    env = {key: value for key, value in srv.env.items() if key != "OPENAI_API_KEY"}
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=WAIT_S)


def test_bench_serve_saves_vllms_result_keys(server, tmp_path):
    srv = server.start()
    wait_healthy(srv)
    done = run_bench(srv, tmp_path)
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"bench exited {done.returncode}:\n{output[-4000:]}{srv.tail()}"
    result = json.loads((tmp_path / "bench" / "result.json").read_text())
    assert list(result) == BENCH_RESULT_KEYS, list(result)
    assert (result["completed"], result["failed"], result["total_output_tokens"]) == (
        PROMPTS, 0, PROMPTS * OUTPUT_LEN)
    assert (result["endpoint_type"], result["backend"], result["label"], result["request_rate"],
            result["burstiness"], result["max_concurrency"], result["request_goodput"]) == (
        "openai", "openai", None, "inf", 1.0, 2, None)
    assert len(result["latencies"]) == len(result["queue_times"]) == PROMPTS
    assert TABLE.search(done.stdout), done.stdout[-4000:]
    for label in ("Successful requests:", "Failed requests:", "Total generated tokens:",
                  "Median TPOT (ms):", "P99 ITL (ms):", "Mean E2EL (ms):"):
        assert re.search(rf"^{re.escape(label)} +[\d.]+", done.stdout, re.M), label

    # The same server, the prompts of a file (vLLM's custom dataset): the same keys and counts.
    dataset = tmp_path / "prompts.jsonl"
    dataset.write_text('{"prompt": "def add(a, b):"}\n{"prompt": "the quick brown fox"}\n')
    custom = run_bench(srv, tmp_path, dataset=dataset, name="custom.json")
    assert custom.returncode == 0, f"bench exited {custom.returncode}:\n{(custom.stdout + custom.stderr)[-4000:]}"
    result = json.loads((tmp_path / "bench" / "custom.json").read_text())
    assert list(result) == BENCH_RESULT_KEYS, list(result)
    assert (result["completed"], result["failed"], result["total_output_tokens"]) == (
        PROMPTS, 0, PROMPTS * OUTPUT_LEN)


# A recording of blocks of 32 tokens (the recorder's format): (ms, prompt tokens, output tokens, hash ids),
# the first two sharing their first block. vLLM's default chunk of 16 makes each id 16 tokens.
RECORDED_BLOCK = 32
RECORDED = [(0, 70, 4, [0, 1, 2]), (300, 40, 3, [0, 3]), (600, 33, 5, [4, 5])]


def replay(srv, tmp_path, expected, name, *extra):
    """One replay as the vllm_bench module runs it; what the server counted, judged against the recording."""
    url = f"http://127.0.0.1:{srv.port}"
    argv = vllm_bench_lib.bench_argv({
        "executable": srv.command[-1], "base_url": url, "model": str(srv.model), "tokenizer": str(srv.model),
        "input_len": 1, "output_len": 2, "num_prompts": expected.requests, "concurrency": 0, "warmups": 0,
        "seed": 0, "traffic_path": expected.path, "traffic_block": expected.block, "traffic_speed": 1.0,
        "result_dir": str(tmp_path / "bench"), "result_filename": name, "extra_args": list(extra)})
    argv[:1] = srv.command
    env = {key: value for key, value in srv.env.items() if key != "OPENAI_API_KEY"} | {"PYTHONHASHSEED": "0"}
    before = vllm_bench_lib.read_metrics(url + "/metrics")
    done = subprocess.run([*argv, "--disable-tqdm"], capture_output=True, text=True, env=env, timeout=WAIT_S)
    assert done.returncode == 0, f"bench exited {done.returncode}:\n{(done.stdout + done.stderr)[-4000:]}"
    after = vllm_bench_lib.read_metrics(url + "/metrics")
    metrics = vllm_bench_lib.deltas(before, after)
    histograms = metrics.pop("histograms")
    result = json.loads((tmp_path / "bench" / name).read_text())
    return traffic.fidelity(expected, plan.served({"metrics": metrics, "histograms": histograms,
                                                   "summary": vllm_bench_lib.summary(result)}))


def test_a_recordings_replay_reproduces_it_and_vllms_default_chunk_does_not(server, tmp_path):
    recording = tmp_path / "recording"
    recording.mkdir()
    (recording / "traffic-1-e.jsonl").write_text("".join(
        json.dumps({"timestamp": ts, "input_length": i, "output_length": o, "hash_ids": ids, "status": 200}) + "\n"
        for ts, i, o, ids in RECORDED))
    (recording / "traffic-1-e.json").write_text(json.dumps({
        "schema": "vllm-ops/traffic/1", "block": RECORDED_BLOCK, "epoch": "e", "start": 1.8e9, "end": 1.8e9 + 1}))
    expected = traffic.write_replay(traffic.read([recording]), tmp_path / "replay.jsonl")
    srv = server.start()
    wait_healthy(srv)

    faithful = replay(srv, tmp_path, expected, "replay.json")
    assert faithful.valid, faithful.message
    checks = {c.name: c for c in faithful.checks}
    assert checks["input_tokens"].got == sum(i for _, i, _, _ in RECORDED)
    assert checks["output_tokens"].got == sum(o for _, _, o, _ in RECORDED)
    assert {"prompt_buckets", "generation_buckets"} <= set(checks), "the server's length histograms were read"

    # vLLM's default chunk: each id 16 tokens, a prompt no longer than its ids make it
    trapped = replay(srv, tmp_path, expected, "trapped.json", "--timed-trace-chunk-hash-size", "16")
    short = sum(min(i, 16 * len(ids)) for _, i, _, ids in RECORDED)
    assert not trapped.valid and {c.name: c for c in trapped.checks}["input_tokens"].got == short
    assert "--timed-trace-chunk-hash-size was vLLM's default 16, not the recording's block of 32" in trapped.message
