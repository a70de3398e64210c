#!/usr/bin/python3
"""Command tests of `lattn`: each case runs the real binary and checks its
exit code, its stdout (text or JSON) and its stderr sentences.

Usage: /usr/bin/python3 cli_test.py --lattn PATH/TO/lattn CASE [CASE...]
       /usr/bin/python3 cli_test.py --list
ctest runs one case per test (tests/cli/CMakeLists.txt). The exit codes are
the documented ones (docs/cli.md, tools/exit_codes.h).
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

EXIT_OK, EXIT_RUNTIME, EXIT_USAGE, EXIT_NO_BACKEND, EXIT_BAD_INPUT, EXIT_VERIFY, EXIT_PLOT = range(7)
ALL_BACKENDS = ["reference", "cpu", "cuda", "hopper", "CUSTOM"]

CASES = {}


def case(fn):
    CASES[fn.__name__] = fn
    return fn


class Lattn:
    def __init__(self, path, workdir):
        self.path = path
        self.workdir = workdir

    def __call__(self, *args, expect=EXIT_OK, timeout=600, env=None):
        proc = subprocess.run([self.path, *map(str, args)], capture_output=True, text=True, timeout=timeout,
                              cwd=self.workdir, env=None if env is None else dict(os.environ, **env))
        shown = f"lattn {' '.join(map(str, args))}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}"
        if proc.returncode != expect:
            raise AssertionError(f"exit code {proc.returncode}, expected {expect}\n{shown}")
        return proc

    def json(self, *args, expect=EXIT_OK, timeout=600, env=None):
        proc = self(*args, expect=expect, timeout=timeout, env=env)
        try:
            return json.loads(proc.stdout)
        except json.JSONDecodeError as e:
            raise AssertionError(f"stdout is not JSON ({e}):\n{proc.stdout}") from e


class Skip(Exception):
    """The case cannot run here (e.g. no CUDA device): ctest reports it skipped (exit code 77)."""


def check(condition, message):
    if not condition:
        raise AssertionError(message)


def check_in(needle, haystack, what="output"):
    check(needle in haystack, f"expected {needle!r} in the {what}:\n{haystack}")


# ---------------------------------------------------------------------------
# help and usage errors

@case
def help_is_complete(lattn):
    top = lattn("--help").stdout
    for word in ["run", "info", "bench", "Exit codes"]:
        check_in(word, top)
    run = lattn("run", "--help").stdout
    for flag in ["--model", "--tp", "--num-heads", "--kv-lora-rank", "--qk-nope-head-dim", "--qk-rope-head-dim",
                 "--v-head-dim", "--kv-cache-dtype", "--block-size", "--layers", "--prefill-backend",
                 "--decode-backend", "--max-num-batched-tokens", "--max-num-seqs", "--num-blocks", "--trace",
                 "--verify", "--json", "--batch-invariant", "Exit codes"]:
        check_in(flag, run, "run --help")
    info = lattn("info", "--help").stdout
    for flag in ["--model", "--tp", "--json"]:
        check_in(flag, info, "info --help")
    bench = lattn("bench", "--help").stdout
    for flag in ["--phase", "--heads", "--batch", "--seq", "--block-size", "--backend", "-o", "--plot",
                 "--batch-invariant"]:
        check_in(flag, bench, "bench --help")


@case
def bad_flags_are_usage_errors(lattn):
    err = lattn("run", "--no-such-flag", expect=EXIT_USAGE).stderr
    check_in("lattn run: error:", err, "stderr")
    check_in("--no-such-flag", err, "stderr")
    err = lattn("info", "--kv-cache-dtype", "int8", expect=EXIT_USAGE).stderr
    check_in("--kv-cache-dtype must be one of auto, bf16, fp16, fp8, fp8_ds_mla; got 'int8'", err, "stderr")
    err = lattn("info", "--tp", "3", expect=EXIT_USAGE).stderr
    check_in("--tp 3 does not divide the 128 heads of deepseek-v3", err, "stderr")
    err = lattn("info", "--model", "llama", expect=EXIT_USAGE).stderr
    check_in("unknown model 'llama'; the known models are deepseek-v3, deepseek-r1, deepseek-v3.2, deepseek-v2-lite, minicpm3", err,
             "stderr")
    err = lattn("run", "--layers", "0", expect=EXIT_USAGE).stderr
    check_in("--layers must be at least 1, got 0", err, "stderr")
    err = lattn("run", "--trace", "x.jsonl", "--num-requests", "3", expect=EXIT_USAGE).stderr
    check_in("--num-requests shapes a generated trace; it cannot be combined with --trace", err, "stderr")
    err = lattn("bench", "--phase", "warmup", expect=EXIT_USAGE).stderr
    check_in("--phase takes prefill, decode, sparse-decode, sparse-prefill and/or indexer separated by commas; got 'warmup'", err, "stderr")
    err = lattn("bench", "--batch", "1,x", expect=EXIT_USAGE).stderr
    check_in("--batch takes integers >= 1 separated by commas; got 'x'", err, "stderr")
    err = lattn("bench", "-o", "yaml", expect=EXIT_USAGE).stderr
    check_in("-o/--output must be table, csv or json; got 'yaml'", err, "stderr")
    lattn(expect=EXIT_USAGE)  # no subcommand


@case
def unknown_backend_lists_the_valid_names(lattn):
    err = lattn("run", "--prefill-backend", "flashy", expect=EXIT_USAGE).stderr
    check_in("--prefill-backend: Unknown MLA prefill backend: 'flashy'. Valid options are: "
             + ", ".join(ALL_BACKENDS), err, "stderr")
    err = lattn("info", "--decode-backend", "nope", expect=EXIT_USAGE).stderr
    check_in("Valid options are: " + ", ".join(ALL_BACKENDS), err, "stderr")
    err = lattn("bench", "--backend", "nope", expect=EXIT_USAGE).stderr
    check_in("--backend: Unknown MLA prefill backend: 'nope'. Valid options are: " + ", ".join(ALL_BACKENDS), err,
             "stderr")


@case
def impossible_config_prints_each_backends_reasons(lattn):
    # `cuda` cannot run on the CPU: named explicitly, it is refused with its reasons.
    err = lattn("run", "--device", "cpu", "--decode-backend", "cuda", expect=EXIT_NO_BACKEND).stderr
    check_in("the decode backend cuda cannot serve deepseek-v3 --tp 8", err, "stderr")
    # Its reasons depend on the build: without CUDA it is not available at all.
    check(any(reason in err for reason in ["cuda: compute capability none (cpu) not supported",
                                           "cuda: required dependencies not available"]),
          f"the reasons of cuda are missing:\n{err}")
    # The selector's environment variable is checked the same way as the flag.
    env = dict(os.environ, LATTN_MLA_DECODE_BACKEND="cuda")
    proc = subprocess.run([lattn.path, "run", "--device", "cpu", "-q"], capture_output=True, text=True, env=env,
                          timeout=600)
    check(proc.returncode == EXIT_NO_BACKEND, f"exit {proc.returncode} with LATTN_MLA_DECODE_BACKEND=cuda")
    check_in("the decode backend cuda cannot serve", proc.stderr, "stderr")
    # A request that can never fit the cache.
    err = lattn("run", "--num-blocks", "2", "--block-size", "16", "-q", expect=EXIT_NO_BACKEND).stderr
    check_in("blocks of 16 tokens, but the cache has only 2 blocks; raise --num-blocks", err, "stderr")


# ---------------------------------------------------------------------------
# traces

def write(path, text):
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return path


SMALL_RUN = ["--block-size", "16", "--num-blocks", "64", "--max-num-batched-tokens", "96",
             "--max-num-seqs", "8", "-q"]


@case
def trace_file_runs(lattn):
    trace = write(os.path.join(lattn.workdir, "ok.jsonl"),
                  '{"prompt_len": 150, "output_len": 4}\n\n'
                  '{"prompt_len": 20, "output_len": 6, "arrival_s": 0.01}\n'
                  '{"prompt_len": 1, "output_len": 2, "arrival_s": 0.02}\n')
    report = lattn.json("run", "--model", "deepseek-v2-lite", "--tp", "4", "--layers", "1", "--trace", trace, "--json",
                        *SMALL_RUN)
    check(report["requests"] == {"total": 3, "finished": 3}, f"requests: {report['requests']}")
    # A 1-token prompt has query length 1: the builder treats it as a decode
    # (vLLM's reorder threshold), so prefill computes 150 + 20 tokens and
    # decode 3 + 5 + (1 + 1).
    check(report["prefill"]["tokens"] == 170, f"prefill tokens: {report['prefill']}")
    check(report["decode"]["tokens"] == 10, f"decode tokens: {report['decode']}")
    check(report["prefill"]["rows_with_context"] >= 1, "the 150-token prompt must be chunked (budget 96)")


@case
def bad_trace_lines_name_their_number(lattn):
    good = '{"prompt_len": 10, "output_len": 2}\n'
    cases = [
        (good + good + '{"prompt_len": 10, "output_len": \n', "line 3: not valid JSON"),
        (good + '{"prompt_len": 10}\n', "line 2: missing \"output_len\" (an integer >= 1)"),
        ('{"prompt_len": -4, "output_len": 2}\n', "line 1: \"prompt_len\" must be an integer >= 1, got -4"),
        (good + good + good + '{"prompt_len": 5, "output_len": 2, "user": "x"}\n',
         "line 4: unknown key \"user\" (the keys are prompt_len, output_len, arrival_s)"),
        ("", "holds no requests"),
    ]
    for i, (text, message) in enumerate(cases):
        path = write(os.path.join(lattn.workdir, f"bad{i}.jsonl"), text)
        err = lattn("run", "--trace", path, "--layers", "1", *SMALL_RUN, expect=EXIT_BAD_INPUT).stderr
        check_in(f"lattn run: error: trace file '{path}'", err, "stderr")
        check_in(message, err, "stderr")
    err = lattn("run", "--trace", os.path.join(lattn.workdir, "missing.jsonl"), expect=EXIT_BAD_INPUT).stderr
    check_in("cannot be opened for reading", err, "stderr")


# ---------------------------------------------------------------------------
# hostile flags: every one ends in its documented exit code and a sentence
# naming the flag, never an internal text (stoi, bad_alloc, vector sizes) or
# a crash (each case reproduced one of those before its fix)

def check_no_internal_text(err):
    for internal in ["stoi", "bad_alloc", "max_size()", "std::", "terminate", "Assertion", "stalled",
                     "Traceback", "self.", "scheduler_config"]:
        check(internal not in err, f"internal text {internal!r} in stderr:\n{err}")


@case
def hostile_threads_are_bounded(lattn):
    for value in ["100000", "20000", "-3"]:
        err = lattn("bench", "--threads", value, "--phase", "decode", "--batch", "1", "--seq", "64", "-q",
                    expect=EXIT_USAGE, timeout=60).stderr
        check_in("--threads must be in [0, ", err, "stderr")
        check_no_internal_text(err)


@case
def hostile_token_counts_are_refused_up_front(lattn):
    # prompt + output past 2^31 with block size 1: refused before any step (was: "the scheduler stalled" after minutes)
    trace = write(os.path.join(lattn.workdir, "huge.jsonl"),
                  '{"prompt_len": 2147483000, "output_len": 2000}\n')
    err = lattn("run", "--trace", trace, "--block-size", "1", "--num-blocks", "64", "--layers", "1", "-q",
                expect=EXIT_NO_BACKEND, timeout=60).stderr
    check_in("tokens one sequence may hold", err, "stderr")
    check_no_internal_text(err)
    # a cache larger than this machine's memory: refused with what would fit
    err = lattn("run", "--num-blocks", "2147483647", "--block-size", "1024", "-q", expect=EXIT_NO_BACKEND,
                timeout=60).stderr
    check_in("--num-blocks 2147483647", err, "stderr")
    check_in("blocks fit", err, "stderr")
    check_no_internal_text(err)
    # a workspace that cannot hold max_num_seqs blocks: the flags, not vLLM's internal names
    err = lattn("run", "--max-num-seqs", "100000", "-q", expect=EXIT_USAGE, timeout=60).stderr
    check_in("--max-num-seqs 100000", err, "stderr")
    check_in("sequences fit at this block size", err, "stderr")
    check_no_internal_text(err)


@case
def hostile_generator_parameters_are_refused(lattn):
    for flag, value in [("--prompt-len-median", "inf"), ("--prompt-len-median", "nan"),
                        ("--prompt-len-sigma", "1e300"), ("--output-len-mean", "inf"),
                        ("--request-rate", "0"), ("--request-rate", "-1"), ("--request-rate", "nan")]:
        err = lattn("run", flag, value, "--layers", "1", "-q", expect=EXIT_USAGE, timeout=60).stderr
        check_no_internal_text(err)
    err = lattn("run", "--seed", "-1", "-q", expect=EXIT_USAGE, timeout=60).stderr
    check_in("--seed", err, "stderr")
    # a saved extreme (but valid) trace replays
    saved = os.path.join(lattn.workdir, "extreme.jsonl")
    lattn("run", "--prompt-len-median", "1", "--prompt-len-sigma", "10", "--max-prompt-len", "64",
          "--num-requests", "6", "--save-trace", saved, "--layers", "1", *SMALL_RUN, timeout=300)
    lattn("run", "--trace", saved, "--layers", "1", *SMALL_RUN, timeout=300)


@case
def hostile_paths_and_devices_say_what_is_wrong(lattn):
    err = lattn("run", "--device", "cuda:99999999999", "-q", expect=EXIT_USAGE, timeout=60).stderr
    check_in("--device must be auto, cpu, cuda or cuda:N", err, "stderr")
    check_no_internal_text(err)
    err = lattn("run", "--trace", lattn.workdir, "--layers", "1", "-q", expect=EXIT_BAD_INPUT, timeout=60).stderr
    check_in("is a directory", err, "stderr")
    # a number past double's range (found by fuzz_trace_jsonl: exit 1 with the JSON library's internal text)
    huge = write(os.path.join(lattn.workdir, "huge_number.jsonl"), '{"prompt_len": 70E544, "output_len": 2}\n')
    err = lattn("run", "--trace", huge, "--layers", "1", "-q", expect=EXIT_BAD_INPUT, timeout=60).stderr
    check_in("line 1: not valid JSON", err, "stderr")
    check_no_internal_text(err)
    err = lattn("bench", "--plot", os.path.join(lattn.workdir, "no", "such", "dir", "x.png"), "--phase", "decode",
                "--batch", "1", "--seq", "64", "-q", expect=EXIT_USAGE, timeout=60).stderr
    check_in("does not exist", err, "stderr")
    check_no_internal_text(err)


# ---------------------------------------------------------------------------
# run --verify on small presets

def run_verified(lattn, *args, layers=1):
    report = lattn.json("run", "--json", "--layers", layers, "--verify", "--verify-requests", "3", "--num-requests", "10",
                        "--request-rate", "inf", "--prompt-len-median", "90", "--max-prompt-len", "260",
                        "--output-len-mean", "5", "--max-output-len", "12", *SMALL_RUN, *args)
    check(report["requests"]["finished"] == 10, f"requests: {report['requests']}")
    check(report["decode"]["tokens"] > 0, "no decode ran")
    check(report["prefill"]["rows_without_context"] > 0, "no prefill without context ran")
    check(report["prefill"]["rows_with_context"] > 0, "no chunked prefill with context ran")
    verify = report["verify"]
    check(verify["passed"], f"verification failed: {json.dumps(verify, indent=1)}")
    check(len(verify["requests"]) == 3, f"verified {len(verify['requests'])} requests")
    check(0 <= verify["worst_rel_l2"] <= verify["bound"], f"worst error {verify['worst_rel_l2']}")
    check(any(r["chunks_with_context"] > 0 for r in verify["requests"]), "no verified request had a chunk with context")
    check(any(r["decode_steps"] > 0 for r in verify["requests"]), "no verified request decoded")
    return report


@case
def run_verify_deepseek_tp8(lattn):
    report = run_verified(lattn, "--model", "deepseek-v3", "--tp", "8")
    check(report["config"]["dims"]["num_heads"] == 16, f"dims: {report['config']['dims']}")


@case
def run_verify_minicpm3(lattn):
    report = run_verified(lattn, "--model", "minicpm3", "--tp", "4", layers=2)
    dims = report["config"]["dims"]
    check(dims == {"num_heads": 10, "kv_lora_rank": 256, "qk_nope_head_dim": 64, "qk_rope_head_dim": 32,
                   "v_head_dim": 64}, f"dims: {dims}")


@case
def run_dcp_2_verify_on_cpu(lattn):
    # Decode context parallelism: 2 ranks (threads, in-process communicator) against one rank.
    report = lattn.json("run", "--json", "--device", "cpu", "--model", "deepseek-v3", "--tp", "8", "--dcp", "2",
                        "--verify", "--dcp-requests", "3", "--dcp-context", "150", "--dcp-steps", "2")
    check(report["dcp"] == 2 and report["communicator"] == "in-process", f"report: {report}")
    check(report["num_heads"] == 16, f"heads: {report['num_heads']}")
    verify = report["verify"]
    check(verify["passed"] and 0 <= verify["worst_rel_l2"] <= verify["bound"], f"verify: {verify}")
    # All-to-all (8 heads over 4 ranks), interleave 3, and an fp8 cache.
    report = lattn.json("run", "--json", "--device", "cpu", "--model", "deepseek-v3", "--tp", "16", "--dcp", "4",
                        "--dcp-combine", "all-to-all", "--dcp-interleave", "3", "--kv-cache-dtype", "fp8", "--verify",
                        "--dcp-requests", "2", "--dcp-context", "40", "--dcp-steps", "2")
    check(report["verify"]["passed"], f"verify: {report['verify']}")
    # The context prefilled through the layer under DCP (prefill with cached context), 3 ranks, 45 + 45 + 17 tokens.
    report = lattn.json("run", "--json", "--device", "cpu", "--model", "deepseek-v3", "--tp", "16", "--dcp", "3",
                        "--dcp-prefill-chunk", "45", "--verify", "--dcp-requests", "2", "--dcp-context", "107",
                        "--dcp-steps", "1")
    check(report["prefill_steps"] == 3 and report["prefill_chunk"] == 45, f"report: {report}")
    check(report["verify"]["passed"], f"verify: {report['verify']}")
    err = lattn("run", "--device", "cpu", "--dcp", "2", "--dcp-prefill-chunk", "-1", expect=EXIT_USAGE).stderr
    check_in("--dcp-prefill-chunk >= 0", err, "stderr")
    err = lattn("run", "--device", "cpu", "--dcp", "2", "--dcp-combine", "gather", expect=EXIT_USAGE).stderr
    check_in("--dcp-combine must be ag-rs or all-to-all; got 'gather'", err, "stderr")
    out = lattn("bench", "--device", "cpu", "--model", "deepseek-v3", "--tp", "16", "--dcp", "2", "--batch", "2",
                "--seq", "200", "--repeats", "1", "--warmup", "0", "-q").stdout
    check_in("DCP decode bench", out)
    check_in("(dcp 2)", out)


@case
def run_verify_fp8_cache(lattn):
    report = run_verified(lattn, "--model", "deepseek-v3", "--tp", "16", "--kv-cache-dtype", "fp8")
    check(report["config"]["kv_cache_dtype"] == "fp8", f"config: {report['config']}")


@case
def run_verify_says_what_it_is_doing(lattn):
    # The reference check of --verify takes 10-40 s on big presets: it announces itself first.
    proc = lattn("run", "--layers", "1", "--verify", "--verify-requests", "2", "--num-requests", "4",
                 "--request-rate", "inf", "--prompt-len-median", "40", "--output-len-mean", "3",
                 *[a for a in SMALL_RUN if a != "-q"])
    check_in("verifying 2 requests against the reference backend", proc.stderr, "stderr")


@case
def run_verify_deepseek_v32_sparse(lattn):
    # DeepSeek-V3.2: V3's MLA + the lightning indexer (64 x 128). A small top-k
    # so that prompts of ~90-260 tokens really are sparse (each token sees 48 of them).
    report = run_verified(lattn, "--model", "deepseek-v3.2", "--tp", "32", "--index-topk", "48")
    config = report["config"]
    check(config["dims"]["num_heads"] == 4, f"dims: {config['dims']}")
    check(config["indexer"] == {"index_topk": 48, "index_n_heads": 64, "index_head_dim": 128}, f"config: {config}")
    report = run_verified(lattn, "--model", "deepseek-v3.2", "--tp", "32", "--index-topk", "48",
                          "--kv-cache-dtype", "fp8_ds_mla")
    check(report["config"]["kv_cache_dtype"] == "fp8_ds_mla", f"config: {report['config']}")
    text = lattn("run", "--model", "deepseek-v3.2", "--tp", "32", "--index-topk", "16", "--num-requests", "2",
                 "--prompt-len-median", "40", "--output-len-mean", "2", "--layers", "1", "--block-size", "16").stdout
    check_in("top 16 cached tokens", text)
    err = lattn("run", "--model", "deepseek-v3", "--index-topk", "16", "-q", expect=EXIT_USAGE, timeout=60).stderr
    check_in("--index-topk applies to sparse models", err, "stderr")
    err = lattn("run", "--model", "deepseek-v3", "--kv-cache-dtype", "fp8_ds_mla", "-q", expect=EXIT_USAGE,
                timeout=60).stderr
    check_in("fp8_ds_mla is the sparse models' format", err, "stderr")
    err = lattn("run", "--model", "deepseek-v3.2", "--decode-backend", "cpu", "-q", expect=EXIT_USAGE, timeout=60).stderr
    check_in("is a sparse model", err, "stderr")


@case
def run_text_summary(lattn):
    proc = lattn("run", "--num-requests", "4", "--prompt-len-median", "40", "--output-len-mean", "3",
                 "--model", "deepseek-v2-lite", "--tp", "8", "--layers", "1", "--block-size", "16")
    for word in ["requests", "prefill", "decode", "step", "p50", "p99", "cache", "backends"]:
        check_in(word, proc.stdout)
    check_in("step 1:", proc.stderr, "stderr (plain progress lines when not a terminal)")


# ---------------------------------------------------------------------------
# info

@case
def info_json_lists_every_backend(lattn):
    info = lattn.json("info", "--json")
    for key in ["lattn", "cpu", "cuda", "config", "backends"]:
        check(key in info, f"missing {key!r} in info --json")
    check(info["cpu"]["hardware_threads"] >= 1, "no CPU threads")
    for kind in ["prefill", "decode"]:
        listing = info["backends"][kind]
        names = [b["name"] for b in listing["backends"]]
        check(names == ALL_BACKENDS, f"{kind} backends: {names}")
        for b in listing["backends"]:
            check(b["valid"] == (not b["reasons"]), f"{kind} {b['name']}: valid but reasons, or neither")
        check(listing["selected"] in names, f"{kind}: selected {listing['selected']!r}")
    text = lattn("info").stdout
    check_in("valid", text)


# ---------------------------------------------------------------------------
# bench

TINY_SWEEP = ["--phase", "prefill,decode", "--heads", "4", "--batch", "1,2", "--seq", "64", "--block-size", "16",
              "--backend", "cpu", "--device", "cpu", "--repeats", "2", "-q"]  # explicit: auto is cuda:0 on a GPU machine


@case
def bench_json_has_ceilings_and_fractions(lattn):
    result = lattn.json("bench", *TINY_SWEEP, "-o", "json")
    ceilings = result["ceilings"]
    check(ceilings.get("bandwidth_gbps", 0) > 0, f"no bandwidth ceiling: {ceilings}")
    check(max(ceilings.get("f32_gflops", 0), ceilings.get("bf16_gflops", 0)) > 0, f"no compute ceiling: {ceilings}")
    rows = result["rows"]
    check(len(rows) == 4, f"{len(rows)} rows, expected 2 phases x 2 batches")
    for row in rows:
        check(row["phase"] in ("prefill", "decode"), f"row: {row}")
        check(row["backend"] == "cpu", f"row: {row}")
        check(0 < row["roofline_fraction"], f"row without a roofline fraction: {row}")
        check(row["median_us"] > 0 and row["flops"] > 0 and row["bytes"] > 0, f"row without a time or work: {row}")
        if not row.get("paired_ceilings"):
            check(abs(row["roofline_fraction"] - row["roofline_us"] / row["median_us"])
                  < 1e-6 * row["roofline_fraction"], f"roofline_fraction is not roofline_us / median_us: {row}")
    csv = lattn("bench", *TINY_SWEEP, "-o", "csv").stdout.splitlines()
    check(len(csv) == 5 and "roofline_fraction" in csv[0], f"csv:\n{csv}")
    table = lattn("bench", *TINY_SWEEP).stdout
    check_in("ceilings:", table)
    check_in("roofline", table)
    paired = lattn.json("bench", "--device", "cpu", "--phase", "decode", "--heads", "4", "--batch", "1", "--seq", "64", "--repeats", "2",
                        "-q", "--pair-ceilings", "-o", "json")
    check(paired["rows"][0]["paired_ceilings"] and len(paired["rows"][0]["paired_fractions"]) == 2,
          f"--pair-ceilings: {paired['rows'][0]}")


@case
def bench_plot_writes_a_png(lattn):
    png = os.path.join(lattn.workdir, "bench.png")
    lattn("bench", *TINY_SWEEP, "-o", "json", "--plot", png)
    with open(png, "rb") as f:
        check(f.read(8) == b"\x89PNG\r\n\x1a\n", "not a PNG file")
    # A script that fails is reported with exit code 6.
    broken = write(os.path.join(lattn.workdir, "broken.py"), "import sys\nsys.exit(3)\n")
    env = dict(os.environ, LATTN_PLOT_SCRIPT=broken)
    proc = subprocess.run([lattn.path, "bench", *TINY_SWEEP, "--plot", png], capture_output=True, text=True,
                          env=env, timeout=600)
    check(proc.returncode == EXIT_PLOT, f"exit {proc.returncode} with a failing plot script:\n{proc.stderr}")
    check_in("failed with exit status 3", proc.stderr, "stderr")
    # A folder that does not exist: one sentence, before any measurement, no traceback.
    proc = lattn("bench", *TINY_SWEEP, "--plot", os.path.join(lattn.workdir, "no", "such", "dir", "b.png"),
                 expect=EXIT_USAGE)
    check_in("does not exist", proc.stderr, "stderr")
    check("Traceback" not in proc.stderr and proc.stdout == "", f"stderr:\n{proc.stderr}")


@case
def plot_reads_right(lattn):
    # Rows with a fraction above 1 (noisy ceilings) and both kinds of bound.
    rows = [{"name": f"case {i}", "phase": "decode", "backend": "cpu", "gflops": 10.0 * (i + 1), "gbps": 5.0,
             "median_us": 10.0, "min_us": 8.0, "roofline_fraction": f, "bound": b}
            for i, (f, b) in enumerate([(0.4, "memory"), (1.3, "compute")])]
    # One repeat: min == median, and rounded apart in the JSON the minimum can come out a hair
    # above the median (a negative whisker matplotlib refuses).
    rows.append({"name": "case 2", "phase": "prefill", "backend": "cpu", "gflops": 9.3, "gbps": 0.04,
                 "median_us": 580054.5, "min_us": 580054.50000001, "roofline_fraction": 0.2, "bound": "compute"})
    data = write(os.path.join(lattn.workdir, "rows.json"), json.dumps({"ceilings": {"threads": 2}, "rows": rows}))
    png = os.path.join(lattn.workdir, "rows.png")
    script = os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "plot_bench.py")
    probe = ("import runpy, sys\n"
             "import matplotlib; matplotlib.use('Agg')\n"
             "import matplotlib.pyplot as plt\n"
             "saved = {}\n"
             "orig = plt.Figure.savefig\n"
             "def keep(fig, *a, **k):\n"
             "    saved['fig'] = fig\n"
             "    return orig(fig, *a, **k)\n"
             "plt.Figure.savefig = keep\n"
             f"sys.argv = ['plot_bench.py', {data!r}, {png!r}]\n"
             "try:\n"
             f"    runpy.run_path({script!r}, run_name='__main__')\n"
             "except SystemExit as e:\n"
             "    assert e.code == 0, e.code\n"
             "fig = saved['fig']\n"
             "top, bottom = fig.axes[0], fig.axes[1]\n"
             "print('ylim', top.get_ylim()[0], bottom.get_ylim()[0], fig.axes[2].get_ylim()[0])\n"
             "print('legend', '|'.join(t.get_text() for t in top.get_legend().get_texts()))\n"
             "print('legend2', '|'.join(t.get_text() for t in bottom.get_legend().get_texts()))\n"
             "print('texts', '|'.join(t.get_text() for t in bottom.texts))\n")
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300)
    check(proc.returncode == 0, f"plot probe failed:\n{proc.stderr}")
    out = proc.stdout
    check_in("ylim 0.0 0.0 0.0", out)
    for mark in ["decode / cpu", "compute bound", "memory bound", "min-median spread", "GB/s"]:
        check_in(mark, out)
    check_in("roofline", out)
    check_in("above 1", out)
    # A missing output folder from the script itself: one line, exit 2, no traceback.
    proc = subprocess.run([sys.executable, script, data, os.path.join(lattn.workdir, "nope", "x.png")],
                          capture_output=True, text=True, timeout=300)
    check(proc.returncode == 2 and "Traceback" not in proc.stderr and "cannot write" in proc.stderr,
          f"exit {proc.returncode}:\n{proc.stderr}")


# ---------------------------------------------------------------------------
# the environment, provenance, reproducibility, the softmax scale

@case
def bad_cpu_isa_is_a_usage_error_in_every_command(lattn):
    bad = {"LATTN_CPU_ISA": "garbage"}
    for args in (["info"], ["run", "--num-requests", "2", "--device", "cpu", "-q"], ["bench", *TINY_SWEEP]):
        proc = lattn(*args, expect=EXIT_USAGE, env=bad)
        check_in("LATTN_CPU_ISA", proc.stderr, "stderr")
        check("Traceback" not in proc.stderr and proc.stderr.count("\n") == 1, f"not one sentence:\n{proc.stderr}")


PROVENANCE = ["schema_version", "lattn_version", "commit", "timestamp", "host"]


def check_provenance(doc, what):
    check(list(doc)[:len(PROVENANCE)] == PROVENANCE, f"{what}: first keys {list(doc)[:6]}")
    check(doc["schema_version"] == 1 and doc["lattn_version"] and doc["commit"] and doc["host"], f"{what}: {doc}")
    check(doc["timestamp"].endswith("Z") and "T" in doc["timestamp"], f"{what}: timestamp {doc['timestamp']}")


TINY_RUN = ["--num-requests", "6", "--prompt-len-median", "40", "--output-len-mean", "4", "--layers", "1",
            "--model", "deepseek-v2-lite", "--tp", "4", "--block-size", "16", "--device", "cpu"]


@case
def json_outputs_carry_provenance_and_say_what_ran(lattn):
    info = lattn.json("info", "--json", "--device", "cpu")
    check_provenance(info, "info --json")
    check(info["cpu"]["isa"] in ("scalar", "avx2", "avx512", "avx512bf16"), f"isa: {info['cpu']}")
    run = lattn.json("run", "--json", "-q", *TINY_RUN)
    check_provenance(run, "run --json")
    check(run["backends"]["decode"]["kernel"].startswith(run["backends"]["decode"]["name"] + ":"),
          f"kernel: {run['backends']}")
    check(abs(run["config"]["softmax_scale"] - 0.11472) < 1e-4, f"V2-Lite's YaRN scale: {run['config']}")
    bench = lattn.json("bench", *TINY_SWEEP, "-o", "json", "--threads", "1")
    check_provenance(bench, "bench -o json")
    for row in bench["rows"]:
        check(row["label"].startswith("cpu: ") and "kernels" in row["label"], f"label: {row['label']!r}")
        check(row["num_threads"] == 1, f"num_threads: {row['num_threads']}")
    every = lattn.json("bench", *TINY_SWEEP, "-o", "json")
    check(all(r["num_threads"] >= 1 for r in every["rows"]), "threads 0 (all) must say how many")
    forced = lattn.json("info", "--json", "--device", "cpu", env={"LATTN_CPU_ISA": "scalar"})
    check(forced["cpu"]["isa"] == "scalar" and "LATTN_CPU_ISA=scalar" in forced["cpu"]["cpu_backend_kernels"],
          f"LATTN_CPU_ISA not honoured: {forced['cpu']}")


@case
def labels_come_from_the_backend_instances(lattn):
    # run: every step's label, counted; info: the selected backends' labels; bench rows: the instance's.
    run = lattn.json("run", "--json", "-q", "--decode-backend", "reference", *TINY_RUN)
    for kind in ("prefill", "decode"):
        b = run["backends"][kind]
        check(b["kernels"] and sum(k["steps"] for k in b["kernels"]) == b["steps"], f"{kind} kernels: {b}")
        check(b["kernel"] == b["kernels"][0]["label"], f"{kind} kernel: {b}")
    check(run["backends"]["decode"]["kernel"] == "reference: plain loops, fp64 accumulation", f"{run['backends']}")
    info = lattn.json("info", "--json", "--device", "cpu", "--decode-backend", "reference")
    check(info["backends"]["decode"]["kernel"] == "reference: plain loops, fp64 accumulation", f"{info['backends']}")
    check(info["backends"]["prefill"]["kernel"] == "cpu: " + info["cpu"]["cpu_backend_kernels"], f"{info}")
    text = lattn("info", "--device", "cpu", env={"LATTN_CPU_ISA": "scalar"}).stdout
    check_in("  kernels: cpu: scalar kernels (LATTN_CPU_ISA=scalar); projections: OpenBLAS sgemm", text)
    rows = lattn.json("bench", *TINY_SWEEP, "-o", "json", env={"LATTN_CPU_ISA": "scalar"})["rows"]
    check(all(r["label"].startswith("cpu: scalar kernels (LATTN_CPU_ISA=scalar)") for r in rows), f"{rows}")


def cuda_device_or_skip(lattn):
    info = lattn.json("info", "--json", "--device", "cpu")
    if not info["cuda"]["devices"]:
        raise Skip(f"no CUDA device: {info['cuda']['unavailable_reason']}")
    return info["cuda"]["devices"][0]


DECODE_LABEL = re.compile(r"^(cuda|hopper): (sm80 mma\.sync|sm90a wgmma \+ TMA) decode.*, tile m(\d+)n(\d+)w\d+s\d+ "
                          r"\(\d+ head rows x \d+ keys, \d+ warps, \d+ stages\), (\d+) row tiles? x (\d+) split-KV "
                          r"parts, (?:then the combine kernel|planned and combined in the same launch); "
                          r"projections: cuBLAS \(f32 accumulation\)$")


@case
def cuda_labels_name_the_kernel_tiles_and_splits(lattn):
    device = cuda_device_or_skip(lattn)
    text = lattn("info", "--device", "cuda:0").stdout
    check(re.search(r"  kernels: (cuda|hopper): sm(80 mma\.sync|90a wgmma \+ TMA) prefill, qk192_v128_", text), text)
    run = lattn.json("run", "--json", "-q", "--device", "cuda:0", "--num-requests", "8", "--layers", "1")
    decode = run["backends"]["decode"]
    check(all(DECODE_LABEL.match(k["label"]) for k in decode["kernels"]), f"decode kernels: {decode}")
    check(sum(k["steps"] for k in decode["kernels"]) == decode["steps"], f"decode steps: {decode}")
    prefill = run["backends"]["prefill"]["kernel"]
    check(re.match(r"^(cuda|hopper): sm(80 mma\.sync|90a wgmma \+ TMA) prefill, qk192_v128_m\d+_n\d+", prefill),
          prefill)
    if device["capability"] == "9.0":  # the selector's hopper: wgmma from 17 rows per request (128 heads here)
        wide = lattn.json("run", "--json", "-q", "--device", "cuda:0", "--num-requests", "4", "--layers", "1",
                          "--tp", "1")["backends"]["decode"]["kernel"]
        check(re.match(r"^hopper: sm90a wgmma \+ TMA decode \((seesaw|serial) schedule\), tile m64n64", wide),
              wide)
        check(" (sm80 delegate: at most 16 rows per request" in decode["kernel"], decode["kernel"])
    rows = lattn.json("bench", "--device", "cuda:0", "--phase", "prefill,decode", "--batch", "2", "--seq", "256",
                      "--block-size", "64", "--repeats", "2", "--warmup", "1", "-o", "json", "-q")["rows"]
    for r in rows:
        ok = DECODE_LABEL.match(r["label"]) if r["phase"] == "decode" else " prefill, qk192_v128_" in r["label"]
        check(ok, f"bench label: {r['label']!r}")
    generic = lattn.json("run", "--json", "-q", "--device", "cuda:0", "--model", "minicpm3", "--num-requests", "4",
                         "--layers", "1")["backends"]["decode"]["kernel"]
    check(": generic SIMT decode kernel, no tensor cores" in generic, generic)


@case
def virtual_clock_runs_are_reproducible(lattn):
    def strip(doc):
        return {k: v for k, v in doc.items() if k != "timestamp"}

    args = ["run", "--json", "-q", "--clock", "virtual", "--request-rate", "50", *TINY_RUN]
    first, second = lattn.json(*args), lattn.json(*args)
    check(strip(first) == strip(second), "two --clock virtual runs differ")
    check(first["config"]["clock"] == "virtual", f"config: {first['config']}")
    lattn("run", "--clock", "wall", "-q", *TINY_RUN, expect=EXIT_USAGE)
    scaled = lattn.json("run", "--json", "-q", "--softmax-scale", "0.25", *TINY_RUN)
    check(abs(scaled["config"]["softmax_scale"] - 0.25) < 1e-6, f"--softmax-scale: {scaled['config']}")


@case
def documented_default_run_is_reproduced(lattn):
    # docs/cli.md's reproducible run: its stdout, except the machine-dependent kernels lines.
    doc = open(os.path.join(os.path.dirname(__file__), "..", "..", "docs", "cli.md")).read()
    block = doc[doc.index("$ build/tools/lattn run --clock virtual"):]
    block = block[:block.index("```")]
    command, *shown = block.rstrip("\n").split("\n")
    args = command.split()[2:]
    out = lattn(*args).stdout.rstrip("\n").split("\n")

    def comparable(lines):
        keep, skip = [], False
        for line in lines:
            if line.startswith("kernels"):
                skip = True
            elif skip and line.startswith("           "):
                continue
            else:
                skip = False
                keep.append(line)
        return keep

    check(comparable(out) == comparable(shown), "docs/cli.md's run differs:\n" + "\n".join(out))


def doc_examples():
    """Every `$ ` command of docs/cli.md's code blocks with the output shown under it."""
    doc = open(os.path.join(os.path.dirname(__file__), "..", "..", "docs", "cli.md")).read()
    examples = []
    for block in re.findall(r"\n```\n(.*?)```", doc, re.S):
        for chunk in re.split(r"^\$ ", block, flags=re.M)[1:]:
            command, _, shown = chunk.partition("\n")
            examples.append((command, shown.rstrip("\n")))
    return examples


