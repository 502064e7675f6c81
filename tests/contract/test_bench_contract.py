"""`vllm bench serve`, the stand-in's against the stand-in, vLLM's against vLLM's CPU build.

Both halves run the same small benchmark (the arguments the experiment role passes) and
check the saved result against the same key list (vLLM 0.32's, taken from the CPU build):
so the two key lists are identical. Counts are checked too; timings are not compared.
"""

import json
import re
import subprocess

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
