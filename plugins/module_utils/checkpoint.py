"""What a model's checkpoint holds, by the part of the model a decode step reads, from its
safetensors headers and ``config.json`` alone (the tensors are never read).

Shared by the controller and the hosts: the collection's ``vllm_checkpoint`` module imports this
file from its module_utils, and the controller as ``vllm_ops_host.checkpoint`` (the package maps the
collection's module_utils), so it imports only the standard library, nothing of ``vllm_ops``, and
runs on Python 3.9 (a unit test and ruff's per-file target check both).

A safetensors file is an 8-byte little-endian length N, N bytes of JSON (each tensor's
``dtype``, ``shape`` and ``data_offsets`` [begin, end] into the data that follows, and an
optional ``__metadata__``), then the data. :func:`read_header` reads those N + 8 bytes and
nothing else. The files are those ``model.safetensors.index.json`` names (every one must be
there), else every ``*.safetensors`` in the directory.

Figures of :func:`read_checkpoint` (its JSON is what ``capture.json`` keeps as ``checkpoint``):

- a tensor's **bytes** = ``end - begin`` of its ``data_offsets``: the bytes as stored, so a
  packed INT4 weight (compressed-tensors' ``*.weight_packed``, int32) counts its packed bytes
  and its ``*.weight_scale`` and ``*.weight_shape`` count as the tensors they are; where the
  dtype's size is known the span must equal elements x size, or the header is refused.
- **parts** (:data:`PARTS`): each tensor goes to the first rule of :data:`RULES` that matches
  its name, a table of named rules (another model family is one more rule): ``always``
  (read at every step: attention, dense MLPs, norms, the router), ``shared_experts``,
  ``routed_experts`` (with the layer and expert index from the name), ``embedding``,
  ``lm_head``, and ``not_in_decode`` (a vision tower, and layers past ``num_hidden_layers``,
  such as DeepSeek-V3's multi-token-prediction layer). A name no rule matches is
  **unclassified**: counted, with examples, in no part.
- **routed_experts.layers**: per MoE layer, the experts found and their bytes;
  ``bytes_per_expert`` where every expert of every layer has the same size.
- **embedding.row_bytes** = the embedding's bytes / its rows (the tensor's first dimension,
  else ``vocab_size``): a step reads only the rows of its tokens.
- **dtypes**: the bytes of the tensors of each safetensors dtype (a bf16 checkpoint holds BF16 and
  maybe F32; a quantized one F8_*, I8, U8 or packed I32 too).
- **model**: what ``config.json`` says (its ``text_config`` or ``language_config`` where it
  nests one, as a multimodal model's does): layers, hidden size, vocabulary, dtype, attention
  heads (``num_attention_heads``: a tensor-parallel size must divide them); MoE:
  ``routed_experts`` (E: ``n_routed_experts``, ``num_experts`` or ``num_local_experts``),
  ``experts_per_token`` (k: ``num_experts_per_tok``), ``shared_experts``
  (``n_shared_experts``), ``moe_layers`` (the layers from ``first_k_dense_replace`` on, every
  ``moe_layer_freq``-th); and the KV cache per token (``kv``): with MLA (``kv_lora_rank``
  present) ``(kv_lora_rank + qk_rope_head_dim) x layers x dtype bytes``, one latent per token
  that every tensor-parallel rank keeps whole; else ``2 x num_key_value_heads x head_dim x
  layers x dtype bytes``, split across ranks by KV head; 0 (``layout: none``) where the config
  declares ``num_attention_heads: 0``, a model without attention (the sandbox's toy decoder).

Raises :class:`CheckpointError` with a one-line message naming the file; where a caller keeps
going without the figures (the capture), :func:`unreadable` is the record that says why.
"""

from __future__ import annotations

import json
import os
import re
import struct
from collections import namedtuple

SCHEMA = 1
TOOL = "vllm_ops.checkpoint"
INDEX = "model.safetensors.index.json"
# safetensors refuses headers above 100 MB; so does this reader, before allocating them.
MAX_HEADER_BYTES = 100 * 1000 * 1000
EXAMPLES = 10

ALWAYS, SHARED, ROUTED, EMBEDDING, LM_HEAD, NOT_IN_DECODE = (
    "always", "shared_experts", "routed_experts", "embedding", "lm_head", "not_in_decode")
