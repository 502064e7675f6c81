#!/usr/bin/python3
"""Write the safetensors headers of the sandbox's toy decoder into its model directory.

The sandbox serves re-timed copies of real H200 traces of a toy TP-2 decoder (docs/sandbox.md
says how its sizes were read from those traces); its model directory must describe that model,
so that the decode ledger sets the traces' kernels against the bytes they really read. From
``MODEL_DIR/config.json`` (``num_hidden_layers`` L, ``hidden_size`` H, ``intermediate_size`` I,
bf16), the tensors as a Llama checkpoint names them, per layer ``i``:
``model.layers.i.input_layernorm.weight`` [H], ``model.layers.i.mlp.up_proj.weight`` [I, H] and
``model.layers.i.mlp.down_proj.weight`` [H, I]; split over ``--shards`` files
(``model-NNNNN-of-NNNNN.safetensors``, consecutive tensors in each) with the
``model.safetensors.index.json`` that names them.

Each file is a real header (the 8-byte little-endian length, the JSON of dtype, shape and
data_offsets, padded with spaces to 8 bytes) followed by a sparse hole as long as its tensors'
data: the files take a few kilobytes of disk, whatever their size says. Nothing reads the data.

Idempotent: a file whose header and size are already right is left alone. Prints ``changed`` or
``unchanged`` (what Ansible's ``changed_when`` reads). Python 3 standard library only (it runs on
the sandbox host, and in the unit tests).
"""

import argparse
import json
import os
import struct
import sys

INDEX = "model.safetensors.index.json"
DTYPE, ELEMENT_BYTES = "BF16", 2


def tensors(config):
    """``[(name, shape)]`` of the toy model described by ``config``, in layer order."""
    layers, hidden, inter = config["num_hidden_layers"], config["hidden_size"], config["intermediate_size"]
    if config.get("torch_dtype") != "bfloat16":
        raise SystemExit(f"toy_checkpoint: torch_dtype {config.get('torch_dtype')!r}: only bfloat16 is written")
    out = []
    for i in range(layers):
        p = f"model.layers.{i}"
        out += [(f"{p}.input_layernorm.weight", [hidden]), (f"{p}.mlp.up_proj.weight", [inter, hidden]),
                (f"{p}.mlp.down_proj.weight", [hidden, inter])]
    return out


def nbytes(shape):
    n = ELEMENT_BYTES
    for d in shape:
        n *= d
    return n


def header(chunk):
    """(the header's bytes, the data's length) of one file holding ``chunk``."""
    entries, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, shape in chunk:
        entries[name] = {"dtype": DTYPE, "shape": shape, "data_offsets": [offset, offset + nbytes(shape)]}
        offset += nbytes(shape)
    raw = json.dumps(entries, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw, offset


def write(path, head, data_bytes):
    """Write one file unless it is already right; return whether it changed."""
    size = len(head) + data_bytes
    try:
        with open(path, "rb") as fh:
            if fh.read(len(head)) == head and os.fstat(fh.fileno()).st_size == size:
                return False
    except FileNotFoundError:
        pass
    with open(path, "wb") as fh:
        fh.write(head)
        fh.truncate(size)
    return True


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model_dir")
    p.add_argument("--shards", type=int, default=64)
    args = p.parse_args(argv)
    with open(os.path.join(args.model_dir, "config.json"), encoding="utf-8") as fh:
        config = json.load(fh)
    all_tensors = tensors(config)
    n = max(1, min(args.shards, len(all_tensors)))
    names = [f"model-{k + 1:05d}-of-{n:05d}.safetensors" for k in range(n)]
    per, extra = divmod(len(all_tensors), n)
    changed, weight_map, start = False, {}, 0
    for k, name in enumerate(names):
        chunk = all_tensors[start:start + per + (1 if k < extra else 0)]
        start += len(chunk)
        head, data_bytes = header(chunk)
        changed |= write(os.path.join(args.model_dir, name), head, data_bytes)
        weight_map.update({t: name for t, _ in chunk})
    index = json.dumps({"metadata": {"total_size": sum(nbytes(s) for _, s in all_tensors)},
                        "weight_map": weight_map}, indent=1) + "\n"
    path = os.path.join(args.model_dir, INDEX)
    try:
        with open(path, encoding="utf-8") as fh:
            same = fh.read() == index
    except FileNotFoundError:
        same = False
    if not same:
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(index)
    print("changed" if changed or not same else "unchanged")
    return 0


if __name__ == "__main__":
    sys.exit(main())
