"""The stand-in's tokens: words. The server's completions are drawn from them, and so are the
prompts of ``vllm bench serve``'s random dataset; a prompt's token count is its word count (a
prompt given as token ids: their number)."""

VOCABULARY = 163840  # Kimi-K2.5's vocabulary size: the stand-in's token ids stay below it

FAKE_WORDS = [
    "the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog", "while", "tensor", "parallel", "ranks",
    "reduce", "their", "partial", "sums", "and", "the", "scheduler", "streams", "tokens",
]
