#!/usr/bin/python
"""One point of an experiment: vLLM's own ``vllm bench serve`` on the host; see DOCUMENTATION."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: vllm_bench_serve
short_description: Run vLLM's own benchmark against the server on the host, with /metrics around it
description:
  - Runs C(vllm bench serve) (random dataset with fixed input and output lengths, or with
    O(dataset_path) vLLM's custom dataset of those prompts; C(--ignore-eos), C(--request-rate inf) with
    O(concurrency) requests in flight, C(--temperature) pinned) against O(base_url), and saves its
    JSON result as O(result_dir)/O(result_filename).
  - Reads the server's C(/metrics) counters before and after the run (speculative decoding's
    C(vllm:spec_decode_*), C(vllm:num_preemptions_total), C(vllm:request_success_total), the prompt and
    generation tokens) and its request length histograms, and returns the differences.
  - A replay (O(traffic_path)) runs with C(PYTHONHASHSEED=0) unless O(environment) sets it - vLLM draws each
    block's tokens with a seed from Python's C(hash()), so that every replay of a recording sends the same tokens.
  - Fails with the command's last output lines when it exits non-zero or writes no result.
  - Check mode runs nothing.
options:
  executable: {description: The C(vllm) command on the host., type: path, required: true}
  base_url: {description: The server as seen from the host (loopback)., type: str, required: true}
  model: {description: The model name the server serves., type: str, required: true}
  tokenizer: {description: A local directory with the model's tokenizer., type: path, required: true}
  input_len: {description: Prompt tokens per request., type: int, required: true}
  output_len: {description: Output tokens per request., type: int, required: true}
  num_prompts: {description: Requests in the run., type: int, required: true}
  concurrency: {description: Requests in flight at once (C(--max-concurrency))., type: int, required: true}
  warmups: {description: Warm-up requests before the measured ones (C(--num-warmups))., type: int, default: 0}
  seed: {description: The random dataset's seed (the same prompts for every variant)., type: int, default: 0}
  temperature:
    description: Sampling temperature of every request (C(--temperature)); 0 is greedy, what a comparison wants.
    type: float
    default: 0
  dataset_path:
    description:
      - 'A JSONL file of prompts on the host (one C({"prompt": ...}) object a line), sent instead of random
        tokens (C(--dataset-name custom)); each is answered with O(output_len) tokens. Empty - the random dataset.'
    type: path
    default: ""
  traffic_path:
    description:
      - A recording's replay file on the host (Mooncake JSONL - C(timestamp) in ms, C(input_length), C(output_length),
        C(hash_ids)), replayed with vLLM's C(timed_trace) dataset at its own arrival times instead of O(concurrency)
        requests at once (no C(--max-concurrency)); O(num_prompts) is its number of requests. Empty - not a replay.
    type: path
    default: ""
  traffic_block:
    description: The recording's block, tokens per hash id (C(--timed-trace-chunk-hash-size)); a replay only.
    type: int
    default: 64
  traffic_speed:
    description: How much faster than recorded a replay sends (C(--timed-trace-sec-multiplier) 0.001 / speed).
    type: float
    default: 1
  extra_args: {description: Further C(vllm bench serve) arguments., type: list, elements: str, default: []}
  environment: {description: Environment of the benchmark process., type: dict, default: {}}
  api_key: {description: The server's API key (passed as C(OPENAI_API_KEY))., type: str, default: ""}
  result_dir: {description: Directory for the JSON result on the host., type: path, required: true}
  result_filename: {description: The result's file name., type: str, required: true}
  metrics_url: {description: The server's C(/metrics) URL; empty reads none., type: str, default: ""}
  timeout_s: {description: Seconds the run may take before it is stopped., type: float, default: 1800}
author: vllm-ops maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Benchmark at concurrency 8
  vllm_bench_serve:
    executable: /opt/vllm/venv/bin/vllm
    base_url: http://127.0.0.1:8000
    model: kimi-k2.5
    tokenizer: /models/Kimi-K2.5-INT4
    input_len: 1024
    output_len: 256
    num_prompts: 64
    concurrency: 8
    result_dir: /var/lib/vllm-ops/experiments/20261201T120000Z/00
    result_filename: c8-r1.json
    metrics_url: http://127.0.0.1:8000/metrics
"""