def shape(text):
    """A JSON document's keys, recursively (lists: their first element's), without the values."""
    if isinstance(text, dict):
        return {k: shape(v) for k, v in text.items()}
    if isinstance(text, list):
        return [shape(text[0])] if text else []
    return None


def same_shape(got, shown):
    """The same keys, recursively; an empty list on either side (the page's machine had no GPU, this one may
    have: `cuda.devices`) matches any list."""
    if isinstance(got, dict) or isinstance(shown, dict):
        return isinstance(got, dict) and isinstance(shown, dict) and got.keys() == shown.keys() and all(
            same_shape(got[k], shown[k]) for k in got)
    if isinstance(got, list) or isinstance(shown, list):
        return isinstance(got, list) and isinstance(shown, list) and (not got or not shown or
                                                                      same_shape(got[0], shown[0]))
    return True


def first_words(text):
    # Progress lines ("step 189: ...") and the count of MOVED bench cases depend on timing and
    # load; the other lines' heads do not.
    # The device line names the GPU where there is one ("cuda:0"); the page shows a machine without.
    return [re.sub(r"^cuda:\d+$", "cuda", line.split(" ")[0]) for line in text.split("\n")
            if line and not re.match(r"step \d+:|\d+ case\(s\) MOVED", line)]


# Appended to the examples that measure (shorter, same output shape): CI's 2 cores, sanitizer builds.
QUICK = {"bench": ["--repeats", "1", "--warmup", "0"], "run": ["--num-requests", "16"]}


