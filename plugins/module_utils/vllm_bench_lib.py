"""What the experiment's benchmark module does on the host, in plain functions (unit-tested).

Standard library and the loopback opener beside it: it runs on the vLLM hosts with their own Python.
"""

from __future__ import annotations

import json
import re

from ansible_collections.vllm_ops.serving.plugins.module_utils.loopback import open_loopback

# /metrics counters an experiment reads before and after each run (vLLM 0.32 names, without the
# ``vllm:`` prefix). Absent ones stay absent: spec_decode_* exist only on a speculating server.
COUNTERS = (
    "spec_decode_num_drafts_total",
    "spec_decode_num_draft_tokens_total",
    "spec_decode_num_accepted_tokens_total",
    "num_preemptions_total",
    "request_success_total",
    # what a replay's fidelity check reads: the tokens the server saw (vllm_ops.traffic.fidelity)
    "prompt_tokens_total",
    "generation_tokens_total",
)
# Histograms read the same way, as {le: count} summed over label sets: the lengths of the requests the
# server saw, which a replay's fidelity check compares with the recording's.
HISTOGRAMS = ("request_prompt_tokens", "request_generation_tokens")

# ``name{labels} value [timestamp]`` of the Prometheus text format; labels may hold spaces and braces
# inside quotes.
_SAMPLE = re.compile(r'^(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)(?:\{(?:[^"}]|"(?:[^"\\]|\\.)*")*\})?\s+(?P<value>\S+)')
_LE = re.compile(r'[{,]le="(?P<le>[^"]*)"')


def _samples(text, wanted):
    """``(name, line, value)`` of each sample of Prometheus text whose name is in ``wanted``."""
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        if not match or match.group("name") not in wanted:
            continue
        try:
            yield match.group("name"), line, float(match.group("value"))
        except ValueError:
            continue


def counters(text, names=COUNTERS, prefix="vllm:"):
    """Sum each counter in ``names`` over its label sets, from Prometheus text; absent: not a key."""
    wanted = {prefix + name: name for name in names}
    found = {}
    for name, _line, value in _samples(text, wanted):
        found[wanted[name]] = found.get(wanted[name], 0.0) + value
    return found


def buckets(text, names=HISTOGRAMS, prefix="vllm:"):
    """Each histogram of ``names`` as ``{le: cumulative count}`` (``le`` as the page writes it, ``+Inf``
    included) summed over its label sets, from Prometheus text; absent: not a key."""
    wanted = {prefix + name + "_bucket": name for name in names}
    found = {}
    for name, line, value in _samples(text, wanted):
        le = _LE.search(line)
        if le:
            counts = found.setdefault(wanted[name], {})
            counts[le.group("le")] = counts.get(le.group("le"), 0.0) + value
    return found


def deltas(before, after):
    """``after - before`` for each counter present after (a counter reset reads as after alone); a
    value that is itself a mapping (a histogram's buckets) is differenced key by key."""
    out = {}
    for name, value in after.items():
        if isinstance(value, dict):
            out[name] = deltas(before.get(name) or {}, value)
            continue
        delta = value - before.get(name, 0.0)
        out[name] = value if delta < 0 else delta
    return out


def read_metrics(url, timeout_s=10.0):
    """The counters of a server's /metrics page, and under ``histograms`` its histograms of
    :data:`HISTOGRAMS` (None when it does not answer: said by the caller)."""
    try:
        with open_loopback(url, timeout=timeout_s) as answer:
            text = answer.read().decode("utf-8", "replace")
    except OSError:
        return None
    return dict(counters(text), histograms=buckets(text))


# The header every request of the project's own carries (plugins/module_utils/traffic.py OWN_HEADER).
OWN_LOAD_HEADER = "x-vllm-ops-job=vllm-bench"


def bench_argv(params):
    """The ``vllm bench serve`` command line for one point of an experiment.

    The load is vLLM's random dataset, or with ``dataset_path`` its custom dataset (a JSONL file
    of ``{"prompt": ...}`` lines, each answered with ``output_len`` tokens: ``--custom-output-len``),
    EOS ignored either way so every request makes the same number of tokens; or with ``traffic_path``
    a recording's replay (``timed_trace``: its own arrivals, lengths and shared prefixes, no
    ``--max-concurrency``). ``--temperature`` is
    pinned (``temperature``, 0 unless given: vLLM's benchmark no longer asks for greedy sampling by
    default, so the server's default sampler would be measured); ``extra_args`` come last, so a
    ``--temperature`` among them wins."""
    argv = [
        params["executable"], "bench", "serve",
        "--base-url", params["base_url"],
        "--model", params["model"],
        "--tokenizer", params["tokenizer"],
        # the project's own load, which the traffic recorder counts and does not record
        "--header", OWN_LOAD_HEADER,
    ]
    if params.get("traffic_path"):
        # vLLM's replay of a Mooncake trace: each request at its timestamp (milliseconds, scaled by the
        # speed), its prompt made of one chunk of random tokens per hash id, the recording's block a chunk.
        argv += ["--dataset-name", "timed_trace", "--dataset-path", params["traffic_path"],
                 "--timed-trace-chunk-hash-size", str(params["traffic_block"]),
                 "--timed-trace-sec-multiplier", format_number(0.001 / float(params.get("traffic_speed") or 1))]
    elif params.get("dataset_path"):
        argv += ["--dataset-name", "custom", "--dataset-path", params["dataset_path"],
                 "--custom-output-len", str(params["output_len"])]
    else:
        argv += ["--dataset-name", "random",
                 "--random-input-len", str(params["input_len"]),
                 "--random-output-len", str(params["output_len"])]
    argv += ["--num-prompts", str(params["num_prompts"])]
    if not params.get("traffic_path"):
        # a replay's arrivals are the recording's: no cap, no rate of its own
        argv += ["--max-concurrency", str(params["concurrency"]), "--request-rate", "inf"]
    argv += [
        "--ignore-eos",
        "--num-warmups", str(params["warmups"]),
        "--seed", str(params["seed"]),
    ]
    temperature = params.get("temperature", 0)
    if temperature is not None:
        argv += ["--temperature", format_number(temperature)]
    argv += [
        "--percentile-metrics", "ttft,tpot,itl,e2el",
        "--metric-percentiles", "50,90,99",
        "--save-result",
        "--result-dir", params["result_dir"],
        "--result-filename", params["result_filename"],
    ]
    return argv + [str(a) for a in params.get("extra_args") or []]


def format_number(value):
    """``0`` for 0.0, ``0.7`` for 0.7: a float as short as it reads."""
    number = float(value)
    return str(int(number)) if number.is_integer() else repr(number)


def summary(result):
    """The few figures of a result worth a line in the play's output."""
    keys = ("completed", "failed", "duration", "median_ttft_ms", "median_tpot_ms", "p99_tpot_ms",
            "output_throughput")
    return {key: result.get(key) for key in keys}


def load_result(path):
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)
