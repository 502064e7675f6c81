"""``vllm bench serve``: a real client of vLLM 0.32's serving benchmark (the subset the project
uses: the random, the custom and the timed_trace dataset, streamed OpenAI completions), run
against a server, the stand-in or a real vLLM. It measures each request as vLLM's
``async_request_openai_completions`` does, prints vLLM's table and saves vLLM's result JSON
(molecule/resources/standin/README.md: "vllm bench serve")."""

import argparse
import http.client
import json
import math
import os
import random
import re
import sys
import threading
import time
import traceback
import urllib.parse
import urllib.request
import zlib

from vllm_standin.vocab import FAKE_WORDS, VOCABULARY

BENCH_METRICS = (("ttft", "TTFT", "Time to First Token"),
                 ("tpot", "TPOT", "Time per Output Token (excl. 1st token)"),
                 ("itl", "ITL", "Inter-token Latency"),
                 ("e2el", "E2EL", "End-to-end Latency"))
BENCH_DATASETS = ("sharegpt", "burstgpt", "sonnet", "random", "random-mm", "random-rerank",
                  "hf", "custom", "prefix_repetition", "spec_bench", "timed_trace")


def build_bench_parser():
    parser = argparse.ArgumentParser(prog="vllm bench serve", allow_abbrev=False,
                                     description="Benchmark the online serving throughput "
                                     "(vLLM stand-in: the random, custom and timed_trace "
                                     "datasets, OpenAI completions).")
    parser.add_argument("--label", default=None)
    parser.add_argument("--backend", default="openai", choices=["openai", "vllm"])
    parser.add_argument("--base-url", default=None)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--endpoint", default="/v1/completions")
    parser.add_argument("--model", default=None)
    parser.add_argument("--tokenizer", default=None)
    parser.add_argument("--served-model-name", default=None)
    parser.add_argument("--dataset-name", default="random", choices=BENCH_DATASETS)
    parser.add_argument("--dataset-path", default=None)
    parser.add_argument("--random-input-len", type=int, default=1024)
    parser.add_argument("--random-output-len", type=int, default=128)
    parser.add_argument("--no-oversample", action="store_true")
    parser.add_argument("--skip-chat-template", action="store_true")
    parser.add_argument("--disable-shuffle", action="store_true")
    parser.add_argument("--custom-output-len", type=int, default=256)
    parser.add_argument("--timed-trace-chunk-hash-size", type=int, default=16)
    parser.add_argument("--timed-trace-sec-multiplier", type=float, default=1)
    parser.add_argument("--timed-trace-label-timestamp", default="timestamp")
    parser.add_argument("--timed-trace-label-input-length", default="input_length")
    parser.add_argument("--timed-trace-label-output-length", default="output_length")
    parser.add_argument("--timed-trace-label-hash-ids", default="hash_ids")
    parser.add_argument("--num-prompts", type=int, default=1000)
    parser.add_argument("--max-concurrency", type=int, default=None)
    parser.add_argument("--request-rate", type=float, default=float("inf"))
    parser.add_argument("--burstiness", type=float, default=1.0)
    parser.add_argument("--ignore-eos", action="store_true")
    parser.add_argument("--self-timed", action=argparse.BooleanOptionalAction, default=None)
    parser.add_argument("--num-warmups", type=int, default=0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--temperature", type=float, default=None)
    parser.add_argument("--percentile-metrics", default=None)
    parser.add_argument("--metric-percentiles", default="99")
    parser.add_argument("--save-result", action="store_true")
    parser.add_argument("--result-dir", default=None)
    parser.add_argument("--result-filename", default=None)
    parser.add_argument("--metadata", nargs="*")
    parser.add_argument("--disable-tqdm", action="store_true")
    parser.add_argument("--ready-check-timeout-sec", type=int, default=0)
    parser.add_argument("--header", metavar="KEY=VALUE", nargs="*")
    return parser


def percentile(values, p):
    """numpy.percentile's default (linear interpolation); [] counts as [0] as vLLM's
    ``np.percentile(values or 0, p)`` does."""
    xs = sorted(values) or [0.0]
    pos = (len(xs) - 1) * p / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def mean(values):
    return sum(values) / len(values) if values else 0.0


def std(values):
    """numpy.std (population, ddof 0)."""
    if not values:
        return 0.0
    m = mean(values)
    return math.sqrt(sum((v - m) ** 2 for v in values) / len(values))


class BenchOutput:
    """One request's measurements, as vLLM's RequestFuncOutput."""

    def __init__(self, prompt_len):
        self.success, self.error = False, ""
        self.ttft, self.latency, self.itl = 0.0, 0.0, []
        self.prompt_len, self.output_tokens = prompt_len, 0
        self.generated_text = ""
        self.start_time = self.client_queue_time = 0.0


# --header KEY=VALUE: sent with every request, over the backend's own headers, as vLLM's are.
EXTRA_HEADERS = {}


def bench_request(url, payload, prompt_len):
    """POST one streamed completion and time it as vLLM's async_request_openai_completions
    does: TTFT at the first chunk with choices, ITLs between later ones, latency up to the last
    one; usage gives the token counts."""
    out = BenchOutput(prompt_len)
    headers = {"Content-Type": "application/json"}
    api_key = os.environ.get("OPENAI_API_KEY")
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    headers.update(EXTRA_HEADERS)
    parts = urllib.parse.urlsplit(url)
    conn_cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    st = time.perf_counter()
    out.start_time = recent = st
    try:
        conn = conn_cls(parts.hostname, parts.port, timeout=6 * 3600)
        try:
            conn.request("POST", parts.path or "/", body=json.dumps(payload), headers=headers)
            response = conn.getresponse()
            if response.status != 200:
                out.error = response.reason or ""
                response.read()
                return out
            first = False
            while True:
                line = response.readline()
                if not line:
                    break
                line = line.decode().strip()
                if not line or line.startswith(":"):
                    continue
                chunk = line.removeprefix("data: ")
                if chunk == "[DONE]":
                    continue
                data = json.loads(chunk)
                if choices := data.get("choices"):
                    now = time.perf_counter()
                    if not first:
                        first, out.ttft = True, now - st
                    else:
                        out.itl.append(now - recent)
                    recent = now
                    out.generated_text += choices[0].get("text") or ""
                elif usage := data.get("usage"):
                    out.output_tokens = usage.get("completion_tokens")
                    if usage.get("prompt_tokens") is not None:
                        out.prompt_len = usage["prompt_tokens"]
            if first:
                out.success = True
            else:
                out.error = ("Never received a valid chunk to calculate TTFT."
                             "This response will be marked as failed!")
            out.latency = recent - st
        finally:
            conn.close()
    except Exception:
        out.success = False
        out.error = traceback.format_exc()
    return out


def bench_fetch_spec(base_url):
    """The spec_decode counters summed from /metrics, None when the server has none."""
    try:
        with urllib.request.urlopen(base_url + "/metrics", timeout=30) as response:
            text = response.read().decode()
    except OSError:
        return None
    found, totals, per_pos = False, {"drafts": 0, "draft_tokens": 0, "accepted": 0}, {}
    for line in text.splitlines():
        if not line.startswith("vllm:spec_decode"):
            continue
        parts = line.split(None, 1)
        name = parts[0].split("{")[0]
        if not name.endswith("_total"):
            continue
        found = True
        value = int(float(parts[-1]))
        if "num_drafts" in name:
            totals["drafts"] += value
        elif "num_draft_tokens" in name:
            totals["draft_tokens"] += value
        elif "num_accepted_tokens_per_pos" in name:
            match = re.search(r'position="(\d+)"', line)
            if match:
                per_pos[int(match.group(1))] = per_pos.get(int(match.group(1)), 0) + value
        elif "num_accepted_tokens" in name:
            totals["accepted"] += value
    return {**totals, "per_pos": per_pos} if found else None


def bench_first_model(base_url):
    headers = {}
    if os.environ.get("OPENAI_API_KEY"):
        headers["Authorization"] = f"Bearer {os.environ['OPENAI_API_KEY']}"
    request = urllib.request.Request(base_url + "/v1/models", headers=headers)
    with urllib.request.urlopen(request, timeout=30) as response:
        first = json.load(response)["data"][0]
    return first.get("root") or first["id"], first["id"]


def custom_samples(args):
    """vLLM's CustomDataset: a JSONL file, one ``{"prompt": ...}`` a line, shuffled with ``--seed``
    (unless ``--disable-shuffle``), answered with ``--custom-output-len`` tokens (-1: each line's
    ``output_tokens``), repeated at random (``--seed``) up to ``--num-prompts`` unless
    ``--no-oversample``. Its errors are vLLM's. The stand-in applies no chat template (it has no
    tokenizer) and counts a prompt's words as its tokens."""
    if args.dataset_path is None:
        raise ValueError("dataset_path must be provided for loading data.")
    if not args.dataset_path.endswith(".jsonl"):
        raise NotImplementedError("Only JSONL format is supported for CustomDataset.")
    with open(args.dataset_path, encoding="utf-8") as fh:
        rows = [json.loads(line) for line in fh if line.strip()]
    if not rows or not all(isinstance(row, dict) and "prompt" in row for row in rows):
        raise ValueError("JSONL file must contain a 'prompt' column.")
    random.seed(args.seed)
    if not args.disable_shuffle:
        random.shuffle(rows)
    samples = []
    for row in rows[:args.num_prompts] if args.num_prompts > 0 else rows:
        if args.custom_output_len in (None, -1):
            if "output_tokens" not in row:
                raise ValueError("If no output length is provided the custom dataset must contain an "
                                 "'output_tokens' field.")
            out = int(row["output_tokens"])
        else:
            out = args.custom_output_len
        prompt = str(row["prompt"])
        samples.append((prompt, max(1, len(prompt.split())), out, None))
    if not args.no_oversample and len(samples) < args.num_prompts:
        random.seed(args.seed)
        samples += [random.choice(samples) for _ in range(args.num_prompts - len(samples))]
    return samples


def expand_prompt(hash_ids, input_length, chunk, cache=None):
    """vLLM's ``TimedTrace._expand_prompt``: each hash id gives ``chunk`` token ids, the last only what is
    left of ``input_length``, until that is used up or the ids are. So a line whose ids were made with a
    block larger than ``chunk`` expands to ``chunk`` tokens an id: a short prompt. A chunk's ids are
    drawn once per ``f"{id}:{size}"`` (``cache``), as vLLM draws them; vLLM seeds its draw with the key's
    ``hash()``, which changes from one process to the next, the stand-in with its CRC-32, which does
    not, and draws below its vocabulary size instead of from a tokenizer's vocabulary."""
    cache = {} if cache is None else cache
    tokens, remaining = [], input_length
    for hash_id in hash_ids:
        size = chunk if remaining >= chunk else remaining
        key = f"{hash_id}:{size}"
        if key not in cache:
            cache[key] = random.Random(zlib.crc32(key.encode())).choices(range(VOCABULARY), k=size)
        tokens.extend(cache[key])
        remaining -= size
        if remaining <= 0:
            break
    return tokens


def timed_trace_samples(args):
    """vLLM's TimedTrace: a JSONL trace (Mooncake's form), read in file order, at most ``--num-prompts``
    lines, never repeated; each line's prompt is its ``hash_ids`` expanded (:func:`expand_prompt`) and
    sent as token ids, answered with its ``output_length`` tokens, at its ``timestamp`` times
    ``--timed-trace-sec-multiplier`` seconds after the run's start. The labels are the
    ``--timed-trace-label-*`` options; a missing one is vLLM's ValueError (which names the flags
    without their ``timed-trace-`` part, as vLLM's does)."""
    chunk, multiplier = int(args.timed_trace_chunk_hash_size), float(args.timed_trace_sec_multiplier)
    label_ts, label_in = args.timed_trace_label_timestamp, args.timed_trace_label_input_length
    label_out, label_ids = args.timed_trace_label_output_length, args.timed_trace_label_hash_ids
    print(f"timed-trace: chunk_size: {chunk}, sec_multiplier: {multiplier}, label_ts: \"{label_ts}\", "
          f"label_input_length: \"{label_in}\", label_output_length: \"{label_out}\", "
          f"label_hash_ids: \"{label_ids}\"")
    if args.dataset_path is None:
        raise ValueError("dataset_path must be provided for loading data.")
    with open(args.dataset_path, encoding="utf-8") as fh:
        lines = fh.readlines()
    samples, cache = [], {}
    for line in lines:
        if len(samples) >= args.num_prompts:
            break
        entry = json.loads(line.strip())
        input_length = entry.get(label_in)
        if input_length is None:
            raise ValueError(f"Input length field '{label_in}' not found in trace entry. Available fields: "
                             f"{list(entry.keys())}. Use --label-input-length to specify the correct field name.")
        output_length = entry.get(label_out)
        if output_length is None:
            raise ValueError(f"Output length field '{label_out}' not found in trace entry. Available fields: "
                             f"{list(entry.keys())}. Use --label-output-length to specify the correct field name.")
        prompt = expand_prompt(entry.get(label_ids, []), input_length, chunk, cache)
        ts_value = entry.get(label_ts)
        if ts_value is None:
            raise ValueError(f"Timestamp field '{label_ts}' not found in trace entry. Available fields: "
                             f"{list(entry.keys())}. Use --label-timestamp to specify the correct field name.")
        samples.append((prompt, len(prompt), output_length, float(ts_value) * multiplier))
    return samples


def bench_samples(args):
    """(prompt, its tokens, output tokens, timestamp or None) per request. The random dataset: prompts of
    --random-input-len words (the stand-in's tokens); the custom dataset: :func:`custom_samples`; the
    timed_trace dataset: :func:`timed_trace_samples`."""
    if args.dataset_name == "custom":
        return custom_samples(args)
    if args.dataset_name == "timed_trace":
        return timed_trace_samples(args)
    if args.dataset_path is not None:
        raise ValueError(f"Cannot use '{args.dataset_name}' dataset with --dataset-path. Please specify the "
                         "appropriate --dataset-name (e.g., 'sharegpt', 'custom', 'hf') for your dataset file: "
                         f"{args.dataset_path}")
    rng = random.Random(args.seed)
    return [(" ".join(rng.choice(FAKE_WORDS) for _ in range(max(1, args.random_input_len))),
             max(1, args.random_input_len), args.random_output_len, None)
            for _ in range(args.num_prompts)]


def bench_run_all(api_url, payloads, max_concurrency, request_rate, burstiness, seed, timestamps=None):
    """Send every request on its own thread, at most ``max_concurrency`` at once, arriving as
    vLLM's get_request spaces them (gamma intervals of mean 1/rate; none at rate inf). Self-timed
    (``timestamps``, seconds, one a request): each request is sent at the run's start plus its own
    timestamp (at once when that has passed or is not above 0), in order, rate and burstiness unused."""
    sem = threading.Semaphore(max_concurrency) if max_concurrency else None
    outputs = [None] * len(payloads)
    rng = random.Random(seed)
    start = time.perf_counter()

    def one(i, payload, prompt_len, arrival):
        if sem:
            sem.acquire()
        try:
            out = bench_request(api_url, payload, prompt_len)
        finally:
            if sem:
                sem.release()
        out.client_queue_time = out.start_time - arrival
        outputs[i] = out

    threads = []
    for i, (payload, prompt_len) in enumerate(payloads):
        if timestamps is not None:
            if timestamps[i] > 0:
                wait = start + timestamps[i] - time.perf_counter()
                if wait > 0:
                    time.sleep(wait)
        elif i and request_rate != float("inf"):
            theta = 1.0 / (request_rate * burstiness)
            time.sleep(rng.gammavariate(burstiness, theta))
        thread = threading.Thread(target=one, args=(i, payload, prompt_len, time.perf_counter()),
                                  daemon=True)
        thread.start()
        threads.append(thread)
    for thread in threads:
        thread.join()
    return outputs


def bench_metrics(outputs, duration):
    """vLLM's calculate_metrics for generation."""
    lens, ttfts, tpots, itls, e2els = [], [], [], [], []
    total_input = completed = 0
    for out in outputs:
        if not out.success:
            lens.append(0)
            continue
        n = out.output_tokens or len(out.generated_text.split())
        lens.append(n)
        total_input += out.prompt_len
        if n > 1:
            tpots.append((out.latency - out.ttft) / (n - 1))
        itls += out.itl
        ttfts.append(out.ttft)
        e2els.append(out.latency)
        completed += 1
    good = [out for out in outputs if out.success]
    max_tps, max_conc = 0.0, 0
    if good:
        t0 = min(out.start_time for out in good)
        seconds = math.ceil(max(out.start_time + out.latency for out in good) - t0) + 1
        tokens, conc = [0] * seconds, [0] * seconds
        for out in good:
            times = [out.start_time + out.ttft]
            for gap in out.itl:
                times.append(times[-1] + gap)
            for stamp in times:
                if 0 <= int(stamp - t0) < seconds:
                    tokens[int(stamp - t0)] += 1
            for sec in range(int(out.start_time - t0), int(out.start_time + out.latency - t0) + 1):
                conc[sec] += 1
        max_tps, max_conc = float(max(tokens)), int(max(conc))
    total_output = sum(lens)
    return {"completed": completed, "failed": len(outputs) - completed,
            "total_input": total_input, "total_output": total_output,
            "request_throughput": completed / duration,
            "output_throughput": total_output / duration,
            "total_token_throughput": (total_input + total_output) / duration,
            "values": {"ttft": ttfts, "tpot": tpots, "itl": itls, "e2el": e2els},
            "max_output_tokens_per_s": max_tps, "max_concurrent_requests": max_conc}


def bench_print(fmt, label, value):
    print(("{:<40} " + fmt).format(label, value))


def bench_main(argv):
    if argv[:1] != ["serve"]:
        print("usage: vllm bench serve [options]   (vLLM stand-in: only 'bench serve' is "
              "modelled)", file=sys.stderr)
        return 2
    args = build_bench_parser().parse_args(argv[1:])
    if args.dataset_name not in ("random", "custom", "timed_trace"):
        build_bench_parser().error(f"argument --dataset-name: the stand-in models only "
                                   f"'random', 'custom' and 'timed_trace', not {args.dataset_name!r}")
    shown = vars(args).copy()
    print("Namespace(" + ", ".join(f"{k}={v!r}" for k, v in shown.items()) + ")", flush=True)
    try:
        return bench_serve(args)
    except (ValueError, OSError, NotImplementedError):
        traceback.print_exc()  # vLLM dies of the exception: its traceback, exit status 1
        return 1


def bench_serve(args):
    if args.max_concurrency is not None and args.max_concurrency <= 0:
        raise ValueError("--max-concurrency must be greater than 0")
    if not args.endpoint.endswith(("completions", "profile")):
        raise ValueError("OpenAI Completions API URL must end with 'completions' or 'profile'.")
    for header in args.header or []:
        if "=" not in header:
            raise ValueError("Invalid header format. Please use KEY=VALUE format.")
        key, value = header.split("=", 1)
        EXTRA_HEADERS[key.strip()] = value.strip()
    random.seed(args.seed)
    if args.base_url is not None:
        base_url = args.base_url
    else:
        base_url = f"http://{f'[{args.host}]' if ':' in args.host else args.host}:{args.port}"
    api_url = base_url + args.endpoint
    if args.model is None:
        print("Model not specified, fetching first model from server...")
        model_id, model_name = bench_first_model(base_url)
        print(f"First model name: {model_name}, first model id: {model_id}")
    else:
        model_id, model_name = args.model, args.served_model_name
    tokenizer_id = args.tokenizer if args.tokenizer is not None else model_id
    if not os.path.isdir(tokenizer_id):
        # transformers' AutoTokenizer, offline or for a name that is no repo
        raise OSError(f"Can't load tokenizer for '{tokenizer_id}'. If you were trying to load it "
                      "from 'https://huggingface.co/models', make sure you don't have a local "
                      f"directory with the same name. Otherwise, make sure '{tokenizer_id}' is "
                      "the correct path to a directory containing all relevant files for a "
                      "tokenizer. (stand-in: the tokenizer must be a local directory)")
    metadata = {}
    for item in args.metadata or []:
        if "=" not in item:
            raise ValueError("Invalid metadata format. Please use KEY=VALUE format.")
        key, value = item.split("=", 1)
        metadata[key.strip()] = value.strip()
    # vLLM: the random dataset on an OpenAI backend always ignores EOS; another, when asked
    ignore_eos = args.ignore_eos or args.dataset_name == "random"
    if args.dataset_name == "timed_trace":
        # vLLM: a trace's output lengths are kept (EOS ignored) and its timestamps used unless
        # --no-self-timed
        ignore_eos = True
        if args.self_timed is None:
            args.self_timed = True
    elif args.self_timed is not None:
        raise ValueError("--self-timed/--no-self-timed is only supported with --dataset-name=timed_trace")
    else:
        args.self_timed = False
    sampling = {} if args.temperature is None else {"temperature": args.temperature}
    if not sampling:
        print("WARNING: vllm bench serve no longer sets temperature==0 (greedy) in requests by "
              "default. The default will be determined on the server side and can be "
              "model/API specific. For the old behavior, include --temperature=0.")
    metric_names = (args.percentile_metrics or "ttft,tpot,itl").split(",")
    percentiles = [float(p) for p in args.metric_percentiles.split(",")]

    def payload(prompt, output_len):
        body = {"model": model_name or model_id, "prompt": prompt, "repetition_penalty": 1.0,
                "max_tokens": output_len, "logprobs": None, "stream": True,
                "stream_options": {"include_usage": True}}
        if ignore_eos:
            body["ignore_eos"] = True
        return {**body, **sampling}

    samples = bench_samples(args)
    if not samples:
        raise ValueError("--num-prompts must be greater than 0")
    test = (payload(samples[0][0], samples[0][2]), samples[0][1])
    print("Starting initial single prompt test run...")
    if args.ready_check_timeout_sec > 0:
        deadline = time.monotonic() + args.ready_check_timeout_sec
        print(f"Waiting for endpoint to become up in {args.ready_check_timeout_sec} seconds")
        while True:
            probe = bench_request(api_url, *test)
            remaining = deadline - time.monotonic()
            if probe.success or remaining <= 0:
                break
            time.sleep(min(5, remaining))
        if not probe.success:
            raise ValueError("Initial test run failed - Please make sure benchmark arguments "
                             f"are correctly specified. Error: {probe.error}")
        print("Initial test run completed.")
    else:
        print("Skipping endpoint ready check.")
    if args.num_warmups > 0:
        print(f"Warming up with {args.num_warmups} requests...")
        bench_run_all(api_url, [test] * args.num_warmups, args.max_concurrency,
                      float("inf"), 1.0, args.seed)
        print("Warmup run completed.")
    print("Starting main benchmark run...")
    if not args.self_timed:
        print(f"Traffic request rate: {args.request_rate}")
        distribution = "Poisson process" if args.burstiness == 1.0 else "Gamma distribution"
        print(f"Burstiness factor: {args.burstiness} ({distribution})")
        print(f"Maximum request concurrency: {args.max_concurrency}", flush=True)
    else:
        print("Self timing is set, using the timestamps from the trace file.", flush=True)
    spec_before = bench_fetch_spec(base_url)
    t0 = time.perf_counter()
    outputs = bench_run_all(api_url, [(payload(p, o), n) for p, n, o, _ in samples],
                            args.max_concurrency, args.request_rate, args.burstiness, args.seed,
                            [ts or 0.0 for *_, ts in samples] if args.self_timed else None)
    duration = time.perf_counter() - t0
    spec_after = bench_fetch_spec(base_url)
    m = bench_metrics(outputs, duration)
    failed = [out for out in outputs if not out.success]
    if failed:
        print("Failed requests during benchmark run detected (capping to 10):")
        for i, out in enumerate(failed[:10]):
            print(f"Error {i}: {out.error}")
    spec = None
    if spec_before is not None and spec_after is not None:
        delta = {key: spec_after[key] - spec_before[key]
                 for key in ("drafts", "draft_tokens", "accepted")}
        if delta["draft_tokens"] > 0:
            positions = sorted(set(spec_before["per_pos"]) | set(spec_after["per_pos"]))
            spec = {**delta, "rate": delta["accepted"] / delta["draft_tokens"] * 100,
                    "length": 1 + delta["accepted"] / delta["drafts"] if delta["drafts"] else 0.0,
                    "per_pos": [(spec_after["per_pos"].get(pos, 0)
                                 - spec_before["per_pos"].get(pos, 0)) / delta["drafts"]
                                for pos in positions] if delta["drafts"] else []}

    print("{s:{c}^{n}}".format(s=" Serving Benchmark Result ", n=50, c="="))
    bench_print("{:<10}", "Successful requests:", m["completed"])
    bench_print("{:<10}", "Failed requests:", m["failed"])
    if args.max_concurrency is not None:
        bench_print("{:<10}", "Maximum request concurrency:", args.max_concurrency)
    if args.request_rate != float("inf"):
        bench_print("{:<10.2f}", "Request rate configured (RPS):", args.request_rate)
    bench_print("{:<10.2f}", "Benchmark duration (s):", duration)
    bench_print("{:<10}", "Total input tokens:", m["total_input"])
    bench_print("{:<10}", "Total generated tokens:", m["total_output"])
    bench_print("{:<10.2f}", "Request throughput (req/s):", m["request_throughput"])
    bench_print("{:<10.2f}", "Output token throughput (tok/s):", m["output_throughput"])
    bench_print("{:<10.2f}", "Peak output token throughput (tok/s):", m["max_output_tokens_per_s"])
    bench_print("{:<10.2f}", "Peak concurrent requests:", m["max_concurrent_requests"])
    bench_print("{:<10.2f}", "Total token throughput (tok/s):", m["total_token_throughput"])

    result = {"date": time.strftime("%Y%m%d-%H%M%S"), "endpoint_type": args.backend,
              "backend": args.backend, "label": args.label, "model_id": model_id,
              "tokenizer_id": tokenizer_id, "num_prompts": args.num_prompts, **metadata,
              "request_rate": args.request_rate if args.request_rate < float("inf") else "inf",
              "burstiness": args.burstiness, "max_concurrency": args.max_concurrency,
              "duration": duration, "completed": m["completed"], "failed": m["failed"],
              "total_input_tokens": m["total_input"], "total_output_tokens": m["total_output"],
              "request_throughput": m["request_throughput"], "request_goodput": None,
              "output_throughput": m["output_throughput"],
              "total_token_throughput": m["total_token_throughput"],
              "latencies": [out.latency for out in outputs],
              "queue_times": [out.client_queue_time for out in outputs],
              "max_output_tokens_per_s": m["max_output_tokens_per_s"],
              "max_concurrent_requests": m["max_concurrent_requests"], "rtfx": 0.0}
    if spec is not None:
        result.update(spec_decode_acceptance_rate=spec["rate"],
                      spec_decode_acceptance_length=spec["length"],
                      spec_decode_num_drafts=spec["drafts"],
                      spec_decode_draft_tokens=spec["draft_tokens"],
                      spec_decode_accepted_tokens=spec["accepted"],
                      spec_decode_per_position_acceptance_rates=spec["per_pos"])
    for name, title, header in BENCH_METRICS:
        if name not in metric_names:
            continue
        values = m["values"][name]
        print("{s:{c}^{n}}".format(s=header, n=50, c="-"))
        result[f"mean_{name}_ms"] = mean(values) * 1000
        result[f"median_{name}_ms"] = percentile(values, 50) * 1000
        result[f"std_{name}_ms"] = std(values) * 1000
        bench_print("{:<10.2f}", f"Mean {title} (ms):", result[f"mean_{name}_ms"])
        bench_print("{:<10.2f}", f"Median {title} (ms):", result[f"median_{name}_ms"])
        for p in percentiles:
            word = str(int(p)) if int(p) == p else str(p)
            result[f"p{word}_{name}_ms"] = percentile(values, p) * 1000
            bench_print("{:<10.2f}", f"P{word} {title} (ms):", result[f"p{word}_{name}_ms"])
    if spec is not None:
        print("{s:{c}^{n}}".format(s="Speculative Decoding", n=50, c="-"))
        bench_print("{:<10.2f}", "Acceptance rate (%):", spec["rate"])
        bench_print("{:<10.2f}", "Acceptance length:", spec["length"])
        bench_print("{:<10}", "Drafts:", spec["drafts"])
        bench_print("{:<10}", "Draft tokens:", spec["draft_tokens"])
        bench_print("{:<10}", "Accepted tokens:", spec["accepted"])
        if spec["per_pos"]:
            print("Per-position acceptance (%):")
            for i, rate in enumerate(spec["per_pos"]):
                bench_print("{:<10.2f}", f"  Position {i}:", rate * 100)
    print("=" * 50, flush=True)

    if args.save_result:
        name = args.result_filename or (
            f"{args.label or args.backend}-{args.request_rate}qps"
            f"{f'-concurrency{args.max_concurrency}' if args.max_concurrency is not None else ''}"
            f"-{model_id.split('/')[-1]}-{result['date']}.json")
        if args.result_dir:
            os.makedirs(args.result_dir, exist_ok=True)
            name = os.path.join(args.result_dir, name)
        with open(name, "w", encoding="utf-8") as fh:
            json.dump(result, fh)
    return 0
