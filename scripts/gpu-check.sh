#!/usr/bin/env bash
# scripts/gpu-check.sh OUT_DIR — everything lattn's CUDA backend promises, in
# one command on a GPU machine: build for sm_90a, run every CUDA test, the
# compute-sanitizer checks (memcheck, racecheck, synccheck) on small cases, the CUDA
# benchmarks, and the SASS / resource checks of the kernels. Logs and JSON go
# to OUT_DIR (at most 8 files); a summary table is printed last.
#
# Environment: LATTN_GPU_ARCHS (default 90a), JOBS (default nproc),
# LATTN_DLPACK_INCLUDE / LATTN_CBLAS_INCLUDE when those headers are not in
# the default places, BUILD_DIR (default build-gpu), GPU_CHECK_PHASES (a
# comma list of tests,tiles,sanitize,sass,bench; default all: split a long check
# into two device calls, the second reusing the first one's build),
# CTEST_TIMEOUT (seconds for the whole ctest run, default 900), CTEST_ARGS
# (extra ctest arguments, e.g. "-E cuda_prefill" or "-R cuda_prefill", to split
# the test phase over two device calls that share one build).
set -uo pipefail
OUT=${1:?usage: scripts/gpu-check.sh OUT_DIR}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
cd "$(dirname "$0")/.."
REPO=$(pwd)
ARCHS=${LATTN_GPU_ARCHS:-90a}
JOBS=${JOBS:-$(nproc)}
BUILD=${BUILD_DIR:-build-gpu}
SUMMARY="$OUT/summary.txt"
PHASES=",${GPU_CHECK_PHASES:-tests,tiles,sanitize,sass,bench},"
phase() { [[ "$PHASES" == *",$1,"* ]]; }
: > "$SUMMARY"
note() { echo "$*" | tee -a "$SUMMARY"; }
t0=$(date +%s)
stamp() { echo "$(( $(date +%s) - t0 ))s"; }

# .git-commit: written when the tree is copied without its .git (device runs).
commit=$(cat .git-commit 2>/dev/null || git rev-parse --short HEAD 2>/dev/null || echo unknown)
note "== lattn gpu-check $(date -u +%FT%TZ) commit $commit"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader 2>&1 | tee -a "$SUMMARY"

# ---- configure + build --------------------------------------------------------
extra=()
if [[ -n "${LATTN_DLPACK_INCLUDE:-}" ]]; then
  extra+=("-DLATTN_DLPACK_INCLUDE=$LATTN_DLPACK_INCLUDE")
elif [[ ! -f /usr/include/dlpack/dlpack.h && -f "$REPO/../include/dlpack/dlpack.h" ]]; then
  extra+=("-DLATTN_DLPACK_INCLUDE=$(cd "$REPO/../include" && pwd)")
fi
if [[ -n "${LATTN_CBLAS_INCLUDE:-}" ]]; then
  extra+=("-DLATTN_CBLAS_INCLUDE=$LATTN_CBLAS_INCLUDE")
elif ! ls /usr/include/cblas.h /usr/include/x86_64-linux-gnu/cblas.h /usr/include/openblas/cblas.h >/dev/null 2>&1; then
  c=$(find / -name cblas.h -not -path '*/proc/*' 2>/dev/null | head -1)
  [[ -n "$c" ]] && extra+=("-DLATTN_CBLAS_INCLUDE=$(dirname "$c")")
