"""docs/python.md's first example runs and prints what the page shows."""

import os
import pathlib
import re
import subprocess
import sys

DOC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "python.md"


def test_first_run_example_output_matches_the_page():
    text = DOC.read_text()
    section = text[text.index("## A first run"):]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    shown = re.search(r"Output:\n\n```text\n(.*?)```", section, re.S).group(1)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout == shown


import pytest  # noqa: E402


@pytest.mark.parametrize("section", [
    "## The softmax scale",
    "## What runs",
    "## Kernel-level calls with LSE",
    "## vLLM: the whole MLA layer",
    "## torch custom ops",
])
def test_section_example_prints_what_the_page_shows(section):
    if "torch" in section:
        pytest.importorskip("torch", reason="PyTorch is not installed: the torch example is not run")
    text = DOC.read_text()
    body = text[text.index(section):]
    body = body[:body.index("\n## ", 1)]
    code = re.search(r"```python\n(.*?)```", body, re.S).group(1)
    shown = re.search(r"Output[^\n]*:\n\n```text\n(.*?)```", body, re.S).group(1)
    # sys.path holds the tests' stand-in vLLM (conftest.py) for the vLLM example.
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout == shown


def run_block(code):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_backend_listing_example_names_every_backend():
    # Its verdicts depend on the build (CUDA or not): the names and their order are compared.
    text = DOC.read_text()
    body = text[text.index("Listing backends and why they refuse:"):]
    code = re.search(r"```python\n(.*?)```", body, re.S).group(1)
    shown = re.search(r"Output[^\n]*:\n\n```text\n(.*?)```", body, re.S).group(1)
    got = run_block(code)
    assert [line.split(" ")[0] for line in got.splitlines()] == [line.split(" ")[0] for line in shown.splitlines()]


def test_vllm_registry_example_registers_the_backend():
    # With the tests' stand-in vLLM (conftest.py puts it on sys.path).
    text = DOC.read_text()
    body = text[text.index("## vLLM: `lattn.vllm.LattnPrefillBackend`"):]
    code = re.search(r"```python\n(.*?)```", body, re.S).group(1)
    run_block(code + "\nfrom vllm.v1.attention.backends.mla.prefill import registry\n"
                     "assert registry.MLAPrefillBackendEnum.CUSTOM.get_path() == 'lattn.vllm.LattnPrefillBackend'\n")
