"""``vllm serve``'s command line and the checks vLLM's config classes apply to it.

A config vLLM's pydantic validation would reject raises ``ConfigError`` (the API server
prints it as vLLM's ValidationError and exits 1) before any process is started or any shard
loaded. Also what the model directory tells (shards, size, max_model_len) and the
speculative-decoding step model."""

import argparse
import json
import math
import os
import re

from vllm_standin.knobs import env_float, release
from vllm_standin.serve_options import SERVE_OPTIONS

PROFILER_BOOL_FIELDS = {
    "torch_profiler_with_stack": True,
    "torch_profiler_use_gzip": True,
    "torch_profiler_record_shapes": False,
    "torch_profiler_with_memory": False,
    "torch_profiler_with_flops": False,
    "torch_profiler_dump_cuda_time_total": True,
    "ignore_frontend": False,
    "capture_torch_profiler": False,
    "detailed_trace_annotation": False,
}
PROFILER_INT_FIELDS = {
    "delay_iterations": 0,
    "max_iterations": 0,
    "warmup_iterations": 0,
    "active_iterations": 5,
    "wait_iterations": 0,
}


class ConfigError(Exception):
    """A config vLLM's pydantic validation would reject (exit status 1)."""


def parse_len(text):
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([kKmM]?)", text.strip())
    if not match:
        raise argparse.ArgumentTypeError(f"invalid length {text!r}")
    factor = {"": 1, "k": 1000, "K": 1024, "m": 10**6, "M": 2**20}[match.group(2)]
    return int(float(match.group(1)) * factor)


def parse_json_arg(text):
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        raise argparse.ArgumentTypeError(
            f"Value {text} cannot be converted to <function loads>.") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"Value {text} is not a JSON object.")
    return value


def build_parser():
    parser = argparse.ArgumentParser(prog="vllm serve", allow_abbrev=False)
    parser.add_argument("model_tag", nargs="?")
    parser.add_argument("--model")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--tensor-parallel-size", "-tp", type=int, default=1)
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    parser.add_argument("--max-model-len", type=parse_len)
    parser.add_argument("--served-model-name", nargs="+")
    parser.add_argument("--trust-remote-code", action="store_true")
    parser.add_argument("--tool-call-parser")
    parser.add_argument("--reasoning-parser")
    parser.add_argument("--enable-auto-tool-choice", action="store_true")
    parser.add_argument("--enforce-eager", action="store_true")
    parser.add_argument("--profiler-config", type=parse_json_arg)
    parser.add_argument("--api-key")
    parser.add_argument("--disable-uvicorn-access-log", action="store_true")
    parser.add_argument("--middleware", action="append", default=[])
    parser.add_argument("--speculative-config", "-sc", type=parse_json_arg)
    parser.add_argument("--max-num-seqs", type=int)
    parser.add_argument("--load-format")  # vLLM's default "auto" when absent (not a non-default arg)
    return parser


def split_dotted_profiler_args(unknown):
    """Pull ``--profiler-config.KEY=VALUE`` (or ``KEY VALUE``) out of unknowns."""
    dotted, rest, i = {}, [], 0
    while i < len(unknown):
        token = unknown[i]
        if token.startswith("--profiler-config."):
            key, sep, value = token[len("--profiler-config."):].partition("=")
            if not sep and i + 1 < len(unknown) and not unknown[i + 1].startswith("--"):
                value, i = unknown[i + 1], i + 1
            try:
                dotted[key] = json.loads(value)
            except json.JSONDecodeError:
                dotted[key] = value
        else:
            rest.append(token)
        i += 1
    return dotted, rest