PARTS = (ALWAYS, SHARED, ROUTED, EMBEDDING, LM_HEAD, NOT_IN_DECODE)

# Bits per element of the safetensors dtypes whose size is fixed (sub-byte and 6-bit types
# are packed in ways the header does not say: their spans are taken as they are).
DTYPE_BITS = {"BOOL": 8, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8, "I16": 16, "U16": 16,
              "F16": 16, "BF16": 16, "I32": 32, "U32": 32, "F32": 32, "F64": 64, "I64": 64, "U64": 64}
# config.json's torch_dtype, in bytes per element (the KV cache's, unless the server says otherwise).
CONFIG_DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "half": 2, "float32": 4, "float": 4, "float8_e4m3fn": 1}

Rule = namedtuple("Rule", "name part pattern note")

# name, part, regex searched in the tensor's name, note. First match wins; the groups
# ``layer`` and ``expert`` say where a tensor sits. The rule ``beyond_layers`` applies only
# when its layer index is at or past the config's num_hidden_layers.
RULES = (
    Rule("vision", NOT_IN_DECODE,
         r"^(?:model\.)?(?:vision_tower|vision_model|visual|mm_projector|multi_modal_projector)\.",
         "a multimodal model's vision encoder and projector (Kimi-K2.5's vision_tower, mm_projector): "
         "not run by a text decode step"),
    Rule("beyond_layers", NOT_IN_DECODE, r"(?:^|\.)layers\.(?P<layer>\d+)\.",
         "a layer at or past num_hidden_layers (DeepSeek-V3's multi-token-prediction layer): not run by a "
         "decode step without speculative decoding"),
    Rule("routed_expert", ROUTED, r"(?:^|\.)layers\.(?P<layer>\d+)\.mlp\.experts\.(?P<expert>\d+)\.",
         "one routed expert (DeepSeek-V3, Kimi-K2, Qwen MoE)"),
    Rule("mixtral_expert", ROUTED,
         r"(?:^|\.)layers\.(?P<layer>\d+)\.block_sparse_moe\.experts\.(?P<expert>\d+)\.",
         "one routed expert (Mixtral)"),
    Rule("shared_expert", SHARED, r"\.mlp\.shared_experts?\.",
         "the shared experts every token runs (DeepSeek-V3's shared_experts, Qwen2-MoE's shared_expert)"),
    Rule("router", ALWAYS, r"\.(?:mlp|block_sparse_moe)\.(?:gate|shared_expert_gate)\.",
         "the router (gate weight, DeepSeek-V3's e_score_correction_bias)"),
    Rule("embedding", EMBEDDING, r"(?:^|\.)(?:embed_tokens|wte|word_embeddings)\.weight$",
         "the token embedding: a step reads the rows of its tokens"),
    Rule("lm_head", LM_HEAD, r"(?:^|\.)lm_head\.", "the LM head, read whole at every step"),
    Rule("layer", ALWAYS, r"(?:^|\.)layers\.(?P<layer>\d+)\.",
         "the rest of a decoder layer: attention, a dense MLP, norms"),
    Rule("final_norm", ALWAYS, r"(?:^|\.)norm\.weight$", "the final norm"),
)
_COMPILED = tuple((rule, re.compile(rule.pattern)) for rule in RULES)


class CheckpointError(Exception):
    """A checkpoint that cannot be read: the message is one line naming the file."""


def classify(name: str, num_layers: int | None = None) -> tuple[Rule | None, dict]:
    """The first rule of :data:`RULES` that matches ``name`` and its groups (ints), or (None, {})."""
    for rule, regex in _COMPILED:
        hit = regex.search(name)
        if not hit:
            continue
        groups = {k: int(v) for k, v in hit.groupdict().items() if v is not None}
        if rule.name == "beyond_layers" and (num_layers is None or groups["layer"] < num_layers):
            continue
        return rule, groups
    return None, {}


