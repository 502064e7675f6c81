"""Controller-side logic for vllm-ops (imported by filter plugins and CLIs)."""
