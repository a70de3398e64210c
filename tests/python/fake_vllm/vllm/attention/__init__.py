"""Stand-in for vllm.attention (see fake_vllm/README.md)."""