def read_header(path: str) -> tuple[dict, int]:
    """(tensors, header bytes) of one safetensors file: ``{name: {dtype, shape, bytes}}`` and
    the 8 + N bytes read. Raises CheckpointError."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(8)
            if len(head) < 8:
                raise CheckpointError(f"{path}: not a safetensors file ({len(head)} bytes, shorter than its 8-byte "
                                      "header length)")
            (length,) = struct.unpack("<Q", head)
            if length < 2 or length > MAX_HEADER_BYTES:
                raise CheckpointError(f"{path}: not a safetensors file (header length {length}, expected 2 to "
                                      f"{MAX_HEADER_BYTES} bytes)")
            raw = fh.read(length)
            size = os.fstat(fh.fileno()).st_size
    except OSError as exc:
        raise CheckpointError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if len(raw) < length:
        raise CheckpointError(f"{path}: truncated: its header says {length} bytes, {len(raw)} follow")
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise CheckpointError(f"{path}: the safetensors header is not JSON: {exc}") from None
    if not isinstance(header, dict):
        raise CheckpointError(f"{path}: the safetensors header is not a JSON object")
    data_bytes = size - 8 - length
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        tensors[name] = _tensor(path, name, entry, data_bytes)
    return tensors, 8 + length


def _tensor(path: str, name: str, entry: object, data_bytes: int) -> dict:
    ok = isinstance(entry, dict) and isinstance(entry.get("dtype"), str) and isinstance(entry.get("shape"), list)
    offsets = entry.get("data_offsets") if isinstance(entry, dict) else None
    ok = ok and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in entry["shape"])
    ok = ok and isinstance(offsets, list) and len(offsets) == 2 and all(
        isinstance(o, int) and not isinstance(o, bool) for o in offsets)
    if not ok:
        raise CheckpointError(f"{path}: tensor {name}: expected dtype, shape and data_offsets [begin, end], "
                              f"got {entry!r}")
    begin, end = offsets
    if not 0 <= begin <= end <= data_bytes:
        raise CheckpointError(f"{path}: tensor {name}: data_offsets [{begin}, {end}] outside the file's "
                              f"{data_bytes} data bytes")
    dtype, shape = entry["dtype"], entry["shape"]
    bits = DTYPE_BITS.get(dtype)
    if bits is not None:
        elements = 1
        for d in shape:
            elements *= d
        if elements * bits // 8 != end - begin:
            raise CheckpointError(f"{path}: tensor {name}: {dtype} {shape} is {elements * bits // 8} bytes, "
                                  f"its data_offsets span {end - begin}")
    return {"dtype": dtype, "shape": shape, "bytes": end - begin}


def checkpoint_files(directory: str) -> tuple[list[str], list[str]]:
    """(the safetensors files of the checkpoint, warnings). Raises CheckpointError."""
    if not os.path.isdir(directory):
        raise CheckpointError(f"{directory}: not a directory (a model given by name, not a local checkpoint?)")
    present = sorted(n for n in os.listdir(directory) if n.endswith(".safetensors"))
    index = os.path.join(directory, INDEX)
    warnings = []
    if os.path.exists(index):
        try:
            with open(index, encoding="utf-8") as fh:
                weight_map = json.load(fh).get("weight_map")
        except (OSError, ValueError, AttributeError) as exc:
            raise CheckpointError(f"{index}: cannot read the index: {exc}") from None
        if not isinstance(weight_map, dict) or not weight_map:
            raise CheckpointError(f"{index}: the index has no weight_map")
        named = sorted(set(weight_map.values()))
        missing = [n for n in named if n not in present]
        if missing:
            raise CheckpointError(f"{directory}: the index names {len(missing)} file(s) the directory lacks: "
                                  + ", ".join(missing[:5]))
        extra = [n for n in present if n not in named]
        if extra:
            warnings.append(f"{len(extra)} safetensors file(s) that {INDEX} does not name are left out: "
                            + ", ".join(extra[:5]))
        return named, warnings
    if not present:
        raise CheckpointError(f"{directory}: no *.safetensors files")
    return present, warnings


def text_config(config: dict) -> tuple[dict, str]:
    """The part of config.json that describes the language model, and where it was."""
    for key in ("text_config", "language_config"):
        if isinstance(config.get(key), dict):
            return config[key], key
    return config, "top level"


def model_figures(config: dict) -> dict:
    """What config.json says of the model's size, its experts and its KV cache per token."""
    text, where = text_config(config)

    def first(*keys):
        for key in keys:
            value = text.get(key)
            if value is not None and not isinstance(value, bool):
                return value
        return None

    layers = first("num_hidden_layers")
    dtype = first("torch_dtype", "dtype") or config.get("torch_dtype")
    dtype_bytes = CONFIG_DTYPE_BYTES.get(dtype) if isinstance(dtype, str) else None
    experts = first("n_routed_experts", "num_experts", "num_local_experts")
    shared = first("n_shared_experts")
    if shared is None and isinstance(first("shared_expert_intermediate_size"), int):
        shared = 1 if first("shared_expert_intermediate_size") > 0 else 0
    moe_layers = None
    if isinstance(experts, int) and experts > 0 and isinstance(layers, int):
        dense = first("first_k_dense_replace") or 0
        freq = first("moe_layer_freq") or 1
        moe_layers = [i for i in range(layers) if i >= dense and i % freq == 0]
    quant = text.get("quantization_config") or config.get("quantization_config")
    out = {
        "config_from": where, "architectures": config.get("architectures"),
        "quantization": (quant.get("quant_method") or "unnamed") if isinstance(quant, dict) else None,
        "model_type": text.get("model_type") or config.get("model_type"),
        "num_hidden_layers": layers, "hidden_size": first("hidden_size"), "vocab_size": first("vocab_size"),
        "num_attention_heads": first("num_attention_heads"),
        "dtype": dtype, "dtype_bytes": dtype_bytes,
        "tie_word_embeddings": bool(text.get("tie_word_embeddings", config.get("tie_word_embeddings", False))),
        "routed_experts": experts, "experts_per_token": first("num_experts_per_tok"), "shared_experts": shared,
        "first_k_dense_replace": first("first_k_dense_replace"), "moe_layer_freq": first("moe_layer_freq"),
        "moe_layers": len(moe_layers) if moe_layers is not None else None,
        "kv": kv_per_token(text, layers, dtype_bytes),
    }
    return out


