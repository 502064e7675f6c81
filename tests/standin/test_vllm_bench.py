"""The stand-in's `vllm bench serve`, speculative decoding and --max-num-seqs, as vLLM 0.32 has them.

No test asserts an upper bound on a duration: the simulated times are sleeps, so they only
give lower bounds.
"""

import importlib
import json
import math
import random
import re
import subprocess
import sys

import numpy as np
import pytest

from standin_support import BENCH_RESULT_KEYS, STANDIN_LIB, VLLM, WAIT_S

SPEC_KEYS = ["spec_decode_acceptance_rate", "spec_decode_acceptance_length",
             "spec_decode_num_drafts", "spec_decode_draft_tokens", "spec_decode_accepted_tokens",
             "spec_decode_per_position_acceptance_rates"]
TTFT_MS, TPOT_MS = 10.0, 8.0
KNOBS = {"VLLM_STANDIN_TTFT_MS": str(TTFT_MS), "VLLM_STANDIN_TPOT_MS": str(TPOT_MS)}
TABLE_LABELS = ["Successful requests:", "Failed requests:", "Benchmark duration (s):",
                "Total input tokens:", "Total generated tokens:", "Request throughput (req/s):",
                "Output token throughput (tok/s):", "Total token throughput (tok/s):",
                "Mean TTFT (ms):", "Median TTFT (ms):", "P99 TTFT (ms):", "Mean TPOT (ms):",
                "Median TPOT (ms):", "Mean ITL (ms):", "Median E2EL (ms):"]


def bench(sandbox, *args, env=None, port=None, tmp_path=None, name="result.json"):
    """Run the stand-in's `vllm bench serve`; returns (completed process, saved JSON or None)."""
    argv = [sys.executable, str(VLLM), "bench", "serve"]
    if port is not None:
        argv += ["--base-url", f"http://127.0.0.1:{port}", "--model", str(sandbox.model),
                 "--tokenizer", str(sandbox.model), "--dataset-name", "random",
                 "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,90,99",
                 "--ignore-eos", "--disable-tqdm", "--temperature", "0"]
    if tmp_path is not None:
        argv += ["--save-result", "--result-dir", str(tmp_path / "results"),
                 "--result-filename", name]
    run_env = {**sandbox.env, **(env or {})}
    if "OPENAI_API_KEY" not in (env or {}):
        run_env.pop("OPENAI_API_KEY", None)
    done = subprocess.run([*argv, *args], capture_output=True, text=True, env=run_env,
                          timeout=WAIT_S)
    saved = tmp_path / "results" / name if tmp_path is not None else None
    result = json.loads(saved.read_text()) if saved is not None and saved.exists() else None
    return done, result


def load_standin():
    """The stand-in's bench module, imported from the package the launcher runs."""
    if str(STANDIN_LIB) not in sys.path:
        sys.path.insert(0, str(STANDIN_LIB))
    return importlib.import_module("vllm_standin.bench")


def counter(metrics, name):
    match = re.search(rf"^{re.escape(name)}{{[^}}]*}} ([\d.e+-]+)$", metrics, re.M)
    return None if match is None else float(match.group(1))


# ---------------------------------------------------------------- the statistics

def test_percentiles_and_std_are_numpys():
    standin = load_standin()
    rng = random.Random(7)
    for size in (1, 2, 3, 10, 57):
        values = [rng.uniform(0, 50) for _ in range(size)]
        for p in (0, 1, 25, 50, 90, 99, 99.9, 100):
            assert standin.percentile(values, p) == pytest.approx(np.percentile(values, p))
        assert standin.std(values) == pytest.approx(np.std(values))
        assert standin.mean(values) == pytest.approx(np.mean(values))
    assert (standin.percentile([], 99), standin.std([]), standin.mean([])) == (0.0, 0.0, 0.0)


# ---------------------------------------------------------------- bench serve

