"""The API server's /metrics: the Prometheus families the stand-in models, with vLLM's names,
help texts, buckets and label order (as prometheus_client prints them)."""

import threading
import time

TTFT_BUCKETS = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
                2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0]
TOKEN_BUCKETS = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0,
                 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0]
# vLLM's buckets of vllm:iteration_tokens_total (tokens scheduled in one engine step).
ITERATION_BUCKETS = [1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384]
E2E_BUCKETS = [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0,
               50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0]


def build_1_2_5_buckets(max_value):
    """vLLM's ``v1/metrics/buckets.build_1_2_5_buckets``: 1, 2, 5, 10, 20, 50, ... up to ``max_value``
    included, the buckets of its ``request_tokens`` family (capped at the server's max_model_len)."""
    buckets, exponent = [], 0
    while True:
        for mantissa in (1, 2, 5):
            value = mantissa * 10**exponent
            if value > max_value:
                return buckets
            buckets.append(value)
        exponent += 1


def go_float(value):
    """A bound as prometheus_client's ``floatToGoString`` prints it (``le="1.0"``, ``"1e+06"``)."""
    text = repr(float(value))
    dot = text.find(".")
    if float(value) > 0 and dot > 6:  # Go switches to exponents sooner than Python
        return f"{text[0]}.{text[1:dot]}{text[dot + 1:]}".rstrip("0.") + f"e+0{dot - 1}"
    return text


class Histogram:
    def __init__(self, name, doc, buckets):
        self.name, self.doc, self.buckets = name, doc, buckets
        self.counts = [0] * len(buckets)
        self.sum, self.count = 0.0, 0

    def observe(self, value, times=1):
        for i, bound in enumerate(self.buckets):
            if value <= bound:
                self.counts[i] += times
        self.sum += value * times
        self.count += times

    def render(self, labels, created):
        out = [f"# HELP {self.name} {self.doc}", f"# TYPE {self.name} histogram"]
        for bound, count in zip(self.buckets, self.counts, strict=True):
            out.append(f"{self.name}_bucket{labels(le=go_float(bound))} {float(count)}")
        out.append(f"{self.name}_bucket{labels(le='+Inf')} {float(self.count)}")
        out.append(f"{self.name}_count{labels()} {float(self.count)}")
        out.append(f"{self.name}_sum{labels()} {self.sum}")
        out += [f"# HELP {self.name}_created {self.doc}",
                f"# TYPE {self.name}_created gauge", f"{self.name}_created{labels()} {created}"]
        return out


FINISHED_REASONS = ("stop", "length", "abort", "error", "repetition")