def kv_per_token(text: dict, layers: int | None, dtype_bytes: int | None) -> dict:
    """The KV cache one token keeps, all layers together, in the config's dtype."""
    if not isinstance(layers, int) or not dtype_bytes:
        return {"layout": None, "bytes_per_token": None,
                "note": "config.json gives no num_hidden_layers or no known torch_dtype"}
    if isinstance(text.get("kv_lora_rank"), int):
        rope = text.get("qk_rope_head_dim") or 0
        elements = text["kv_lora_rank"] + rope
        return {"layout": "mla", "elements_per_layer": elements, "kv_heads": None,
                "bytes_per_token": elements * layers * dtype_bytes,
                "formula": f"(kv_lora_rank {text['kv_lora_rank']} + qk_rope_head_dim {rope}) x {layers} layers "
                           f"x {dtype_bytes} bytes"}
    heads = text.get("num_attention_heads")
    if heads == 0 and not isinstance(heads, bool):
        return {"layout": "none", "elements_per_layer": 0, "kv_heads": 0, "bytes_per_token": 0,
                "formula": "num_attention_heads 0: no attention, so no KV cache"}
    kv_heads = text.get("num_key_value_heads") or heads
    head_dim = text.get("head_dim") or (text.get("hidden_size") // heads if isinstance(heads, int) and heads
                                        and isinstance(text.get("hidden_size"), int) else None)
    if not isinstance(kv_heads, int) or not isinstance(head_dim, int):
        return {"layout": None, "bytes_per_token": None,
                "note": "config.json gives neither kv_lora_rank (MLA) nor attention heads and a head size"}
    return {"layout": "gqa", "elements_per_layer": 2 * kv_heads * head_dim, "kv_heads": kv_heads,
            "bytes_per_token": 2 * kv_heads * head_dim * layers * dtype_bytes,
            "formula": f"2 x {kv_heads} KV heads x head_dim {head_dim} x {layers} layers x {dtype_bytes} bytes"}


def read_config(directory: str) -> dict:
    path = os.path.join(directory, "config.json")
    try:
        with open(path, encoding="utf-8") as fh:
            config = json.load(fh)
    except OSError as exc:
        raise CheckpointError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise CheckpointError(f"{path}: not JSON: {exc}") from None
    if not isinstance(config, dict):
        raise CheckpointError(f"{path}: not a JSON object")
    return config


