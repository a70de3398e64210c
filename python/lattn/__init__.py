"""lattn: Multi-head Latent Attention (MLA) for inference engines.

The C++ library behind this package (liblattn) implements vLLM's MLA attention
layer: a paged latent KV cache, the compute-friendly prefill path with chunked
context, the absorbed decode path, metadata builders and interchangeable
backends. This package reaches it zero-copy through DLPack: every function
takes NumPy arrays, PyTorch tensors (CPU or CUDA), CuPy arrays or
lattn.Tensor, and CUDA work runs on the caller's current stream.

See docs/python.md. The vLLM prefill-backend adapter is lattn.vllm (importable
without vLLM or PyTorch).
"""

# Everything public of the extension module: lattn.Tensor, from_dlpack, the
# backend registries and selector, PrefillMetadata, MlaAttention, ops, ...
from lattn._lattn import *  # noqa: F401,F403
from lattn._lattn import version

__version__ = version()

# torch custom operators (torch.ops.lattn.*) when PyTorch is already imported; otherwise
# `import lattn.torch_ops` registers them (importing torch here would slow every import).
import sys as _sys

if _sys.modules.get("torch") is not None:
    from lattn import torch_ops  # noqa: F401,E402
