"""Stand-in for vllm.attention.backends.mla."""