def read_checkpoint(directory: str) -> dict:
    """The checkpoint's bytes by part, from its headers and config.json (see the module's
    docstring for every figure). Raises CheckpointError."""
    directory = os.path.abspath(directory)
    names, warnings = checkpoint_files(directory)
    model = model_figures(read_config(directory))
    layers = model["num_hidden_layers"] if isinstance(model["num_hidden_layers"], int) else None
    parts = {p: {"tensors": 0, "bytes": 0} for p in PARTS}
    rules = {}
    unclassified = {"tensors": 0, "bytes": 0, "examples": []}
    experts = {}  # layer -> {expert: bytes}
    dtypes = {}  # dtype -> bytes
    embedding = {"tensors": 0, "bytes": 0, "rows": None}
    files = []
    total = 0
    seen = set()
    for name in names:
        tensors, header_bytes = read_header(os.path.join(directory, name))
        files.append({"file": name, "header_bytes": header_bytes, "tensors": len(tensors),
                      "bytes": sum(t["bytes"] for t in tensors.values())})
        for tname, t in tensors.items():
            if tname in seen:
                raise CheckpointError(f"{os.path.join(directory, name)}: tensor {tname} is also in another file")
            seen.add(tname)
            total += t["bytes"]
            dtypes[t["dtype"]] = dtypes.get(t["dtype"], 0) + t["bytes"]
            rule, groups = classify(tname, layers)
            if rule is None:
                unclassified["tensors"] += 1
                unclassified["bytes"] += t["bytes"]
                if len(unclassified["examples"]) < EXAMPLES:
                    unclassified["examples"].append(tname)
                continue
            parts[rule.part]["tensors"] += 1
            parts[rule.part]["bytes"] += t["bytes"]
            counted = rules.setdefault(rule.name, {"part": rule.part, "tensors": 0, "bytes": 0})
            counted["tensors"] += 1
            counted["bytes"] += t["bytes"]
            if rule.part == ROUTED:
                per_layer = experts.setdefault(groups["layer"], {})
                per_layer[groups["expert"]] = per_layer.get(groups["expert"], 0) + t["bytes"]
            elif rule.part == EMBEDDING and len(t["shape"]) == 2 and t["dtype"] in DTYPE_BITS:
                embedding["rows"] = t["shape"][0]
    embedding.update(parts[EMBEDDING])
    if embedding["rows"] is None and isinstance(model["vocab_size"], int):
        embedding["rows"] = model["vocab_size"]
    embedding["row_bytes"] = embedding["bytes"] / embedding["rows"] if embedding["rows"] else None
    routed = _routed(experts, model, warnings)
    lm_head = {"bytes": parts[LM_HEAD]["bytes"], "tied": False}
    if not parts[LM_HEAD]["tensors"] and model["tie_word_embeddings"]:
        lm_head = {"bytes": embedding["bytes"], "tied": True}
    if unclassified["tensors"]:
        warnings.append(f"{unclassified['tensors']} tensor(s), {unclassified['bytes']} bytes, match no rule and "
                        f"are in no part (for example {unclassified['examples'][0]})")
    return {"schema": SCHEMA, "tool": TOOL, "path": directory, "files": files, "tensors": len(seen), "bytes": total,
            "dtypes": dtypes, "parts": parts, "rules": rules, "unclassified": unclassified, "routed_experts": routed,
            "embedding": embedding, "lm_head": lm_head, "model": model, "warnings": warnings}


def unreadable(directory: str, why: str) -> dict:
    """The record of a checkpoint that could not be read: its path and why, no figures."""
    return {"schema": SCHEMA, "tool": TOOL, "path": directory, "error": why}


def _routed(experts: dict, model: dict, warnings: list) -> dict:
    layers = [{"layer": layer, "experts": len(per), "bytes": sum(per.values())}
              for layer, per in sorted(experts.items())]
    sizes = {b for per in experts.values() for b in per.values()}
    counts = {len(per) for per in experts.values()}
    out = {"layers": layers, "experts_per_layer": counts.pop() if len(counts) == 1 else None,
           "bytes_per_expert": sizes.pop() if len(sizes) == 1 else None}
    declared = model["routed_experts"]
    if layers and isinstance(declared, int) and any(row["experts"] != declared for row in layers):
        warnings.append(f"config.json says {declared} routed experts per layer; the headers hold "
                        f"{sorted({row['experts'] for row in layers})}")
    if layers and model["moe_layers"] is not None and len(layers) != model["moe_layers"]:
        warnings.append(f"config.json implies {model['moe_layers']} MoE layers; the headers hold routed "
                        f"experts in {len(layers)}")
    return out
