// tools/progress.h — what `lattn run` shows while it works: a redrawn bar on
// a terminal, plain periodic lines otherwise (logs, pipes, CI), or nothing.
// Always on stderr, so stdout carries only the summary (or the JSON).
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>

#include "serving/engine.h"

namespace lattn::cli {

class ProgressDisplay {
 public:
  enum class Mode { bar, lines, off };
  // bar when stderr is a terminal, lines when not; off when quiet.
  static Mode detect(bool quiet);

  ProgressDisplay(Mode mode, int64_t total_requests, std::FILE* out = stderr);
  void update(const serving::StepStats& step);
  // Ends the display (the bar's final state and a newline).
  void finish();

 private:
  void draw_bar(const serving::StepStats& step);
  void print_line(const serving::StepStats& step);

  Mode mode_;
  int64_t total_requests_;
  std::FILE* out_;
  std::chrono::steady_clock::time_point last_draw_{};
  bool drawn_ = false;
  int64_t last_drawn_index_ = -1;
  serving::StepStats last_{};
  int64_t tokens_ = 0;
  double busy_s_ = 0;
};

}  // namespace lattn::cli
