// The run summary: throughput, step latency, cache use, backends, verification.
#include "run_output.h"

#include <cmath>

#include "serving/stats.h"

namespace lattn::cli {
namespace {

using serving::percentile;
using serving::RunReport;

double per_second(int64_t count, double seconds) { return seconds > 0 ? double(count) / seconds : 0.0; }
double ms(double seconds) { return seconds * 1e3; }
// JSON numbers with the digits a measurement has (timings are not exact to
// the nanosecond): `digits` decimals.
double rounded(double value, int digits) {
  const double scale = std::pow(10.0, digits);
  return std::round(value * scale) / scale;
}

nlohmann::ordered_json latency_json(const std::vector<double>& seconds) {
  return {{"p50_ms", rounded(ms(percentile(seconds, 0.5)), 3)},
          {"p99_ms", rounded(ms(percentile(seconds, 0.99)), 3)},
          {"mean_ms", rounded(ms(serving::mean(seconds)), 3)},
          {"max_ms", rounded(ms(percentile(seconds, 1.0)), 3)}};
}

std::vector<double> step_latencies(const RunReport& r) {
  std::vector<double> v;
  v.reserve(r.steps.size());
  for (const auto& s : r.steps) v.push_back(s.latency_s);
  return v;
}

}  // namespace

void print_run_header(std::FILE* out, const RunDescription& run) {
  const LayerSetup& l = run.layer;
  std::fprintf(out, "model      %s --tp %d: %s scale %.4g, %d layer%s, %s activations, %s cache, device %s\n",
               l.model.c_str(), l.tp, l.dims.str().c_str(), double(l.dims.softmax_scale()), run.num_layers,
               run.num_layers == 1 ? "" : "s", dtype_flag_name(l.dtype), dtype_flag_name(l.kv_cache_dtype),
               device_name(l.device).c_str());
  if (l.sparse()) {
    std::fprintf(
        out, "sparse     every token attends to the top %d cached tokens of its lightning indexer (%d heads x %d)\n",
        l.indexer.index_topk, l.indexer.index_n_heads, l.indexer.index_head_dim);
  }
  std::fprintf(out, "trace      %s\n", run.trace.c_str());
  std::fprintf(out, "scheduler  %d tokens per step, %d sequences, %d blocks of %d tokens per layer\n",
               run.scheduler.max_num_batched_tokens, run.scheduler.max_num_seqs, run.scheduler.num_blocks,
               run.scheduler.block_size);
  std::fflush(out);
}

void print_run_summary(std::FILE* out, const RunDescription& run, const RunReport& r) {
  const std::vector<double> latencies = step_latencies(r);
  std::fprintf(out, "requests   %lld of %lld finished in %zu steps; engine time %.2f s (busy %.2f s)\n",
               (long long)r.num_finished, (long long)r.num_requests, r.steps.size(), r.end_s, r.busy_s);
  std::fprintf(out, "prefill    %lld tokens, %.1f tokens/s (%lld prefills without context, %lld chunks with context)\n",
               (long long)r.prefill_tokens, per_second(r.prefill_tokens, r.busy_s), (long long)r.prefill_rows,
               (long long)r.prefill_with_context_rows);
  std::fprintf(out, "decode     %lld tokens, %.1f tokens/s\n", (long long)r.decode_tokens,
               per_second(r.decode_tokens, r.busy_s));
  std::fprintf(out,
               run.virtual_clock
                   ? "step       p50 %.1f ms, p99 %.1f ms, mean %.1f ms (modelled: --clock virtual, %lld layers)\n"
                   : "step       p50 %.1f ms, p99 %.1f ms, mean %.1f ms (metadata + %lld layers' forward)\n",
               ms(percentile(latencies, 0.5)), ms(percentile(latencies, 0.99)), ms(serving::mean(latencies)),
               (long long)r.num_layers);
  std::fprintf(out, "latency    time to first token p50 %.0f ms, p99 %.0f ms; request p50 %.0f ms, p99 %.0f ms\n",
               ms(percentile(r.time_to_first_token_s, 0.5)), ms(percentile(r.time_to_first_token_s, 0.99)),
               ms(percentile(r.request_latency_s, 0.5)), ms(percentile(r.request_latency_s, 0.99)));
  std::fprintf(out,
               "cache      peak %d of %d blocks (%.0f%%), mean %.0f%%; %.0f%% of the slots in used blocks hold tokens; "
               "%lld preemptions, %lld steps with a request waiting for blocks\n",
               r.peak_blocks_used, r.num_blocks, 100.0 * r.peak_blocks_used / std::max(r.num_blocks, 1),
               100.0 * r.mean_block_utilisation, 100.0 * r.mean_token_utilisation, (long long)r.preemptions,
               (long long)r.blocked_steps);
  std::fprintf(out, "backends   prefill %s, ran in %lld steps: %s\n", r.prefill_backend.name.c_str(),
               (long long)r.prefill_backend.steps, r.prefill_backend.why.c_str());
  std::fprintf(out, "           decode %s, ran in %lld steps: %s\n", r.decode_backend.name.c_str(),
               (long long)r.decode_backend.steps, r.decode_backend.why.c_str());
  // What ran inside those backends (machine-dependent: the CPU's ISA path and
  // GEMM, a CUDA kernel's tiles and split-KV parts); steps are named when a
  // backend ran more than one (a CUDA decode plan follows the batch).
  const char* lead = "kernels    ";
  for (const auto* use : {&r.prefill_backend, &r.decode_backend}) {
    const char* kind = use == &r.prefill_backend ? "prefill" : "decode";
    for (const auto& [label, steps] : use->kernels) {
      if (use->kernels.size() == 1) {
        std::fprintf(out, "%s%s %s\n", lead, kind, label.c_str());
      } else {
        std::fprintf(out, "%s%s %s (%lld steps)\n", lead, kind, label.c_str(), (long long)steps);
      }
      lead = "           ";
    }
  }
  if (r.verify) {
    const serving::VerifyReport& v = *r.verify;
    std::fprintf(out,
                 "verify     %zu requests re-computed with the reference backend in %.1f s: worst relative error %.2e "
                 "(request %lld, layer %d); bound for %s %.0e: %s\n",
                 v.requests.size(), v.seconds, v.worst_rel_l2, (long long)v.worst_request, v.worst_layer,
                 dtype_flag_name(run.layer.dtype), v.bound, v.passed ? "PASS" : "FAIL");
    for (const serving::VerifiedRequest& q : v.requests) {
      std::fprintf(out,
                   "           request %lld: prompt %d, output %d; %d prefill chunks (%d with context), %d decodes; "
                   "relative error %.2e%s%s\n",
                   (long long)q.id, q.prompt_len, q.output_len, q.prefill_chunks, q.chunks_with_context, q.decode_steps,
                   q.worst_rel_l2, q.finite ? "" : "; NOT FINITE", q.complete ? "" : "; INCOMPLETE");
    }
  }
  std::fflush(out);
}

nlohmann::ordered_json run_report_json(const RunDescription& run, const RunReport& r) {
  const LayerSetup& l = run.layer;
  nlohmann::ordered_json j;
  j["config"] = {{"model", l.model},
                 {"tp", l.tp},
                 {"dims",
                  {{"num_heads", l.dims.num_heads},
                   {"kv_lora_rank", l.dims.kv_lora_rank},
                   {"qk_nope_head_dim", l.dims.qk_nope_head_dim},
                   {"qk_rope_head_dim", l.dims.qk_rope_head_dim},
                   {"v_head_dim", l.dims.v_head_dim}}},
                 {"softmax_scale", l.dims.softmax_scale()},
                 {"layers", run.num_layers},
                 {"dtype", dtype_flag_name(l.dtype)},
                 {"kv_cache_dtype", dtype_flag_name(l.kv_cache_dtype)},
                 {"block_size", run.scheduler.block_size},
                 {"num_blocks", run.scheduler.num_blocks},
                 {"max_num_batched_tokens", run.scheduler.max_num_batched_tokens},
                 {"max_num_seqs", run.scheduler.max_num_seqs},
                 {"device", device_name(l.device)},
                 {"clock", run.virtual_clock ? "virtual" : "measured"},
                 {"seed", run.seed}};
  if (l.sparse()) {
    j["config"]["indexer"] = {{"index_topk", l.indexer.index_topk},
                              {"index_n_heads", l.indexer.index_n_heads},
                              {"index_head_dim", l.indexer.index_head_dim}};
  }
  j["trace"] = run.trace_json;
  j["requests"] = {{"total", r.num_requests}, {"finished", r.num_finished}};
  j["steps"] = r.steps.size();
  j["engine_time_s"] = rounded(r.end_s, 6);
  j["busy_time_s"] = rounded(r.busy_s, 6);
  j["prefill"] = {{"tokens", r.prefill_tokens},
                  {"tokens_per_s", rounded(per_second(r.prefill_tokens, r.busy_s), 2)},
                  {"rows_without_context", r.prefill_rows},
                  {"rows_with_context", r.prefill_with_context_rows}};
  j["decode"] = {{"tokens", r.decode_tokens},
                 {"tokens_per_s", rounded(per_second(r.decode_tokens, r.busy_s), 2)},
                 {"rows", r.decode_rows}};
  j["step_latency"] = latency_json(step_latencies(r));
  j["time_to_first_token"] = latency_json(r.time_to_first_token_s);
  j["request_latency"] = latency_json(r.request_latency_s);
  j["cache"] = {{"num_blocks", r.num_blocks},
                {"block_size", r.block_size},
                {"peak_blocks_used", r.peak_blocks_used},
                {"peak_utilisation", rounded(double(r.peak_blocks_used) / std::max(r.num_blocks, 1), 4)},
                {"mean_block_utilisation", rounded(r.mean_block_utilisation, 4)},
                {"mean_token_utilisation", rounded(r.mean_token_utilisation, 4)},
                {"preemptions", r.preemptions},
                {"steps_with_blocked_requests", r.blocked_steps}};
  auto backend_json = [](const serving::BackendUse& b) {
    nlohmann::ordered_json kernels = nlohmann::ordered_json::array();
    for (const auto& [label, steps] : b.kernels) kernels.push_back({{"label", label}, {"steps", steps}});
    return nlohmann::ordered_json{
        {"name", b.name}, {"why", b.why}, {"steps", b.steps}, {"kernel", b.main_kernel()}, {"kernels", kernels}};
  };
  j["backends"] = {{"prefill", backend_json(r.prefill_backend)}, {"decode", backend_json(r.decode_backend)}};
  if (r.verify) {
    const serving::VerifyReport& v = *r.verify;
    nlohmann::ordered_json requests = nlohmann::ordered_json::array();
    for (const serving::VerifiedRequest& q : v.requests) {
      requests.push_back({{"id", q.id},
                          {"prompt_len", q.prompt_len},
                          {"output_len", q.output_len},
                          {"positions", q.positions},
                          {"prefill_chunks", q.prefill_chunks},
                          {"chunks_with_context", q.chunks_with_context},
                          {"decode_steps", q.decode_steps},
                          {"rel_l2", std::isfinite(q.worst_rel_l2) ? nlohmann::ordered_json(q.worst_rel_l2)
                                                                   : nlohmann::ordered_json("inf")},
                          {"worst_layer", q.worst_layer},
                          {"finite", q.finite},
                          {"complete", q.complete}});
    }
    j["verify"] = {{"reference_backend", "reference"},
                   {"worst_rel_l2", std::isfinite(v.worst_rel_l2) ? nlohmann::ordered_json(v.worst_rel_l2)
                                                                  : nlohmann::ordered_json("inf")},
                   {"worst_request", v.worst_request},
                   {"worst_layer", v.worst_layer},
                   {"bound", v.bound},
                   {"passed", v.passed},
                   {"seconds", rounded(v.seconds, 3)},
                   {"requests", requests}};
  }
  return j;
}

}  // namespace lattn::cli