fi
CUDA_TESTS=$(ls tests/cpp/cuda_*_test.cpp tests/cpp/*_cuda_test.cpp 2>/dev/null | sort -u | tr '\n' ' ')
# The Python module too, when this machine's python3 can build and test it
# (pybind11 + pytest + numpy; torch makes tests/python/test_cuda.py run).
py=()
if python3 -c "import pybind11, pytest, numpy" >/dev/null 2>&1; then
  py=(-DLATTN_PYTHON=ON "-DLATTN_PYTHON_EXECUTABLE=$(command -v python3)")
else
  py=(-DLATTN_PYTHON=OFF)
fi
gen=()
[[ ! -f "$BUILD/CMakeCache.txt" ]] && command -v ninja >/dev/null && gen=(-G Ninja)
{
  cmake -S . -B "$BUILD" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DLATTN_CUDA=ON "-DLATTN_CUDA_ARCHS=$ARCHS" \
    -DLATTN_TESTS=ON -DLATTN_BENCH=ON "${py[@]}" "${extra[@]}" &&
  cmake --build "$BUILD" -j "$JOBS"
} > "$OUT/build.log" 2>&1
build_rc=$?
note "build ($ARCHS, ${py[0]}): rc=$build_rc at $(stamp); spill warnings: $(grep -c 'spilled to local memory' "$OUT/build.log")"
if [[ $build_rc -ne 0 ]]; then
  tail -40 "$OUT/build.log"
  exit 1
fi

tests_rc=0; bench_rc=0
if phase tests; then
# ---- tests ------------------------------------------------------------------------
: > "$OUT/tests.log"
tests_rc=0
# Every test of the suite: the CUDA ones (cuda_*_test, *_cuda_test and the GPU
# cases inside the metadata, forward and Python tests) and the CPU ones, which
# must pass on this machine too. Skips print their one-line reason.
(cd "$BUILD" && timeout "${CTEST_TIMEOUT:-900}" ctest -j "$JOBS" --output-on-failure --timeout 300 ${CTEST_ARGS:-}) >> "$OUT/tests.log" 2>&1
rc=$?
[[ $rc -ne 0 ]] && tests_rc=1
note "ctest (all tests): rc=$rc at $(stamp); $(grep -E 'tests passed' "$OUT/tests.log" | tail -1)"
note "skipped on this GPU machine: $(grep -c -- '\*\*\*Skipped' "$OUT/tests.log")"
# The main job end to end on the GPU (cuda backends chosen by the selector),
# re-checked against the reference backend, for two model shapes and fp8.
for args in "--num-requests 48 --verify" "--model minicpm3 --kv-cache-dtype fp8 --num-requests 32 --verify"; do
  echo "### lattn run --device cuda:0 $args" >> "$OUT/tests.log"
  timeout 300 "$BUILD/tools/lattn" run --device cuda:0 $args >> "$OUT/tests.log" 2>&1
  rc=$?
  [[ $rc -ne 0 ]] && tests_rc=1
  note "lattn run --device cuda:0 $args: rc=$rc at $(stamp); $(grep -E '^verify' "$OUT/tests.log" | tail -1)"
done
"$BUILD/tools/lattn" info >> "$OUT/tests.log" 2>&1

# Multi-GPU: NCCL with world sizes 2 and 4 where the machine has the GPUs
# (the collectives, and the DCP combine over NCCL), then the DCP decode
# scaling benchmark over every GPU (docs/dcp.md).
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
note "GPUs on this machine: $gpus"
for world in 2 4; do
  if [[ $gpus -lt $world ]]; then
    note "NCCL world $world: not run ($gpus GPU(s))"
    continue
  fi
  for t in "nccl_communicator_test:*" "dcp_device_test:DcpDeviceCombine.NcclAcrossGpus"; do
    echo "### LATTN_NCCL_WORLD=$world ${t%%:*} ${t#*:}" >> "$OUT/tests.log"
    LATTN_NCCL_WORLD=$world timeout 300 "$BUILD/tests/${t%%:*}" --gtest_filter="${t#*:}" --gtest_color=no \
      >> "$OUT/tests.log" 2>&1
    rc=$?
    [[ $rc -ne 0 ]] && tests_rc=1
    note "NCCL world $world ${t%%:*}: rc=$rc at $(stamp)"
  done
  # The whole layer under DCP over NCCL, one GPU per rank: the context
  # prefilled through the layer (prefill with cached context), then decode
  # steps, every step against one rank (scripts/gpu-dcp-check.sh runs more).
  args="--dcp $world --device cuda --verify --dcp-requests 3 --dcp-context 1037 --dcp-steps 2 --dcp-prefill-chunk 300"
  echo "### lattn run $args" >> "$OUT/tests.log"
  # shellcheck disable=SC2086
  NCCL_NVLS_ENABLE=0 timeout 300 "$BUILD/tools/lattn" run $args >> "$OUT/tests.log" 2>&1
  rc=$?
  [[ $rc -ne 0 ]] && tests_rc=1
  note "lattn run $args: rc=$rc at $(stamp); $(grep -E '^verify' "$OUT/tests.log" | tail -1)"
done

fi
if phase tiles; then
# The decode tests once more with every instantiated tile configuration forced
# (the default run covers only the configurations this GPU picks).
for cfg in $(grep -oE 'X\([0-9]+, [0-9]+, [0-9]+, [0-9]+\)' src/cuda/sm80/decode/decode_config.h | tr -d 'X( )' |
             awk -F, '{ printf "m%sn%sw%ss%s\n", $1, $2, $3, $4 }'); do
  echo "### LATTN_DECODE_TILES=$cfg" >> "$OUT/tests.log"
  LATTN_DECODE_TILES=$cfg timeout 300 "$BUILD/tests/cuda_decode_test" --gtest_color=no \
    --gtest_filter='Cuda/CudaDecode.*:CudaDecodeSmall.*:CudaDecodeGraph.CapturedPlan*' >> "$OUT/tests.log" 2>&1
  rc=$?
  [[ $rc -ne 0 ]] && tests_rc=1
  note "test cuda_decode_test with LATTN_DECODE_TILES=$cfg: rc=$rc at $(stamp)"
done
# The hopper 64-row cases once more on the schedule that is not the default
# (docs/hopper.md, "Two schedules"; LATTN_HOPPER_DECODE is read once per
# process), with the shared backend driver's hopper cases.
echo "### LATTN_HOPPER_DECODE=serial" >> "$OUT/tests.log"
LATTN_HOPPER_DECODE=serial timeout 300 "$BUILD/tests/cuda_decode_test" --gtest_color=no >> "$OUT/tests.log" 2>&1
rc=$?
LATTN_HOPPER_DECODE=serial timeout 300 "$BUILD/tests/backend_driver_test" --gtest_color=no --gtest_filter='*hopper*' \
  >> "$OUT/tests.log" 2>&1
rc2=$?
[[ $rc -ne 0 || $rc2 -ne 0 ]] && tests_rc=1
note "test cuda_decode_test, backend_driver_test *hopper* with LATTN_HOPPER_DECODE=serial: rc=$rc, $rc2 at $(stamp)"
fi
if phase tests || phase tiles; then
note "tests: $(grep -c '^\[       OK \]' "$OUT/tests.log") passed, $(grep -c '^\[  FAILED  \]' "$OUT/tests.log") failed lines, $(grep -c '^\[  SKIPPED \]' "$OUT/tests.log") skipped lines"

fi
if phase sanitize; then
# ---- compute-sanitizer on small cases ---------------------------------------------------
: > "$OUT/sanitizer.log"
san() {  # tool binary filter [VAR=value: an environment setting for this run]
  local tool=$1 bin=$2 filter=$3 setting=${4:-}
  echo "### ${setting:+$setting }compute-sanitizer --tool $tool $bin --gtest_filter=$filter" >> "$OUT/sanitizer.log"
  env ${setting:+"$setting"} timeout 400 compute-sanitizer --tool "$tool" --error-exitcode 9 "$BUILD/tests/$bin" \
    --gtest_filter="$filter" --gtest_color=no >> "$OUT/sanitizer.log" 2>&1
  local rc=$?
  note "sanitizer ${setting:+$setting }$tool $bin $filter: rc=$rc ($(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/sanitizer.log" | tail -1)) at $(stamp)"
}
if command -v compute-sanitizer >/dev/null; then
  san memcheck cuda_ops_test '*'
  san memcheck cuda_decode_test 'CudaDecodeSmall.*:CudaDecodeGraph.CapturedRunReplaysWithPlanOutside'
  san memcheck cuda_gemm_test '*'
  # The shared backend driver (every registered GPU backend, paired with the
  # reference) on three small cases, and hopper's wgmma decode on the case that
  # plants non-finite values in keys only some rows may see (its V cleaning).
  san memcheck backend_driver_test '*_cuda_tiny_mixed:*_hopper_tiny_mixed:*_cuda_deepseek_mixed:*_hopper_deepseek_mixed:*_cuda_tiny_fp8_cache:*_hopper_tiny_fp8_cache'
  san racecheck backend_driver_test '*decode_hopper_deepseek_nonfinite_h32_wgmma'
  san synccheck backend_driver_test '*decode_hopper_deepseek_nonfinite_h32_wgmma'
  # The same on the 64-row kernel's other schedule (docs/hopper.md, "Two
  # schedules": the serial one serves the batch-invariant folded plans).
  san racecheck backend_driver_test '*decode_hopper_deepseek_nonfinite_h32_wgmma' LATTN_HOPPER_DECODE=serial
  san synccheck backend_driver_test '*decode_hopper_deepseek_nonfinite_h32_wgmma' LATTN_HOPPER_DECODE=serial
  san racecheck cuda_decode_test 'CudaDecodeSmall.SanitizerCase:CudaDecodeSmall.LseIsOptional'
  san racecheck cuda_ops_test '*Merge*:*Gather*'
  # The hopper backend (sm90): its wrapper unit test and the small decode case
  # (which runs hopper's wgmma kernel on this GPU) under every tool.
  san memcheck sm90_wgmma_test '*'
  san synccheck cuda_decode_test 'CudaDecodeSmall.SanitizerCase'
  # The hopper prefill kernel's small case (every config, causal and not): its
  # V cleaning is shared memory written by the producer's fixer warps.
  san racecheck cuda_prefill_test 'HopperPrefillKernel.SanitizerCase'
  san synccheck cuda_prefill_test 'HopperPrefillKernel.SanitizerCase'
  # Other CUDA tests (other issues' work): their small/sanitizer cases, else the whole binary.
  for extra_test in $(ls $CUDA_TESTS | xargs -n1 basename | sed 's/\.cpp$//' | grep -v -E '^cuda_(ops|decode|gemm|backend)_test$'); do
    small='*Small*:*small*:*Sanitizer*'
    if [[ -z "$("$BUILD/tests/$extra_test" --gtest_list_tests --gtest_filter="$small" 2>/dev/null | grep '^ ')" ]]; then
      small='*'
    fi
    san memcheck "$extra_test" "$small"
  done
else
  note "compute-sanitizer: not found"
fi

fi
if phase sass; then
# ---- SASS and resources of the decode and prefill kernels ---------------------------------
lib=$(ls "$BUILD"/src/liblattn.so* | head -1)
{
  echo "# cuobjdump -res-usage (registers, stack, shared memory) of lattn's kernels"
  cuobjdump -res-usage "$lib" 2>&1 | grep -A1 -E 'Function' | grep -v '^--' | sed 's/^ *//' | paste - - |
    sed -E 's/Function ([^ ]*):/\1/' | c++filt 2>/dev/null | cut -c1-400
  echo
  echo "# per-kernel SASS instruction counts (HMMA = tensor-core mma, LDSM = ldmatrix,"
  echo "# LDGSTS = cp.async, LDL/STL = local memory: spills or stack arrays, HGMMA = wgmma, UTMALDG = TMA load)"
  cuobjdump -sass "$lib" 2>/dev/null | awk '
    /Function :/ { if (name != "") print name, hmma, ldsm, ldgsts, ldl, stl, hgmma, utma; name=$3; hmma=ldsm=ldgsts=ldl=stl=hgmma=utma=0; next }
    / HMMA/ { hmma++ } / LDSM/ { ldsm++ } / LDGSTS/ { ldgsts++ } / LDL/ { ldl++ } / STL/ { stl++ } / HGMMA/ { hgmma++ } / UTMALDG/ { utma++ }
    END { if (name != "") print name, hmma, ldsm, ldgsts, ldl, stl, hgmma, utma }' |
    c++filt | awk '{ printf "HMMA=%-5s LDSM=%-5s LDGSTS=%-4s LDL=%-3s STL=%-3s HGMMA=%-4s UTMALDG=%-3s %s\n", $(NF-6), $(NF-5), $(NF-4), $(NF-3), $(NF-2), $(NF-1), $NF, substr($0, 1, 160) }' |
    sed -E 's/ [0-9]+ [0-9]+ [0-9]+ [0-9]+ [0-9]+ [0-9]+ [0-9]+$//'
  echo
  echo "# the decode kernel's hot loop (the 64x64-tile bf16 instantiation), first 60 HMMA/LDSM/LDGSTS lines"
  cuobjdump -sass "$lib" 2>/dev/null |
    awk '/Function :/ { on = ($3 ~ /mla_decode_kernel/ && $3 ~ /ILi64ELi64ELi8ELi2E13__nv_bfloat16S4_/) } on' |
    grep -E 'HMMA|LDSM|LDGSTS' | head -60
} > "$OUT/sass.txt" 2>&1
decode_lines=$(grep -E 'mla_decode_kernel' "$OUT/sass.txt" | grep -E '^HMMA')
note "SASS: decode kernels with HMMA: $(echo "$decode_lines" | grep -c -v 'HMMA=0 ') of $(echo "$decode_lines" | grep -c .); with LDL/STL: $(echo "$decode_lines" | grep -c -v -E 'LDL=0 +STL=0 ')"
# The hopper decode kernel (sm_90a): wgmma shows as HGMMA; no local memory.
{
  echo
  echo "# hopper decode kernels (mla_decode_sm90_kernel and its seesaw schedule mla_decode_sm90_seesaw_kernel, the fp8-cache mla_decode_sm90_fp8_kernel, the <= 16-row mla_decode_sm90_km16_kernel): HGMMA / LDL / STL per instantiation"
  # (sm_90a code only: the sm_80 pass compiles the kernel to an empty body)
  cuobjdump -sass "$lib" 2>/dev/null | awk '
    function flush() { if (name ~ /mla_decode_sm90_(fp8_|km16_|seesaw_)?kernel/ && arch == "sm_90a") print name, hg, ldl, stl }
    /arch = / { flush(); name = ""; arch = $3; next }
    /Function :/ { flush(); name=$3; hg=ldl=stl=0; next }
    / HGMMA/ { hg++ } / LDL/ { ldl++ } / STL/ { stl++ }
    END { flush() }' |
    c++filt | awk '{ printf "HGMMA=%-4s LDL=%-3s STL=%-3s %s\n", $(NF-2), $(NF-1), $NF, substr($0, 1, 120) }'
} >> "$OUT/sass.txt" 2>&1
hopper_lines=$(grep -E '^HGMMA=' "$OUT/sass.txt")
note "SASS: hopper decode kernels with HGMMA: $(echo "$hopper_lines" | grep -c -v 'HGMMA=0 ') of $(echo "$hopper_lines" | grep -c .); with LDL/STL: $(echo "$hopper_lines" | grep -c -v -E 'LDL=0 +STL=0 ')"
# The hopper prefill kernels (sm_90a): every instance must use HGMMA and no local memory.
hopper_prefill_lines=$(grep -E 'hopper_prefill_kernel' "$OUT/sass.txt" | grep -E '^HMMA' | grep -v 'HGMMA=0 ')
note "SASS: hopper prefill kernels with HGMMA: $(echo "$hopper_prefill_lines" | grep -c .); with LDL/STL: $(echo "$hopper_prefill_lines" | grep -c -v -E 'LDL=0 +STL=0 ')"

