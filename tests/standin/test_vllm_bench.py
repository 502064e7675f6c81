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
    (["bench", "serve", "--help"], 0, "--self-timed, --no-self-timed"),
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


# ---------------------------------------------------------------- the timed_trace dataset (a recorded trace)

BLOCK = 64  # the block the trace's hash_ids stand for (the recorder's); vLLM's default chunk is 16
DEFAULT_CHUNK = 16
# (timestamp in ms, input_length, output_length, hash_ids): one id a block, ceil(input / BLOCK) of them;
# the second line shares the first's leading block
TRACE = [(0, 150, 3, [0, 1, 2]), (100, 64, 2, [0]), (250, 200, 4, [3, 4, 5, 6]), (400, 40, 2, [7])]


def write_trace(path, lines=TRACE):
    path.write_text("".join(json.dumps({"timestamp": ts, "input_length": n, "output_length": out, "hash_ids": ids})
                            + "\n" for ts, n, out, ids in lines))
    return path


def test_a_trace_line_expands_as_vllms_timed_trace():
    expand = load_standin().expand_prompt
    for _, length, _, ids in TRACE:
        assert len(ids) == math.ceil(length / BLOCK)
        assert len(expand(ids, length, BLOCK)) == length
        # vLLM's chunk-size trap: at a smaller chunk each id gives only that chunk's tokens
        assert len(expand(ids, length, DEFAULT_CHUNK)) == min(length, DEFAULT_CHUNK * len(ids))
    first, second = expand([0, 1, 2], 150, BLOCK), expand([0], 64, BLOCK)
    assert first[:BLOCK] == second, "a shared leading id gives the same leading tokens"
    assert expand([9], 64, BLOCK) != second
    # the last chunk is partial, drawn for its own size (vLLM's key is "id:size")
    assert first[2 * BLOCK:] == expand([2], 150 - 2 * BLOCK, BLOCK)
    assert first[2 * BLOCK:] != expand([2], BLOCK, BLOCK)[:150 - 2 * BLOCK]
    assert first == expand([0, 1, 2], 150, BLOCK), "stable from one call (and process) to the next"
    assert all(isinstance(t, int) and 0 <= t < 163840 for t in first)
    assert expand([0, 1], 0, BLOCK) == expand([], 150, BLOCK) == []
    assert len(expand([0, 1, 2, 3], 100, BLOCK)) == 100, "ids left over once the length is reached are unused"


def test_timed_trace_reads_lines_in_order_up_to_num_prompts(tmp_path):
    standin = load_standin()
    args = standin.build_bench_parser().parse_args([
        "--dataset-name", "timed_trace", "--dataset-path", str(write_trace(tmp_path / "t.jsonl")),
        "--num-prompts", "3", "--timed-trace-sec-multiplier", "0.001", "--timed-trace-chunk-hash-size", str(BLOCK)])
    samples = standin.bench_samples(args)
    assert [(n, out, ts) for _, n, out, ts in samples] == [(n, out, ts * 0.001) for ts, n, out, _ in TRACE[:3]]
    assert [len(prompt) for prompt, *_ in samples] == [n for _, n, _, _ in TRACE[:3]]


@pytest.mark.parametrize(("row", "extra", "words"), [
    ({"timestamp": 0, "output_length": 2}, [],
     "ValueError: Input length field 'input_length' not found in trace entry. Available fields: "
     "['timestamp', 'output_length']. Use --label-input-length to specify the correct field name."),
    ({"timestamp": 0, "input_length": 2}, [], "ValueError: Output length field 'output_length' not found"),
    ({"input_length": 2, "output_length": 2}, [], "ValueError: Timestamp field 'timestamp' not found"),
    ({"t": 0, "in": 2, "out": 2}, ["--timed-trace-label-input-length", "in", "--timed-trace-label-output-length",
                                   "out", "--timed-trace-label-timestamp", "ts"],
     "ValueError: Timestamp field 'ts' not found in trace entry. Available fields: ['t', 'in', 'out']."),
    (None, [], "ValueError: dataset_path must be provided for loading data."),
])
def test_a_trace_vllm_refuses_is_refused_in_its_words(sandbox, tmp_path, row, extra, words):
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(row) + "\n")
    done, _ = bench(sandbox, "--model", str(sandbox.model), "--tokenizer", str(sandbox.model),
                    "--dataset-name", "timed_trace", "--num-prompts", "1", *extra,
                    *(["--dataset-path", str(path)] if row is not None else []))
    assert done.returncode == 1, done.stdout + done.stderr
    assert words in done.stderr


@pytest.mark.parametrize("extra", [["--self-timed"], ["--no-self-timed", "--dataset-name", "random"]])
def test_self_timed_is_for_timed_trace_only(sandbox, extra):
    done, _ = bench(sandbox, "--model", str(sandbox.model), "--tokenizer", str(sandbox.model),
                    "--num-prompts", "1", *extra)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "ValueError: --self-timed/--no-self-timed is only supported with --dataset-name=timed_trace" \
        in done.stderr


def test_a_timed_trace_is_replayed_at_its_timestamps(server, sandbox, tmp_path):
    server.start(env=KNOBS)
    server.wait_ready()
    trace = write_trace(tmp_path / "trace.jsonl")
    replay = ("--dataset-name", "timed_trace", "--dataset-path", str(trace), "--timed-trace-sec-multiplier", "0.001")

    def served(*args, name):
        before = server.get("/metrics").text
        done, result = bench(sandbox, *replay, *args, port=server.port, tmp_path=tmp_path, name=name)
        assert done.returncode == 0, done.stdout + done.stderr
        after = server.get("/metrics").text
        return done, result, {what: counter(after, f"vllm:{what}_total") - counter(before, f"vllm:{what}_total")
                              for what in ("prompt_tokens", "generation_tokens")}

    # the recording's block as the chunk: every prompt its full length; three lines of four
    done, result, delta = served("--timed-trace-chunk-hash-size", str(BLOCK), "--num-prompts", "3",
                                 "--max-concurrency", "2", name="block.json")
    lines = TRACE[:3]
    assert delta == {"prompt_tokens": sum(n for _, n, _, _ in lines),
                     "generation_tokens": sum(out for _, _, out, _ in lines)}
    assert list(result) == BENCH_RESULT_KEYS
    assert (result["completed"], result["failed"], result["num_prompts"]) == (3, 0, 3)
    assert result["total_input_tokens"] == delta["prompt_tokens"]
    assert result["duration"] >= lines[-1][0] * 0.001, "each request waits for its timestamp"
    assert "Self timing is set, using the timestamps from the trace file." in done.stdout
    assert "Traffic request rate:" not in done.stdout
    # vLLM's default chunk (16): each block id gives 16 tokens, so the prompts come out short; every
    # line once (no repeats past the file), and two warm-ups, each the first line's request
    done, result, delta = served("--num-prompts", "10", "--num-warmups", "2", name="default.json")
    short = [min(n, DEFAULT_CHUNK * len(ids)) for _, n, _, ids in TRACE]
    assert sum(short) < sum(n for _, n, _, _ in TRACE)
    assert delta["prompt_tokens"] == sum(short) + 2 * short[0]
    assert (result["completed"], result["num_prompts"], result["total_input_tokens"]) == (4, 10, sum(short))
    assert result["duration"] >= TRACE[-1][0] * 0.001
    # --no-self-timed: the request rate (inf) instead of the timestamps
    done, result, _ = served("--no-self-timed", "--num-prompts", "1", name="untimed.json")
    assert result["completed"] == 1
    assert "Traffic request rate: inf" in done.stdout and "Self timing is set" not in done.stdout