def test_bench_serve_saves_vllms_result_keys_and_counts(server, sandbox, tmp_path):
    server.start(env=KNOBS)
    server.wait_ready()
    prompts, input_len, output_len = 4, 6, 5
    done, result = bench(sandbox, "--num-prompts", str(prompts), "--random-input-len",
                         str(input_len), "--random-output-len", str(output_len),
                         "--max-concurrency", "2", "--request-rate", "inf",
                         port=server.port, tmp_path=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert list(result) == BENCH_RESULT_KEYS
    assert (result["completed"], result["failed"]) == (prompts, 0)
    assert result["total_output_tokens"] == prompts * output_len
    assert result["total_input_tokens"] == prompts * input_len  # the stand-in's tokens are words
    assert (result["endpoint_type"], result["backend"], result["label"], result["request_rate"],
            result["burstiness"], result["max_concurrency"], result["request_goodput"],
            result["rtfx"]) == ("openai", "openai", None, "inf", 1.0, 2, None, 0.0)
    assert (result["model_id"], result["tokenizer_id"]) == (str(sandbox.model), str(sandbox.model))
    assert re.fullmatch(r"\d{8}-\d{6}", result["date"])
    assert len(result["latencies"]) == len(result["queue_times"]) == prompts
    # lower bounds only: the server sleeps TTFT, then TPOT per further token
    assert result["mean_ttft_ms"] >= TTFT_MS
    assert result["median_e2el_ms"] >= TTFT_MS + (output_len - 1) * TPOT_MS
    assert min(result["latencies"]) >= (TTFT_MS + (output_len - 1) * TPOT_MS) / 1000
    # TPOT = (E2EL - TTFT) / (n - 1) as the client sees it; a late read of the first chunk on a
    # loaded machine shortens that span by up to one step, hence n - 2 steps as the floor
    assert result["mean_tpot_ms"] >= TPOT_MS * (output_len - 2) / (output_len - 1)
    assert result["p99_ttft_ms"] >= result["median_ttft_ms"] >= 0
    output = done.stdout
    assert "============ Serving Benchmark Result ============" in output
    for label in TABLE_LABELS:
        assert re.search(rf"^{re.escape(label)} +[\d.]+ *$", output, re.M), label
    assert re.search(r"^Successful requests: +4 *$", output, re.M)
    assert re.search(r"^Maximum request concurrency: +2 *$", output, re.M)
    metrics = server.get("/metrics").text
    assert "vllm:spec_decode" not in metrics, "vLLM has no spec_decode families unless speculating"
    assert counter(metrics, "vllm:num_preemptions_total") == 0.0
    assert "# TYPE vllm:num_preemptions_total counter" in metrics
    assert counter(metrics, "vllm:generation_tokens_total") == prompts * output_len


def test_bench_serve_at_a_request_rate_with_metadata_and_default_file_name(server, sandbox,
                                                                           tmp_path):
    server.start()
    server.wait_ready()
    done, _ = bench(sandbox, "--num-prompts", "3", "--random-input-len", "4",
                    "--random-output-len", "2", "--request-rate", "50", "--seed", "3",
                    "--label", "base", "--metadata", "variant=nccl-ring", "run=1",
                    "--save-result", "--result-dir", str(tmp_path / "out"), port=server.port)
    assert done.returncode == 0, done.stdout + done.stderr
    (saved,) = (tmp_path / "out").iterdir()
    assert re.fullmatch(rf"base-50\.0qps-{sandbox.model.name}-\d{{8}}-\d{{6}}\.json", saved.name)
    result = json.loads(saved.read_text())
    keys = list(result)
    assert keys[keys.index("num_prompts") + 1:keys.index("request_rate")] == ["variant", "run"]
    assert (result["variant"], result["run"], result["request_rate"], result["label"],
            result["completed"]) == ("nccl-ring", "1", 50.0, "base", 3)
    assert re.search(r"^Request rate configured \(RPS\): +50\.00 *$", done.stdout, re.M)


def test_bench_sends_openai_api_key_when_set(server, sandbox, tmp_path):
    server.start("--api-key", "sk-bench")
    server.wait_ready()
    args = ("--num-prompts", "3", "--random-input-len", "4", "--random-output-len", "3")
    done, result = bench(sandbox, *args, env={"OPENAI_API_KEY": "sk-bench"},
                         port=server.port, tmp_path=tmp_path, name="with-key.json")
    assert done.returncode == 0, done.stdout + done.stderr
    assert (result["completed"], result["failed"]) == (3, 0)
    # without it every request is refused (401); vLLM skips its ready check by default
    done, result = bench(sandbox, *args, port=server.port, tmp_path=tmp_path, name="no-key.json")
    assert done.returncode == 0, done.stdout + done.stderr
    assert (result["completed"], result["failed"], result["total_output_tokens"]) == (0, 3, 0)
    assert "Failed requests during benchmark run detected" in done.stdout
    assert re.search(r"^Failed requests: +3 *$", done.stdout, re.M)
    # with a ready check, the failing initial test request ends the run (non-zero)
    done, _ = bench(sandbox, *args, "--ready-check-timeout-sec", "1", port=server.port)
    assert done.returncode != 0
    assert "Initial test run failed" in done.stderr


def test_bench_needs_a_local_tokenizer(sandbox, tmp_path):
    missing = tmp_path / "no-such-tokenizer"
    done, _ = bench(sandbox, "--model", str(sandbox.model), "--tokenizer", str(missing),
                    "--num-prompts", "1")
    assert done.returncode != 0
    assert f"Can't load tokenizer for '{missing}'" in done.stderr


@pytest.mark.parametrize("argv, code, text", [
    (["bench", "serve", "--help"], 0, "--max-concurrency"),
    (["bench"], 2, "usage"),
    (["bench", "throughput"], 2, "usage"),
    (["bench", "serve", "--dataset-name", "sharegpt"], 2, "only 'random'"),
    (["bench", "serve", "--no-such-flag"], 2, "unrecognized arguments"),
])
def test_bench_cli(argv, code, text, sandbox):
    done = subprocess.run([sys.executable, str(VLLM), *argv], capture_output=True, text=True,
                          env=sandbox.env, timeout=WAIT_S)
    assert done.returncode == code, done.stdout + done.stderr
    assert text in done.stdout + done.stderr


# ---------------------------------------------------------------- speculative decoding

def test_ngram_speculation_counts_drafts_and_accepted_tokens(server, sandbox, tmp_path):
    k, acceptance = 3, 0.67
    server.start("--speculative-config", json.dumps({"method": "ngram", "num_speculative_tokens": k,
                                                     "prompt_lookup_max": 4}),
                 env={**KNOBS, "VLLM_STANDIN_SPEC_ACCEPTANCE": str(acceptance)})
    server.wait_ready()
    before = server.get("/metrics").text
    for name in ("vllm:spec_decode_num_drafts_total", "vllm:spec_decode_num_draft_tokens_total",
                 "vllm:spec_decode_num_accepted_tokens_total"):
        assert re.search(rf'^{name}{{engine="0",model_name="{re.escape(str(sandbox.model))}"}} 0\.0$',
                         before, re.M), name
    assert re.search(r"^# TYPE vllm:spec_decode_num_drafts_total counter$", before, re.M)
    prompts, output_len = 3, 8
    done, result = bench(sandbox, "--num-prompts", str(prompts), "--random-input-len", "5",
                         "--random-output-len", str(output_len), port=server.port,
                         tmp_path=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    # the model: the first token comes from the prefill; each decode step proposes K tokens and
    # accepts round(K * acceptance) = 2 of them, so it emits 3 (the last step what is left)
    accepted = 2
    steps = math.ceil((output_len - 1) / (1 + accepted))  # 3 steps: 3 + 3 + 1 tokens after the first
    metrics = server.get("/metrics").text
    assert counter(metrics, "vllm:spec_decode_num_drafts_total") == prompts * steps
    assert counter(metrics, "vllm:spec_decode_num_draft_tokens_total") == prompts * steps * k
    assert counter(metrics, "vllm:spec_decode_num_accepted_tokens_total") == \
        prompts * steps * accepted
    assert counter(metrics, "vllm:generation_tokens_total") == prompts * output_len
    # vLLM's bench adds its spec_decode keys (deltas of those counters) before the percentiles
    assert list(result) == BENCH_RESULT_KEYS[:24] + SPEC_KEYS + BENCH_RESULT_KEYS[24:]
    assert (result["spec_decode_num_drafts"], result["spec_decode_draft_tokens"],
            result["spec_decode_accepted_tokens"]) == (prompts * steps, prompts * steps * k,
                                                       prompts * steps * accepted)
    assert result["spec_decode_acceptance_length"] == pytest.approx(1 + accepted)
    assert result["spec_decode_per_position_acceptance_rates"] == [1.0, 1.0, 0.0]
    assert result["total_output_tokens"] == prompts * output_len
    # one chunk per step: the client sees `steps` gaps per request
    step_ms = TPOT_MS * (1 + k * 0.05)
    assert result["median_e2el_ms"] >= TTFT_MS + steps * step_ms
    assert "---------------Speculative Decoding---------------" in done.stdout


def test_missing_draft_model_fails_the_load(server, sandbox):
    draft = sandbox.root / "models" / "no-such-draft"
    server.start("--speculative-config", json.dumps({
        "method": "draft_model", "model": str(draft), "num_speculative_tokens": 4}))
    assert server.wait_exit() != 0
    log = server.log()
    # after the normal start-up lines, in vLLM's log style, naming the missing draft model
    failure = f"OSError: Incorrect path_or_model_id: '{draft}'"
    assert failure in log
    assert log.index("Loading weights took") < log.index(failure)
    assert re.search(r"^\(EngineCore_DP0 pid=\d+\) ERROR .* EngineCore failed to start\.$", log, re.M)
    assert "RuntimeError: Engine core initialization failed." in log
    assert "Application startup complete." not in log


@pytest.mark.parametrize("config, code, message", [
    ("{not json", 2, "cannot be converted to <function loads>"),
    ('{"num_speculative_tokens": 3}', 1, "speculative_config.method"),
    ('{"method": "medusa2", "num_speculative_tokens": 3}', 1, "Input should be 'ngram'"),
    ('{"method": "ngram"}', 1, "num_speculative_tokens"),
])
def test_bad_speculative_config_fails_before_loading(server, config, code, message):
    server.start("--speculative-config", config)
    assert server.wait_exit() == code
    log = server.log()
    assert message in log
    assert "Loading safetensors checkpoint shards" not in log


# ---------------------------------------------------------------- --max-num-seqs

def test_max_num_seqs_makes_requests_wait(server, sandbox, tmp_path):
    server.start("--max-num-seqs", "1", env=KNOBS)
    server.wait_ready()
    prompts, output_len = 3, 4
    done, result = bench(sandbox, "--num-prompts", str(prompts), "--random-input-len", "3",
                         "--random-output-len", str(output_len), "--max-concurrency", "3",
                         port=server.port, tmp_path=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (result["completed"], result["failed"]) == (prompts, 0)
    one = (TTFT_MS + (output_len - 1) * TPOT_MS) / 1000  # a request alone, at least
    # one at a time: from the first start to the last end, all three ran one after another
    assert result["duration"] >= prompts * one
    # and the last one waited for others. Each latency counts from its own start, which comes a
    # little after the first one's (the client sends them in turn), so it need not reach three
    # requests' time: more than two says it waited for at least one other.
    assert max(result["latencies"]) > 2 * one
    metrics = server.get("/metrics").text
    assert counter(metrics, "vllm:num_requests_waiting") == 0.0
    assert counter(metrics, "vllm:request_success_total") is not None


# ---------------------------------------------------------------- the custom dataset (a prompts file)

def test_a_prompts_file_is_sent_as_vllms_custom_dataset(server, sandbox, tmp_path):
    server.start(env=KNOBS)
    server.wait_ready()
    prompts = tmp_path / "prompts.jsonl"
    # three prompts of four words each; five requests: the file is repeated to reach them
    prompts.write_text("".join(json.dumps({"prompt": f"def f{i}(a, b):"}) + "\n" + ("\n" if i == 1 else "")
                               for i in range(3)))
    done, result = bench(sandbox, "--dataset-name", "custom", "--dataset-path", str(prompts),
                         "--custom-output-len", "3", "--num-prompts", "5", "--max-concurrency", "2",
                         port=server.port, tmp_path=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert list(result) == BENCH_RESULT_KEYS
    assert (result["completed"], result["failed"]) == (5, 0)
    assert (result["total_input_tokens"], result["total_output_tokens"]) == (5 * 3, 5 * 3)
    no_more, result = bench(sandbox, "--dataset-name", "custom", "--dataset-path", str(prompts),
                            "--custom-output-len", "3", "--num-prompts", "5", "--no-oversample",
                            port=server.port, tmp_path=tmp_path, name="once.json")
    assert no_more.returncode == 0 and result["completed"] == 3


@pytest.mark.parametrize(("name", "text", "extra", "words"), [
    ("p.json", '{"prompt": "x"}\n', [], "NotImplementedError: Only JSONL format is supported for CustomDataset."),
    ("p.jsonl", '{"text": "x"}\n', [], "ValueError: JSONL file must contain a 'prompt' column."),
    ("p.jsonl", '{"prompt": "x"}\n', ["--custom-output-len", "-1"], "must contain an 'output_tokens' field"),
    ("p.jsonl", '{"prompt": "x"}\n', ["--dataset-name", "random"], "Cannot use 'random' dataset with --dataset-path"),
])
def test_a_prompts_file_vllm_refuses_is_refused_in_its_words(sandbox, tmp_path, name, text, extra, words):
    path = tmp_path / name
    path.write_text(text)
    done, _ = bench(sandbox, "--model", str(sandbox.model), "--tokenizer", str(sandbox.model),
                    "--dataset-name", "custom", "--dataset-path", str(path), "--num-prompts", "1", *extra)
    assert done.returncode == 1, done.stdout + done.stderr
    assert words in done.stderr