fi
if phase bench; then
# ---- benchmarks -------------------------------------------------------------------------
bench_rc=0
: > "$OUT/bench.log"
for src in bench/cuda_*_bench.cpp; do
  b=$(basename "$src" .cpp)
  echo "### $b" >> "$OUT/bench.log"
  timeout 600 "$BUILD/bench/$b" --benchmark_out="$OUT/$b.json" --benchmark_out_format=json --benchmark_counters_tabular=true \
    >> "$OUT/bench.log" 2>&1
  rc=$?
  [[ $rc -ne 0 ]] && bench_rc=1
  note "bench $b: rc=$rc at $(stamp)"
done

# The cuDNN anchor for the prefill rows: PyTorch SDPA in the same run (skips
# itself when torch is not importable).
echo "### bench/sdpa_prefill_bench.py" >> "$OUT/bench.log"
timeout 300 python3 bench/sdpa_prefill_bench.py >> "$OUT/bench.log" 2>&1
note "bench sdpa_prefill_bench.py: rc=$? at $(stamp)"

# The shared harness through the command (`lattn bench`, CUDA runner): the
# issue-7 shapes, ceilings measured in the same run, roofline fractions.
for sweep in "--phase decode --heads 16,128 --batch 1,128 --seq 4096,16384" \
             "--phase prefill --heads 128 --batch 1,16 --seq 1024,8192"; do
  echo "### lattn bench --device cuda:0 $sweep" >> "$OUT/bench.log"
  timeout 300 "$BUILD/tools/lattn" bench --device cuda:0 $sweep --block-size 64 --repeats 5 -q >> "$OUT/bench.log" 2>&1
  rc=$?
  [[ $rc -ne 0 ]] && bench_rc=1
  note "lattn bench --device cuda:0 $sweep (shared harness): rc=$rc at $(stamp)"