def validate_profiler_config(raw):
    """Return the full profiler config (defaults filled in) or raise ConfigError."""
    known = {"profiler", "torch_profiler_dir", *PROFILER_BOOL_FIELDS, *PROFILER_INT_FIELDS}
    for key in raw:
        if key not in known:
            raise ConfigError(f"{key}\n  Extra inputs are not permitted "
                              f"[type=extra_forbidden, input_value={raw[key]!r}]")
    cfg = {"profiler": None, "torch_profiler_dir": "",
           **PROFILER_BOOL_FIELDS, **PROFILER_INT_FIELDS}
    for key, value in raw.items():
        if key in PROFILER_BOOL_FIELDS:
            if isinstance(value, str) and value.lower() in ("true", "false"):
                value = value.lower() == "true"
            if not isinstance(value, bool):
                raise ConfigError(f"{key}\n  Input should be a valid boolean "
                                  f"[type=bool_type, input_value={value!r}]")
        if key in PROFILER_INT_FIELDS and (
                isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise ConfigError(f"{key}\n  Input should be greater than or equal to 0 "
                              f"[type=greater_than_equal, input_value={value!r}]")
        cfg[key] = value
    if cfg["profiler"] not in (None, "torch", "cuda"):
        raise ConfigError(f"profiler\n  Input should be 'torch' or 'cuda' "
                          f"[type=literal_error, input_value={cfg['profiler']!r}]")
    trace_dir = cfg["torch_profiler_dir"]
    if trace_dir and cfg["profiler"] != "torch":
        raise ConfigError("Value error, torch_profiler_dir is only applicable when "
                          "profiler is set to 'torch'")
    if cfg["profiler"] == "torch" and not trace_dir:
        raise ConfigError("Value error, torch_profiler_dir must be set when profiler "
                          "is 'torch'")
    if trace_dir and not os.path.isabs(trace_dir):
        # vLLM itself turns a relative dir into an absolute one against its
        # working directory; the stand-in refuses it (see README).
        raise ConfigError(f"Value error, torch_profiler_dir must be an absolute path, "
                          f"got {trace_dir!r}")
    return cfg


SPEC_METHODS = ("ngram", "draft_model", "eagle", "eagle3", "mtp", "suffix")
SPEC_DRAFT_DIR_METHODS = ("draft_model", "eagle", "eagle3")  # these load a draft model from "model"
SPEC_DRAFT_OVERHEAD = 0.05  # a decode step costs TPOT * (1 + K * this) when proposing K tokens


def validate_speculative_config(raw):
    """The modelled part of vLLM's SpeculativeConfig, or raise ConfigError.

    vLLM infers a missing ``method`` from ``model``; the stand-in asks for it (see README)."""
    method = raw.get("method")
    if method is None:
        raise ConfigError("speculative_config.method\n  Field required [type=missing, "
                          f"input_value={raw!r}] (stand-in: give the method)")
    if method not in SPEC_METHODS:
        allowed = ", ".join(f"'{m}'" for m in SPEC_METHODS)
        raise ConfigError(f"speculative_config.method\n  Input should be {allowed} "
                          f"[type=literal_error, input_value={method!r}]")
    k = raw.get("num_speculative_tokens")
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ConfigError("speculative_config.num_speculative_tokens\n  Input should be greater "
                          f"than 0 [type=greater_than, input_value={k!r}]")
    if method in SPEC_DRAFT_DIR_METHODS and not raw.get("model"):
        raise ConfigError(f"Value error, method={method!r} needs the draft model: set "
                          "speculative_config.model")
    return {"method": method, "num_speculative_tokens": k, "model": raw.get("model")}


def spec_step_model(spec):
    """(K, accepted per step, step-time factor) of a speculating server, (0, 0, 1.0) otherwise."""
    if not spec:
        return 0, 0, 1.0
    k = spec["num_speculative_tokens"]
    acceptance = min(1.0, max(0.0, env_float("VLLM_STANDIN_SPEC_ACCEPTANCE", 0.6)))
    accepted = min(k, math.floor(k * acceptance + 0.5))  # round half up: 3 * 0.5 -> 2
    return k, accepted, 1.0 + k * SPEC_DRAFT_OVERHEAD


def check_model_dir(model):
    if not (os.path.isfile(os.path.join(model, "config.json"))
            or os.path.isfile(os.path.join(model, "params.json"))):
        raise ConfigError(
            f"Value error, Invalid repository ID or local directory specified: "
            f"'{model}'.\nPlease verify the following requirements:\n"
            "1. Provide a valid Hugging Face repository ID.\n"
            "2. Specify a local directory that contains a recognized configuration file.\n"
            "   - For Hugging Face models: ensure the presence of a 'config.json'.\n"
            "   - For Mistral models: ensure the presence of a 'params.json'.")


def model_facts(model, max_model_len):
    shards = [f for f in os.listdir(model) if f.endswith(".safetensors")]
    n_shards = len(shards) or int(env_float("VLLM_STANDIN_SHARDS", 64))
    size = sum(os.path.getsize(os.path.join(model, f)) for f in shards)
    if max_model_len is None:
        try:
            with open(os.path.join(model, "config.json"), encoding="utf-8") as fh:
                max_model_len = int(json.load(fh).get("max_position_embeddings", 8192))
        except (OSError, ValueError, AttributeError, TypeError):
            max_model_len = 8192
    return max(1, n_shards), size, max_model_len


def validate_serve_args(args, model, dotted):
    """``(profiler config or None, speculative config or None)`` of a parsed command line, or
    raise ConfigError, checked in vLLM's order; ``dotted`` holds the --profiler-config.KEY
    values."""
    pcfg = validate_profiler_config({**(args.profiler_config or {}), **dotted}) \
        if (args.profiler_config or dotted) else None
    check_model_dir(model)
    if args.tensor_parallel_size < 1:
        raise ConfigError("tensor_parallel_size\n  Input should be greater than 0")
    if not 0 < args.gpu_memory_utilization <= 1:
        raise ConfigError("Value error, GPU memory utilization must be within (0, 1]. "
                          f"Got {args.gpu_memory_utilization}.")
    spec = validate_speculative_config(args.speculative_config) \
        if args.speculative_config is not None else None
    if args.max_num_seqs is not None and args.max_num_seqs < 1:
        raise ConfigError("max_num_seqs\n  Input should be greater than 0 "
                          f"[type=greater_than, input_value={args.max_num_seqs}]")
    return pcfg, spec


def removed_args():
    """The arguments this installation's release no longer has (``release.json``'s ``removed_args``):
    absent from its help, refused on its command line."""
    return {str(a) for a in release().get("removed_args") or []}


def refused_args(argv):
    """The tokens of ``argv`` (flags and their values) that name a removed argument, as argparse lists
    them in ``unrecognized arguments``."""
    gone, out = removed_args(), []
    for i, token in enumerate(argv):
        if token.split("=", 1)[0] in gone:
            out.append(token)
            if "=" not in token and i + 1 < len(argv) and not argv[i + 1].startswith("-"):
                out.append(argv[i + 1])
    return out


def _profiler_default():
    fields = ["profiler=None", "torch_profiler_dir=''"]
    fields += [f"{k}={v!r}" for k, v in {**PROFILER_BOOL_FIELDS, **PROFILER_INT_FIELDS}.items()]
    return "ProfilerConfig(" + ", ".join(fields) + ")"


def serve_help(topic, version):
    """``vllm serve --help[=TOPIC]`` as vLLM 0.32 prints it, in outline: the config groups (no
    topic), every argument (``all``), one group, or the arguments whose name holds TOPIC; the
    arguments of vLLM 0.32.0 (serve_options.py) less the release's removed ones, ``--profiler-config``
    with the fields the stand-in models and the release in its API docs link."""
    gone = removed_args()
    lines = ["usage: vllm serve [model_tag] [options]", "",
             "Launch a local OpenAI-compatible API server to serve LLM completions via HTTP (vLLM stand-in).", ""]
    if not topic:
        lines += ["Config Groups:"] + [f"  {group}" for group, _ in SERVE_OPTIONS]
        lines += ["", "For full list:            vllm serve --help=all"]
        return "\n".join(lines)
    wanted = topic.lower().replace("_", "-").lstrip("-")
    for group, options in SERVE_OPTIONS:
        shown = [o for o in options if o[0] not in gone]
        if wanted not in ("all", group.lower()):
            shown = [o for o in shown if wanted in o[0].lstrip("-")]
        if not shown:
            continue
        lines.append(f"{group}:")
        for spellings in shown:
            lines.append("  " + ", ".join(spellings))
            if spellings[0] == "--profiler-config":
                lines += ["                        Profiling configuration.",
                          f"                        API docs: https://docs.vllm.ai/en/v{version}/api/vllm/config/"
                          "#vllm.config.ProfilerConfig",
                          f"                        (default: {_profiler_default()})"]
        lines.append("")
    return "\n".join(lines)
