#!/usr/bin/python
"""Warm up, profile a batch of requests and stop the profiler; see DOCUMENTATION."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: vllm_profile_run
short_description: Run the profiled requests of a campaign against a vLLM server on the host
description:
  - Sends O(warmup_requests) completions, then C(POST /start_profile) with the campaign's
    O(profile_prefix), then O(requests) streamed completions, O(concurrency) at a time, timing
    each one's first token (TTFT) and the time per further output token (TPOT), then
    C(POST /stop_profile), which returns only when every rank has written its trace.
  - Once the profiler was started it is always stopped, also when requests failed.
  - With O(fabric_nvidia_smi), reads the GPUs' PCIe links while the profiled requests run (from the
    first token on, every O(fabric_interval_s), until they end), keeping per GPU the reading with its
    link most up, and once the processes on the GPUs and the read peer-to-peer matrix; returned as
    RV(fabric), judged on the controller (C(vllm_ops.fabric)). Failing to read is recorded, never an error.
  - Runs on the host itself against the loopback address the profiling variant listens on.
options:
  base_url:
    description: The server, e.g. C(http://127.0.0.1:8000).
    type: str
    required: true
  model:
    description: The served model name (C(model) of each request).
    type: str
    required: true
  api_key:
    description: Bearer token for C(/v1) paths, if the server has one.
    type: str
    default: ""
  prompt:
    description: The prompt of every request.
    type: str
    required: true
  output_tokens:
    description: C(max_tokens) of every request.
    type: int
    default: 64
  requests:
    description: Profiled requests.
    type: int
    default: 8
  concurrency:
    description: Profiled requests in flight at once (1 = batch size 1).
    type: int
    default: 1
  warmup_requests:
    description: Requests sent before the profiler starts.
    type: int
    default: 2
  profile_prefix:
    description: Prefix of this campaign's trace files.
    type: str
    required: true
  max_iterations:
    description:
      - Engine steps the capture lasts at most, sent in the C(/start_profile) body; 0 sends none (the
        server's own C(max_iterations) applies). A live campaign on an armed service sets it.
    type: int
    default: 0
  request_timeout_s:
    description: Seconds one request may take.
    type: float
    default: 600
  stop_timeout_s:
    description: Seconds C(/stop_profile) may take (it waits for every rank's trace).
    type: float
    default: 1800
  fabric_nvidia_smi:
    description: The host's nvidia-smi, asked for the PCIe links during the profiled requests; empty reads none.
    type: str
    default: ""
  fabric_interval_s:
    description: Seconds between two readings of the links (each is one nvidia-smi run beside the server).
    type: float
    default: 2
author: vllm-ops maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Profile three streamed requests on the running server
  vllm_ops.serving.vllm_profile_run:
    base_url: http://127.0.0.1:8000
    model: kimi-k2.5
    prompt: Explain the all-reduce in tensor parallel inference.
    output_tokens: 128
    requests: 3
    warmup_requests: 2
    profile_prefix: campaign-20261205
  register: profiled
"""

RETURN = r"""
ttft_ms:
  description: Time to first token of each profiled request, in ms.
  type: list
  elements: float
  returned: always
tpot_ms:
  description: Time per output token after the first, of each profiled request, in ms.
  type: list
  elements: float
  returned: always
stop_profile_s:
  description: Seconds C(/stop_profile) took.
  type: float
  returned: always
vllm_version:
  description: The server's version (C(GET /version)).
  type: str
  returned: always
fabric:
  description:
    - What was read of the PCIe links - C(read), C(reason) (why not), C(during), C(interval_s), C(samples),
      C(failed_samples), C(query) (the fields asked), C(gpus) (per GPU the reading kept - C(index), C(bus_id),
      C(uuid), C(gen_current), C(gen_max), C(gen_gpu_max), C(gen_host_max), C(width_current), C(width_max),
      C(utilization_pct), C(at_s)), C(compute_apps), C(p2p_read) (the text of topo -p2p r), C(errors).
  type: dict
  returned: always
"""

import json
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.vllm_ops.serving.plugins.module_utils import profiler
from ansible_collections.vllm_ops.serving.plugins.module_utils.loopback import open_loopback
from ansible_collections.vllm_ops.serving.plugins.module_utils.vllm_fabric_lib import Sampler, not_asked


class CampaignError(Exception):
    pass