done

# Optional tile-configuration comparisons on the same machine:
# LATTN_BENCH_VARIANTS="m16n64w8s2=decode/H16_B128 m64n64w16s2=decode/H128" runs the
# decode benchmark again with LATTN_DECODE_TILES forced, on the matching rows.
if [[ -n "${LATTN_BENCH_VARIANTS:-}" && -x "$BUILD/bench/cuda_decode_bench" ]]; then
  : > "$OUT/variants.log"
  for v in $LATTN_BENCH_VARIANTS; do
    cfg=${v%%=*}
    filter=${v#*=}
    echo "### LATTN_DECODE_TILES=$cfg --benchmark_filter=$filter" >> "$OUT/variants.log"
    LATTN_DECODE_TILES=$cfg timeout 300 "$BUILD/bench/cuda_decode_bench" --benchmark_filter="$filter" \
      >> "$OUT/variants.log" 2>&1
  done
  note "variants: done at $(stamp)"
fi

fi

# ---- summary (last) -------------------------------------------------------------------------
echo
echo "================ summary ================"
cat "$SUMMARY"
grep -h '^\[  FAILED  \]' "$OUT/tests.log" | sort -u | head -30
grep -E '^### |ceiling|^(decode|prefill|chunked|context|sdpa)' "$OUT/bench.log" | cut -c1-200 | head -80
sed -n '/^### lattn bench/,$p' "$OUT/bench.log" | cut -c1-200 | head -40
if [[ -f "$OUT/variants.log" ]]; then
  echo "---- variants"
  grep -E '^### |^decode/' "$OUT/variants.log"
fi
[[ $tests_rc -eq 0 && $bench_rc -eq 0 ]]