@case
def documented_examples_run(lattn):
    # Every example of docs/cli.md runs: exit codes as `echo $?` shows them, error sentences word for
    # word, JSON with the documented keys, summaries and tables with the documented lines. The
    # default run's numbers are compared by documented_default_run_is_reproduced.
    ran = 0
    last = None
    for command, shown in doc_examples():
        words = command.split()
        if words[0] == "cat":  # the example's input file, as shown
            write(os.path.join(lattn.workdir, words[1]), shown + "\n")
            continue
        if words[0] == "echo":
            check(last is not None and str(last.returncode) == shown, f"{command}: {last and last.returncode} != {shown}")
            continue
        if words[0] == "head":  # the PNG's signature
            path = next(w for w in words if w.endswith(".png"))
            png = open(os.path.join(lattn.workdir, path), "rb").read(8)
            check(png == b"\x89PNG\r\n\x1a\n", f"{path}: {png!r}")
            continue
        env = {}
        while "=" in words[0]:
            key, value = words.pop(0).split("=", 1)
            env[key] = value
        check(words[0] == "build/tools/lattn", f"unknown example command: {command}")
        merged = words[-1] == "2>&1"
        redirect = words[words.index(">") + 1] if ">" in words else None
        args = [w for w in words[1:] if w != "2>&1"]
        if redirect:
            args = args[:args.index(">")]
        if "--device" not in args and args[0] in ("run", "bench", "info"):
            args += ["--device", "cpu"]  # what the page shows (auto picks a GPU where there is one)
        if args[0] == "bench" or (args[0] == "run" and "--num-requests" not in args and "--trace" not in args):
            args += QUICK[args[0]]
        for d in [a for a in args if a.endswith(".png")]:
            os.makedirs(os.path.join(lattn.workdir, os.path.dirname(d)), exist_ok=True)
        # 2>&1: one pipe for both, in the order the command wrote them.
        proc = subprocess.run([lattn.path, *args], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT if merged else subprocess.PIPE, text=True, timeout=600,
                              cwd=lattn.workdir, env=dict(os.environ, **env))
        proc.stderr = proc.stderr or ""
        last = proc
        ran += 1
        out = proc.stdout
        what = f"docs/cli.md: $ {command}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}"
        if proc.returncode != 0:  # an error example: its first line, word for word
            check(proc.stderr.split("\n")[0] == shown.split("\n")[0], what)
            continue
        if redirect:
            check(shape(json.loads(proc.stdout)) is not None and not shown, what)
        elif shown.startswith("{"):
            check(same_shape(json.loads(out), json.loads(shown)), f"JSON keys differ from the page's:\n{what}")
        elif "-o" in args and args[args.index("-o") + 1] == "csv":
            got, want = out.rstrip("\n").split("\n"), shown.split("\n")
            check(got[0] == want[0] and len(got) == len(want), what)
            check([g.split(",")[0] for g in got[1:]] == [w.split(",")[0] for w in want[1:]], what)
        else:
            check(first_words(out) == first_words(shown), f"line heads differ from the page's:\n{what}")
            for line in shown.split("\n"):  # the lines that depend on the flags only, word for word
                if line.startswith(("model ", "config ", "[")) or re.match(r"(prefill|decode) H\d+ ", line):
                    check(line.split("  ")[0] in out, f"{line!r} not printed:\n{what}")
            if "--verify" in args:
                check_in(": PASS", out)
    check(ran >= 15, f"only {ran} examples found in docs/cli.md")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lattn", help="path of the lattn binary")
    parser.add_argument("--list", action="store_true", help="print the case names")
    parser.add_argument("cases", nargs="*")
    args = parser.parse_args()
    if args.list:
        print("\n".join(CASES))
        return 0
    failed = skipped = 0
    for name in args.cases:
        with tempfile.TemporaryDirectory(prefix="lattn_cli_") as workdir:
            try:
                CASES[name](Lattn(os.path.abspath(args.lattn), workdir))
                print(f"ok   {name}")
            except Skip as e:
                skipped += 1
                print(f"skip {name}: {e}")
            except AssertionError as e:
                failed += 1
                print(f"FAIL {name}: {e}")
    if failed:
        return 1
    return 77 if skipped and skipped == len(args.cases) else 0


if __name__ == "__main__":
    sys.exit(main())