def stream_completion(base_url, headers, body, timeout, on_token=None):
    """One streamed completion: (ttft_ms, tpot_ms or None, tokens); ``on_token`` is called at each token."""
    request = urllib.request.Request(
        base_url + "/v1/completions", data=json.dumps(dict(body, stream=True)).encode(), method="POST",
        # the project's own requests, which the traffic recorder counts and does not record
        headers=dict({"Content-Type": "application/json", "x-vllm-ops-job": "campaign"}, **headers))
    started = time.monotonic()
    first = last = None
    tokens = 0
    try:
        with open_loopback(request, timeout=timeout) as response:  # loopback only
            for raw in response:
                line = raw.decode("utf-8", "replace").strip()
                if not line.startswith("data:"):
                    continue
                payload = line[5:].strip()
                if payload == "[DONE]":
                    break
                chunk = json.loads(payload)
                if any(choice.get("text") for choice in chunk.get("choices", [])):
                    now = time.monotonic()
                    first = first if first is not None else now
                    last = now
                    tokens += 1
                    if on_token is not None:
                        on_token()
    except urllib.error.HTTPError as exc:
        raise CampaignError("completion answered %s: %s" % (exc.code, exc.read()[:200])) from exc
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise CampaignError("completion failed: %s" % getattr(exc, "reason", exc)) from exc
    if first is None:
        raise CampaignError("completion returned no tokens")
    tpot = (last - first) * 1000 / (tokens - 1) if tokens > 1 else None
    return (first - started) * 1000, tpot, tokens


def run(params, clock=time.monotonic, sampler=None):
    base = params["base_url"].rstrip("/")
    headers = {"Authorization": "Bearer %s" % params["api_key"]} if params["api_key"] else {}
    body = {"model": params["model"], "prompt": params["prompt"], "max_tokens": params["output_tokens"],
            "temperature": 0, "ignore_eos": True}
    timeout = params["request_timeout_s"]
    try:
        with open_loopback(base + "/version", timeout=timeout) as response:  # loopback only
            version = json.loads(response.read()).get("version", "unknown")
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise CampaignError("GET /version failed: %s" % getattr(exc, "reason", exc)) from exc
    for _ in range(params["warmup_requests"]):
        stream_completion(base, headers, body, timeout)

    try:
        profiler.start(open_loopback, base, params["profile_prefix"], params["max_iterations"], timeout)
    except profiler.ProfilerError as exc:
        raise CampaignError(str(exc)) from exc

    results, failure = [], None
    if sampler is None and params.get("fabric_nvidia_smi"):
        sampler = Sampler(params["fabric_nvidia_smi"], params.get("fabric_interval_s", 2))
    on_token = sampler.busy if sampler is not None else None
    try:
        if sampler is not None:
            sampler.start()
        with ThreadPoolExecutor(max_workers=params["concurrency"]) as pool:
            futures = [pool.submit(stream_completion, base, headers, body, timeout, on_token)
                       for _ in range(params["requests"])]
            for future in futures:
                try:
                    results.append(future.result())
                except CampaignError as exc:
                    failure = failure or exc
    finally:
        if sampler is not None:
            sampler.stop()  # before the flush: the GPUs idle from here on
        try:
            stop_s = profiler.stop(open_loopback, base, params["stop_timeout_s"], clock)
        except profiler.ProfilerError as exc:
            raise CampaignError(str(exc)) from exc
    if failure:
        raise CampaignError("profiled requests failed (the profiler was stopped): %s" % failure)
    return {
        "ttft_ms": [round(r[0], 3) for r in results],
        "tpot_ms": [round(r[1], 3) for r in results if r[1] is not None],
        "output_tokens": [r[2] for r in results],
        "stop_profile_s": round(stop_s, 3),
        "vllm_version": version,
        "fabric": sampler.record() if sampler is not None else not_asked("not asked (no nvidia-smi given)"),
    }


def main():
    module = AnsibleModule(
        argument_spec=dict(
            base_url=dict(type="str", required=True),
            model=dict(type="str", required=True),
            api_key=dict(type="str", default="", no_log=True),
            prompt=dict(type="str", required=True),
            output_tokens=dict(type="int", default=64, no_log=False),
            requests=dict(type="int", default=8),
            concurrency=dict(type="int", default=1),
            warmup_requests=dict(type="int", default=2),
            profile_prefix=dict(type="str", required=True),
            max_iterations=dict(type="int", default=0),
            request_timeout_s=dict(type="float", default=600),
            stop_timeout_s=dict(type="float", default=1800),
            fabric_nvidia_smi=dict(type="str", default=""),
            fabric_interval_s=dict(type="float", default=2),
        ),
        supports_check_mode=False,
    )
    try:
        result = run(module.params)
    except CampaignError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=True, **result)


if __name__ == "__main__":
    main()
