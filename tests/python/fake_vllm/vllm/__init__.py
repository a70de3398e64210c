"""Stand-in vLLM package for lattn's tests (see fake_vllm/README.md)."""
