#!/usr/bin/env bash
# Builds lattn for sm_90a and checks the `cuda` prefill backend on a GPU
# machine in one go: the GPU tests, compute-sanitizer (memcheck, racecheck)
# on small cases, the ptxas register/spill report and SASS evidence of the
# kernels, then the prefill benchmark with its same-run cuBLAS ceiling.
# Logs and JSON land in OUT_DIR (8 files); a summary is printed last.
#
#   scripts/gpu-prefill-check.sh OUT_DIR
#
# Environment: JOBS (16), LATTN_CUDA_ARCHS (90a), LATTN_BUILD_DIR (build-gpu),
# LATTN_DLPACK_INCLUDE / LATTN_CBLAS_INCLUDE (where the machine lacks them),
# LATTN_PREBUILT: a folder holding liblattn.so*, cuda_prefill_test,
# cuda_prefill_bench and ptxas.txt built elsewhere for this GPU; used when its
# binaries load here, else the script builds. SKIP_SANITIZER=1 / SKIP_NCU=1
# leave out compute-sanitizer / the Nsight Compute profile of one launch.
set -uo pipefail

OUT=${1:?usage: scripts/gpu-prefill-check.sh OUT_DIR}
mkdir -p "$OUT"
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${LATTN_BUILD_DIR:-$ROOT/build-gpu}
JOBS=${JOBS:-16}
ARCHS=${LATTN_CUDA_ARCHS:-90a}
PREBUILT=${LATTN_PREBUILT:-}
KERNEL=prefill_attention_kernel

log() { echo "[gpu-prefill-check] $*"; }

# ---- binaries ----------------------------------------------------------------
for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib; do
  [[ -d $d ]] && export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$d"
done
use_prebuilt=0
if [[ -n "$PREBUILT" && -x "$PREBUILT/cuda_prefill_test" ]]; then
  if ! LD_LIBRARY_PATH="$PREBUILT" ldd "$PREBUILT/cuda_prefill_test" "$PREBUILT/cuda_prefill_bench" | grep -q "not found"; then
    use_prebuilt=1
  else
    log "prebuilt binaries miss libraries here; building instead:"
    LD_LIBRARY_PATH="$PREBUILT" ldd "$PREBUILT/cuda_prefill_test" "$PREBUILT/cuda_prefill_bench" | grep "not found"
  fi
fi

if [[ $use_prebuilt == 1 ]]; then
  log "using prebuilt binaries from $PREBUILT"
  TEST="$PREBUILT/cuda_prefill_test"
  BENCH="$PREBUILT/cuda_prefill_bench"
  LIB=$(ls "$PREBUILT"/liblattn.so.* | head -1)
  export LD_LIBRARY_PATH="$PREBUILT${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  cp "$PREBUILT/ptxas.txt" "$OUT/ptxas.txt" 2>/dev/null || echo "no ptxas report carried" >"$OUT/ptxas.txt"
  echo "prebuilt binaries used; see ptxas.txt for the build-time report" >"$OUT/build.log"
else
  log "configuring and building for sm_${ARCHS} with -j${JOBS}"
  extra=()
  [[ -n "${LATTN_DLPACK_INCLUDE:-}" ]] && extra+=("-DLATTN_DLPACK_INCLUDE=$LATTN_DLPACK_INCLUDE")
  [[ -n "${LATTN_CBLAS_INCLUDE:-}" ]] && extra+=("-DLATTN_CBLAS_INCLUDE=$LATTN_CBLAS_INCLUDE")
  generator=()
  command -v ninja >/dev/null && generator=(-G Ninja)
  {
    cmake -S "$ROOT" -B "$BUILD" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DLATTN_CUDA=ON \
      -DLATTN_CUDA_ARCHS="$ARCHS" -DLATTN_PYTHON=OFF -DCMAKE_CUDA_FLAGS="-Xptxas=-v" "${extra[@]}" &&
      cmake --build "$BUILD" -j "$JOBS" --target cuda_prefill_test cuda_prefill_bench
  } >"$OUT/build.log" 2>&1
  if [[ $? != 0 ]]; then
    log "BUILD FAILED; tail of build.log:"
    tail -40 "$OUT/build.log"
    exit 1
  fi
  TEST="$BUILD/tests/cuda_prefill_test"
  BENCH="$BUILD/bench/cuda_prefill_bench"
  LIB=$(ls "$BUILD"/src/liblattn.so.* | head -1)
  # ptxas prints "Compiling entry function '<mangled>'" then its properties.
  grep -A3 "Compiling entry function '.*${KERNEL}" "$OUT/build.log" | c++filt >"$OUT/ptxas.txt"
fi