class Metrics:
    def __init__(self, model_name, max_model_len, speculative=False):
        self.model_name = model_name
        self.lock = threading.Lock()
        self.created = time.time()
        self.prompt_tokens = self.generation_tokens = self.success = 0
        self.running = self.waiting = 0
        self.speculative = speculative  # vLLM has the spec_decode families only then
        self.drafts = self.draft_tokens = self.accepted = 0
        self.accepted_per_pos = {}
        self.hists = [
            Histogram("vllm:time_to_first_token_seconds",
                      "Histogram of time to first token in seconds.", TTFT_BUCKETS),
            Histogram("vllm:inter_token_latency_seconds",
                      "Histogram of inter-token latency in seconds.", TOKEN_BUCKETS),
            Histogram("vllm:request_time_per_output_token_seconds",
                      "Histogram of time_per_output_token_seconds per request.",
                      TOKEN_BUCKETS),
            Histogram("vllm:e2e_request_latency_seconds",
                      "Histogram of e2e request latency in seconds.", E2E_BUCKETS),
        ]
        # Observed once a finished request (vLLM: per finished request, its prompt and its generated tokens).
        token_buckets = build_1_2_5_buckets(max_model_len)
        self.request_tokens = [
            Histogram("vllm:request_prompt_tokens", "Number of prefill tokens processed.", token_buckets),
            Histogram("vllm:request_generation_tokens", "Number of generation tokens processed.",
                      token_buckets),
        ]
        # Observed at each step of each request (vLLM: once a step of the whole batch), so its count
        # advances exactly while requests do: what a watch reads as the engine's progress.
        self.iteration = Histogram("vllm:iteration_tokens_total",
                                   "Histogram of number of tokens per engine_step.", ITERATION_BUCKETS)

    def stepped(self, tokens, seqs=1, step_s=None):
        """One request's part of an engine step: ``tokens`` for each of its ``seqs`` sequences, after a
        step of ``step_s`` (None: the prefill's, no inter-token latency). The engine steps once for the
        whole batch of running sequences, so the request counts its share of the step (``seqs`` over the
        batch) in vllm:iteration_tokens_total, observed at the batch's tokens: over an interval the count
        is the engine's steps and the generated tokens over it the batch, as vLLM's are."""
        with self.lock:
            batch = max(self.running, seqs)
            self.iteration.observe(tokens * batch, seqs / batch)
            self.generation_tokens += tokens * seqs
            if step_s is not None:
                self.hists[1].observe(step_s, seqs)

    def finished(self, prompt_tokens, out_tokens, ttft, tpot, e2e):
        """One finished sequence: its prompt, its generated tokens, the time to its first token, its mean
        time per output token (observed when it had more than one) and its whole latency."""
        with self.lock:
            self.prompt_tokens += prompt_tokens
            self.success += 1
            prompt_h, generation_h = self.request_tokens
            prompt_h.observe(prompt_tokens)
            generation_h.observe(out_tokens)
            ttft_h, _, tpot_h, e2e_h = self.hists
            ttft_h.observe(ttft)
            if out_tokens > 1:
                tpot_h.observe(tpot)
            e2e_h.observe(e2e)

    def speculated(self, steps, k, accepted):
        """``steps`` verification steps, each of ``k`` draft tokens of which ``accepted``."""
        with self.lock:
            self.drafts += steps
            self.draft_tokens += steps * k
            self.accepted += steps * accepted
            for pos in range(k):
                self.accepted_per_pos[pos] = self.accepted_per_pos.get(pos, 0) + (
                    steps if pos < accepted else 0)

    def labels(self, **extra):
        """Prometheus labels, sorted by name as prometheus_client prints them."""
        pairs = {"engine": "0", "model_name": self.model_name, **extra}
        return "{" + ",".join(f'{k}="{v}"' for k, v in sorted(pairs.items())) + "}"

    def render(self):
        lb = self.labels
        with self.lock:
            out = []
            for name, doc, value in (
                    ("vllm:num_requests_running", "Number of requests in model execution "
                     "batches.", self.running),
                    ("vllm:num_requests_waiting", "Number of requests waiting to be "
                     "processed.", self.waiting),
                    ("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent "
                     "usage.", 0.01 * self.running)):
                out += [f"# HELP {name} {doc}", f"# TYPE {name} gauge",
                        f"{name}{lb()} {float(value)}"]
            reasons = [{"finished_reason": r} for r in FINISHED_REASONS]
            for name, doc, series in (
                    ("vllm:prompt_tokens", "Number of prefill tokens processed.",
                     [({}, self.prompt_tokens)]),
                    ("vllm:generation_tokens", "Number of generation tokens processed.",
                     [({}, self.generation_tokens)]),
                    ("vllm:request_success", "Count of successfully processed requests.",
                     [(r, self.success if r["finished_reason"] == "length" else 0)
                      for r in reasons]),
                    ("vllm:num_preemptions", "Cumulative number of preemption from the "
                     "engine.", [({}, 0)]),
                    *self.spec_counters()):
                out += [f"# HELP {name}_total {doc}", f"# TYPE {name}_total counter"]
                out += [f"{name}_total{lb(**extra)} {float(value)}" for extra, value in series]
                out += [f"# HELP {name}_created {doc}", f"# TYPE {name}_created gauge"]
                out += [f"{name}_created{lb(**extra)} {self.created}" for extra, _ in series]
            for hist in (*self.request_tokens, self.iteration, *self.hists):  # vLLM's order
                out += hist.render(lb, self.created)
        return "\n".join(out) + "\n"

    def spec_counters(self):
        if not self.speculative:
            return []
        return [("vllm:spec_decode_num_drafts", "Number of spec decoding drafts.",
                 [({}, self.drafts)]),
                ("vllm:spec_decode_num_draft_tokens", "Number of draft tokens.",
                 [({}, self.draft_tokens)]),
                ("vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens.",
                 [({}, self.accepted)]),
                ("vllm:spec_decode_num_accepted_tokens_per_pos", "Accepted tokens per draft "
                 "position.", [({"position": str(pos)}, n)
                               for pos, n in sorted(self.accepted_per_pos.items())])]
