// The progress bar and the plain progress lines.
#include "progress.h"

#include <string>

#include <unistd.h>

namespace lattn::cli {
namespace {

constexpr auto kBarInterval = std::chrono::milliseconds(100);  // redraws per second: 10
constexpr auto kLineInterval = std::chrono::seconds(2);        // plain lines: one per 2 s at most
constexpr int kBarWidth = 28;

std::string batch_text(const serving::StepStats& s) {
  std::string text = std::to_string(s.decodes) + " decode";
  const int32_t prefills = s.prefills + s.prefills_with_context;
  if (prefills) {
    text += " + " + std::to_string(prefills) + " prefill";
    if (s.prefills_with_context) text += " (" + std::to_string(s.prefills_with_context) + " with context)";
  }
  return text;
}

}  // namespace

ProgressDisplay::Mode ProgressDisplay::detect(bool quiet) {
  if (quiet) return Mode::off;
  return isatty(fileno(stderr)) ? Mode::bar : Mode::lines;
}

ProgressDisplay::ProgressDisplay(Mode mode, int64_t total_requests, std::FILE* out)
    : mode_(mode), total_requests_(total_requests), out_(out) {}

void ProgressDisplay::update(const serving::StepStats& step) {
  tokens_ += step.decode_tokens + step.prefill_tokens;
  busy_s_ += step.latency_s;
  last_ = step;
  if (mode_ == Mode::off) return;
  const auto now = std::chrono::steady_clock::now();
  const auto interval = mode_ == Mode::bar ? std::chrono::steady_clock::duration(kBarInterval)
                                           : std::chrono::steady_clock::duration(kLineInterval);
  if (drawn_ && now - last_draw_ < interval) return;
  last_draw_ = now;
  drawn_ = true;
  last_drawn_index_ = step.index;
  if (mode_ == Mode::bar) {
    draw_bar(step);
  } else {
    print_line(step);
  }
}

void ProgressDisplay::draw_bar(const serving::StepStats& s) {
  const double done = total_requests_ ? double(s.finished) / double(total_requests_) : 1.0;
  const int filled = int(done * kBarWidth + 0.5);
  std::string bar(size_t(filled), '#');
  bar.append(size_t(kBarWidth - filled), '.');
  // \r + "erase line" redraws in place; the bar stays on one line.
  std::fprintf(out_, "\r\x1b[2K[%s] %lld/%lld requests | step %lld | %.0f tok/s | %d running, %d waiting", bar.c_str(),
               (long long)s.finished, (long long)total_requests_, (long long)s.index + 1,
               busy_s_ > 0 ? double(tokens_) / busy_s_ : 0.0, s.running, s.waiting);
  std::fflush(out_);
}

void ProgressDisplay::print_line(const serving::StepStats& s) {
  std::fprintf(out_, "step %lld: %lld/%lld finished, %d running, %d waiting; batch %s, %d tokens, %.1f ms\n",
               (long long)s.index + 1, (long long)s.finished, (long long)total_requests_, s.running, s.waiting,
               batch_text(s).c_str(), s.decode_tokens + s.prefill_tokens, s.latency_s * 1e3);
  std::fflush(out_);
}

void ProgressDisplay::finish() {
  if (mode_ == Mode::off || !drawn_) return;
  if (mode_ == Mode::bar) {
    draw_bar(last_);
    std::fputc('\n', out_);
  } else if (last_drawn_index_ != last_.index) {
    print_line(last_);
  }
  std::fflush(out_);
}

}  // namespace lattn::cli
