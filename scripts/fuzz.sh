#!/usr/bin/env bash
# Runs every libFuzzer target of tests/fuzz for SECONDS each (default 30)
# under ASan + UBSan, in the build folder build-fuzz (clang; configured here).
#   scripts/fuzz.sh [SECONDS] [TARGET...]
# Each target's corpus lives in build-fuzz/corpus/<target> and grows across
# runs. Prints one line per target: executions, and "ok" or the crash file.
# Exit status: 0 when no target found a crash.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_EACH=${1:-30}
shift || true
BUILD=${FUZZ_BUILD:-build-fuzz}
JOBS=${JOBS:-$(nproc)}
TARGETS=("$@")
[ ${#TARGETS[@]} -eq 0 ] && TARGETS=(fuzz_trace_jsonl fuzz_metadata_builder fuzz_op_validators fuzz_dlpack_import)

launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
# -O1 with line tables: ASan's recommended optimisation, readable stack traces.
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE= -DCMAKE_CXX_FLAGS="-O1 -gline-tables-only" \
  -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_COMPILER=clang \
  -DLATTN_CUDA=OFF -DLATTN_FUZZ=ON -DLATTN_TESTS=OFF -DLATTN_BENCH=OFF -DLATTN_PYTHON=OFF "${launcher[@]}" >/dev/null
cmake --build "$BUILD" -j "$JOBS" --target "${TARGETS[@]}"

status=0
for t in "${TARGETS[@]}"; do
  corpus="$BUILD/corpus/$t" artifacts="$BUILD/crashes/$t/"
  mkdir -p "$corpus" "$artifacts"
  log="$BUILD/$t.log"
  # -rss_limit_mb: the op target allocates views of a few KiB; a leak shows.
  if ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 UBSAN_OPTIONS=print_stacktrace=1 \
      OMP_NUM_THREADS=1 "$BUILD/tests/fuzz/$t" -max_total_time="$SECONDS_EACH" -rss_limit_mb=2048 \
      -print_final_stats=1 -artifact_prefix="$artifacts" "$corpus" >"$log" 2>&1; then
    runs=$(grep -m1 'stat::number_of_executed_units' "$log" | awk '{print $2}')
    echo "$t: ${runs:-?} executions in ${SECONDS_EACH}s, ok"
  else
    status=1
    echo "$t: FAILED (log $log, inputs in $artifacts)"
    grep -m5 -E 'ERROR|runtime error|deadly signal|uncaught' "$log" || tail -20 "$log"
  fi
done
exit $status