# ---- SASS evidence -------------------------------------------------------------
log "SASS of $LIB"
if command -v cuobjdump >/dev/null; then
  all=/tmp/lattn_prefill_all.sass
  cuobjdump -sass "$LIB" >"$all" 2>&1
  {
    echo "per prefill kernel: instruction counts in its SASS (HMMA = mma.sync on the tensor cores,"
    echo "LDSM = ldmatrix, LDGSTS = cp.async, LDL/STL = local memory, i.e. spills)"
    awk -v k="$KERNEL" '
      function flush() { if (name != "") print hmma, ldsm, ldgsts, ldl, stl, name }
      /Function :/ { flush(); name = ($3 ~ k) ? $3 : ""; hmma = ldsm = ldgsts = ldl = stl = 0; next }
      name == "" { next }
      /HMMA/ { hmma++ }
      /LDSM/ { ldsm++ }
      /LDGSTS/ { ldgsts++ }
      / LDL/ { ldl++ }
      / STL/ { stl++ }
      END { flush() }' "$all" | c++filt | sed 's/lattn::cuda::sm80:://g' |
      awk '{ n = $6; for (i = 7; i <= NF; ++i) n = n " " $i;
             printf "HMMA %4d  LDSM %4d  LDGSTS %3d  LDL %3d  STL %3d  %s\n", $1, $2, $3, $4, $5, n }'
    # The default 192/128 bf16 causal kernel, whole.
    main=$(grep -o "Function : [^ ]*${KERNEL}[^ ]*" "$all" | awk '{ print $3 }' | while read -r m; do
      if echo "$m" | c++filt | grep -q "PrefillTileShape<0>, __nv_bfloat16>, true>"; then echo "$m"; fi
    done | head -1)
    echo
    echo "full SASS of the default 192/128 bf16 causal kernel ($main):"
    awk -v m="$main" '/Function :/ { on = ($3 == m) } on' "$all"
  } >"$OUT/sass.txt"
else
  echo "cuobjdump not found" >"$OUT/sass.txt"
fi

# ---- tests ---------------------------------------------------------------------
log "tests"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv >"$OUT/tests.log" 2>&1
"$TEST" --gtest_output=json:"$OUT/tests.json" >>"$OUT/tests.log" 2>&1
test_rc=$?

# ---- benchmark -------------------------------------------------------------------
log "benchmark"
"$BENCH" --benchmark_out="$OUT/bench.json" --benchmark_out_format=json >"$OUT/bench.log" 2>&1
bench_rc=$?

# ---- compute-sanitizer on small cases (appended to tests.log) ----------------------
small='CudaPrefill.NewTokensCausalVarlenBf16:CudaPrefill.ContextChunksNonCausalVarlen'
if [[ -z "${SKIP_SANITIZER:-}" ]]; then
  log "compute-sanitizer"
  for tool in memcheck racecheck; do
    echo "=== compute-sanitizer $tool" >>"$OUT/tests.log"
    timeout 120 compute-sanitizer --tool "$tool" --error-exitcode 3 "$TEST" --gtest_filter="$small" \
      >>"$OUT/tests.log" 2>&1
    echo "=== compute-sanitizer $tool exit $?" >>"$OUT/tests.log"
  done
fi

# ---- Nsight Compute: one launch of the default kernel, 16 x 1024 causal ---------------
if [[ -z "${SKIP_NCU:-}" ]] && command -v ncu >/dev/null; then
  log "ncu"
  timeout 150 ncu --kernel-name regex:${KERNEL} --launch-skip 3 --launch-count 1 \
    --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
    --section Occupancy --section WarpStateStats --section LaunchStats --section SchedulerStats \
    "$BENCH" --benchmark_filter='prefill_causal/qk192_v128_m128_n64_w4/16/1024' >"$OUT/ncu.txt" 2>&1
  echo "ncu exit $?" >>"$OUT/ncu.txt"
  # Why warps stall (cycles per issued instruction, by reason) and how busy the tensor pipe is.
  timeout 120 ncu --kernel-name regex:${KERNEL} --launch-skip 3 --launch-count 1 \
    --metrics 'regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio$',sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_tensor_op_hmma.sum,smsp__inst_executed.sum \
    "$BENCH" --benchmark_filter='prefill_causal/qk192_v128_m128_n64_w4/16/1024' >>"$OUT/ncu.txt" 2>&1
  echo "ncu metrics exit $?" >>"$OUT/ncu.txt"
fi

# ---- summary ---------------------------------------------------------------------
echo
echo "================ summary ================"
head -2 "$OUT/tests.log"
grep -E "^\[  (PASSED|FAILED|SKIPPED) |^\[  FAILED  \]" "$OUT/tests.log" | head -20
echo "tests exit $test_rc, bench exit $bench_rc"
grep -E "=== .* exit|ERROR SUMMARY|RACECHECK SUMMARY" "$OUT/tests.log"
grep -E "Duration|Compute \(SM\) Throughput|Registers Per|Achieved Occupancy|Issue Slots Busy|No Eligible" "$OUT/ncu.txt" 2>/dev/null | head -12
echo "--- ptxas (registers / spills) ---"
grep -E "Used|spill" "$OUT/ptxas.txt" | sed 's/ptxas info *: //' | head -40
echo "--- SASS counts ---"
sed -n '3,40p' "$OUT/sass.txt" | grep HMMA
echo "--- benchmark ---"
sed -n '/^case /,$p' "$OUT/bench.log"
