#!/usr/bin/env bash
# scripts/gpu-dcp-check.sh OUT_DIR — the decode-context-parallelism (DCP)
# checks of a GPU machine in one command, from binaries built elsewhere
# (scripts/stage-gpu-dcp.sh copies them and this script into a folder with
# bin/ and lib/) or from a build folder (BIN_DIR=build-gpu: tests/, tools/,
# bench/, src/). docs/dcp.md says what each check covers.
#
#   every machine:       dcp_prefill_test, dcp_layer_test, dcp_device_test and
#                        nccl_communicator_test (in-process group over device
#                        buffers, NCCL world size 1)
#   2 and 4 GPUs:        NCCL world sizes 2 and 4 (collectives, the device
#                        combine), `lattn run --dcp W --device cuda --verify`
#                        (decode; context prefilled through the layer under
#                        DCP; all-to-all), per world size the machine holds
#   scaling:             cuda_dcp_bench H16 B64 S131072 bf16, worlds 1,2,4:
#                        PASS when every NCCL row reaches 0.8 x linear
# DCP_CHECK_FILTER (a gtest filter, default '*') narrows the every-machine
# tests. Logs go to OUT_DIR (at most 4 files); the summary is printed last.
# NVLink multicast stays off (NCCL_NVLS_ENABLE=0): the machines are shared.
set -uo pipefail
OUT=${1:?usage: scripts/gpu-dcp-check.sh OUT_DIR}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export LATTN_CHECK_INDICES=1

# Where the binaries are: a staged folder (bin/, lib/) or a build folder.
B=${BIN_DIR:-$HERE}
if [[ -d "$B/bin" ]]; then
  T=$B/bin; CLI=$B/bin/lattn; BENCH=$B/bin/cuda_dcp_bench; LIB=$B/lib
else
  T=$B/tests; CLI=$B/tools/lattn; BENCH=$B/bench/cuda_dcp_bench; LIB=$B/src
fi
# System libraries the CUDA image lacks (packed once in .gpu-libs, GPU-machine runs only).
for pack in .gpu-libs/syslibs.tar.xz "$HERE/../.gpu-libs/syslibs.tar.xz"; do
  if [[ -f "$pack" ]]; then
    mkdir -p /tmp/syslibs && tar -C /tmp/syslibs -xJf "$pack" && break
  fi
done
export LD_LIBRARY_PATH=$LIB:/tmp/syslibs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}

SUMMARY=$OUT/summary.txt
: > "$SUMMARY"
note() { echo "$*" | tee -a "$SUMMARY"; }
t0=$(date +%s)
stamp() { echo "$(( $(date +%s) - t0 ))s"; }
fails=0
rc=0
step() {  # log name, then the command; sets rc
  local log=$OUT/$1; shift
  echo "### $*" >> "$log"
  timeout 300 "$@" >> "$log" 2>&1
  rc=$?
  [[ $rc -ne 0 ]] && fails=$((fails + 1))
  return 0
}

note "== lattn gpu-dcp-check $(date -u +%FT%TZ) commit $(cat "$HERE/COMMIT" 2>/dev/null || git rev-parse --short HEAD 2>/dev/null || echo unknown)"
nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader 2>&1 | tee -a "$SUMMARY"
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
note "GPUs: $gpus; libnccl: $(ls /usr/local/cuda/lib64/libnccl.so.2 /usr/lib/x86_64-linux-gnu/libnccl.so.2 2>/dev/null | head -1)"

# ---- every machine ----------------------------------------------------------------
for t in dcp_prefill_test dcp_layer_test dcp_device_test nccl_communicator_test; do
  step tests.log "$T/$t" --gtest_color=no --gtest_filter="${DCP_CHECK_FILTER:-*}"
  note "$t: rc=$rc at $(stamp); $(grep -E '^\[  (PASSED|FAILED) ' "$OUT/tests.log" | tail -1)"
done

# ---- NCCL across GPUs -------------------------------------------------------------
for world in 2 4; do
  if [[ $gpus -lt $world ]]; then
    note "world $world: NOT RUN ($gpus GPU(s))"
    continue
  fi
  LATTN_NCCL_WORLD=$world step nccl.log "$T/nccl_communicator_test" --gtest_color=no
  note "world $world nccl_communicator_test: rc=$rc"
  LATTN_NCCL_WORLD=$world step nccl.log "$T/dcp_device_test" --gtest_filter='DcpDeviceCombine.NcclAcrossGpus' \
       --gtest_color=no
  note "world $world dcp_device_test NcclAcrossGpus: rc=$rc"
  for args in "--dcp-requests 4 --dcp-context 3000 --dcp-steps 4" \
              "--dcp-requests 3 --dcp-context 1037 --dcp-steps 2 --dcp-prefill-chunk 300 --dcp-interleave 3" \
              "--dcp-requests 2 --dcp-context 777 --dcp-steps 2 --dcp-prefill-chunk 256 --dcp-combine all-to-all" \
              "--model deepseek-v3 --tp 8 --dcp-requests 4 --dcp-context 4099 --dcp-steps 2 --dcp-prefill-chunk 2048"; do
    # shellcheck disable=SC2086
    step nccl.log "$CLI" run --dcp "$world" --device cuda --verify $args
    note "world $world lattn run --dcp $world --device cuda --verify $args: rc=$rc; $(grep -E '^verify' "$OUT/nccl.log" | tail -1)"
  done
done

# ---- scaling: decode H16 B64 S131072 bf16 ---------------------------------------------
worlds=1
for w in 2 4; do [[ $gpus -ge $w ]] && worlds=$worlds,$w; done
step bench.log "$BENCH" --heads 16 --batch 64 --seq 131072 --worlds "$worlds" --samples 10
note "cuda_dcp_bench H16 B64 S131072 worlds $worlds: rc=$rc at $(stamp)"
grep -E '^(DCP decode|same-run|W |[0-9]+ +(nccl|one-rank))' "$OUT/bench.log" | tee -a "$SUMMARY"
# Every NCCL row with W > 1 must reach 0.8 x linear (speedup column: "1.87x").
awk '$2 == "nccl" && $1 > 1 { s = $9; sub(/x$/, "", s); ok = (s + 0 >= 0.8 * $1);
       printf "scaling W=%d: %.2fx of %d linear (%.2f): %s\n", $1, s, $1, s / $1, ok ? "PASS" : "FAIL" }' \
  "$OUT/bench.log" | tee -a "$SUMMARY"
if awk '$2 == "nccl" && $1 > 1 { s = $9; sub(/x$/, "", s); if (s + 0 < 0.8 * $1) bad = 1 } END { exit bad }' \
     "$OUT/bench.log"; then :; else fails=$((fails + 1)); fi
[[ $gpus -lt 2 ]] && note "scaling: NOT RUN (one GPU: only W=1)"

note "== gpu-dcp-check: $fails failing step(s) at $(stamp)"
[[ $fails -eq 0 ]]