RETURN = r"""
path: {description: The JSON result on the host., type: str, returned: success}
summary:
  description: Completed and failed requests, median TTFT and TPOT, throughput.
  type: dict
  returned: success
metrics:
  description: /metrics counter differences over the run (absent counters left out).
  type: dict
  returned: success
histograms:
  description: /metrics request length histograms' differences over the run, each {le - count}.
  type: dict
  returned: success
metrics_read: {description: Whether /metrics answered before and after., type: bool, returned: success}
cmd: {description: The command run., type: list, returned: always}
"""

import os
import subprocess

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.vllm_ops.serving.plugins.module_utils.vllm_bench_lib import (
    bench_argv,
    deltas,
    load_result,
    read_metrics,
    summary,
)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            executable=dict(type="path", required=True),
            base_url=dict(type="str", required=True),
            model=dict(type="str", required=True),
            tokenizer=dict(type="path", required=True),
            input_len=dict(type="int", required=True),
            output_len=dict(type="int", required=True),
            num_prompts=dict(type="int", required=True),
            concurrency=dict(type="int", required=True),
            warmups=dict(type="int", default=0),
            seed=dict(type="int", default=0),
            temperature=dict(type="float", default=0.0),
            dataset_path=dict(type="path", default=""),
            traffic_path=dict(type="path", default=""),
            traffic_block=dict(type="int", default=64),
            traffic_speed=dict(type="float", default=1.0),
            extra_args=dict(type="list", elements="str", default=[]),
            environment=dict(type="dict", default={}),
            api_key=dict(type="str", default="", no_log=True),
            result_dir=dict(type="path", required=True),
            result_filename=dict(type="str", required=True),
            metrics_url=dict(type="str", default=""),
            timeout_s=dict(type="float", default=1800),
        ),
        supports_check_mode=True,
    )
    params = module.params
    argv = bench_argv(params)
    if module.check_mode:
        module.exit_json(changed=False, cmd=argv, skipped=True, msg="check mode: nothing run")
    path = os.path.join(params["result_dir"], params["result_filename"])
    os.makedirs(params["result_dir"], mode=0o750, exist_ok=True)
    if os.path.exists(path):
        os.unlink(path)
    env = dict(os.environ, **{str(k): str(v) for k, v in params["environment"].items()})
    if params["traffic_path"] and "PYTHONHASHSEED" not in params["environment"]:
        env["PYTHONHASHSEED"] = "0"
    if params["api_key"]:
        env["OPENAI_API_KEY"] = params["api_key"]
    before = read_metrics(params["metrics_url"]) if params["metrics_url"] else None
    try:
        done = subprocess.run(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              timeout=params["timeout_s"], check=False)
    except subprocess.TimeoutExpired as exc:
        tail = (exc.stdout or b"").decode("utf-8", "replace").splitlines()[-20:]
        module.fail_json(msg="vllm bench serve ran past %d s and was stopped" % params["timeout_s"],
                         cmd=argv, output_tail=tail)
    tail = done.stdout.decode("utf-8", "replace").splitlines()[-30:]
    if done.returncode != 0 or not os.path.exists(path):
        module.fail_json(
            msg="vllm bench serve exited %d%s; its last lines: %s" % (
                done.returncode, "" if os.path.exists(path) else " and wrote no result", " | ".join(tail[-8:])),
            cmd=argv, rc=done.returncode, output_tail=tail)
    after = read_metrics(params["metrics_url"]) if params["metrics_url"] else None
    result = load_result(path)
    read = before is not None and after is not None
    metrics = deltas(before, after) if read else {}
    histograms = metrics.pop("histograms", {})
    module.exit_json(changed=True, path=path, summary=summary(result), cmd=argv, metrics=metrics,
                     histograms=histograms, metrics_read=read)


if __name__ == "__main__":
    main()
