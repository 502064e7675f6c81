"""Write a tiny Llama checkpoint that vLLM's CPU build can serve, with no hub access.

    python make_tiny_model.py DIR [--shards N]

Random weights (fixed seed), a byte-level BPE tokenizer trained here on generated text, and
the checkpoint split into N safetensors shards, so that vLLM prints real
``Loading safetensors checkpoint shards`` progress lines. Idempotent: an existing checkpoint
with the same recipe is left as it is. Runs with the Python of the vLLM CPU venv (transformers,
tokenizers and torch come with vLLM).
"""

import argparse
import json
import os
import random
import shutil
import sys
import tempfile

RECIPE = {
    "vocab_size": 1000,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 1,
    "num_key_value_heads": 1,
    "max_position_embeddings": 2048,
    "seed": 1234,
    "version": 1,
}
WORDS = [
    "the", "a", "an", "one", "two", "three", "four", "five", "gpu", "rank", "decode", "prefill", "token", "model",
    "shard", "server", "engine", "worker", "trace", "profile", "reduce", "kernel", "step", "time", "memory", "load",
    "ready", "health", "service", "host", "node", "tensor", "parallel", "batch", "request", "reply", "stream",
    "cache", "block", "page", "layer", "head",
]


def corpus(lines=4000, seed=RECIPE["seed"]):
    rng = random.Random(seed)
    for _ in range(lines):
        yield " ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 16))) + "."


def train_tokenizer(vocab_size):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<s>", "</s>", "<unk>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train_from_iterator(corpus(), trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
        model_max_length=RECIPE["max_position_embeddings"],
    )


def build(out_dir, shards):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(RECIPE["seed"])
    tokenizer = train_tokenizer(RECIPE["vocab_size"])
    config = LlamaConfig(
        vocab_size=RECIPE["vocab_size"],
        hidden_size=RECIPE["hidden_size"],
        intermediate_size=RECIPE["intermediate_size"],
        num_hidden_layers=RECIPE["num_hidden_layers"],
        num_attention_heads=RECIPE["num_attention_heads"],
        num_key_value_heads=RECIPE["num_key_value_heads"],
        max_position_embeddings=RECIPE["max_position_embeddings"],
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        tie_word_embeddings=False,
        torch_dtype="bfloat16",
    )
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    size = sum(p.numel() * p.element_size() for p in model.parameters())
    # Slightly above an even split, so the parameters fall into `shards` files.
    max_shard_bytes = size // shards + 1
    model.save_pretrained(out_dir, max_shard_size=max_shard_bytes, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir")
    parser.add_argument("--shards", type=int, default=4)
    args = parser.parse_args(argv)
    recipe = dict(RECIPE, shards=args.shards)
    stamp = os.path.join(args.dir, "vllm-ops-recipe.json")
    try:
        with open(stamp, encoding="utf-8") as handle:
            if json.load(handle) == recipe:
                print(f"unchanged: {args.dir}")
                return 0
    except (OSError, ValueError):
        pass
    parent = os.path.dirname(os.path.abspath(args.dir))
    os.makedirs(parent, exist_ok=True)
    work = tempfile.mkdtemp(prefix=".tiny-model-", dir=parent)
    try:
        build(work, args.shards)
        with open(os.path.join(work, "vllm-ops-recipe.json"), "w", encoding="utf-8") as handle:
            json.dump(recipe, handle, indent=2, sort_keys=True)
        # The server runs as its own user: the checkpoint is world-readable, as a shared model
        # directory would be.
        os.chmod(work, 0o755)
        for name in os.listdir(work):
            os.chmod(os.path.join(work, name), 0o644)
        shutil.rmtree(args.dir, ignore_errors=True)
        os.replace(work, args.dir)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"written: {args.dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
