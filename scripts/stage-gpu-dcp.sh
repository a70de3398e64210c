#!/usr/bin/env bash
# scripts/stage-gpu-dcp.sh [DEST] — builds the DCP tests, the `lattn` command
# and cuda_dcp_bench in BUILD_DIR (default build: a CUDA build configured as
# docs/dcp.md says) and copies them, stripped, with liblattn and
# scripts/gpu-dcp-check.sh (as run.sh) into DEST (default .gpu-dcp of this
# checkout): one folder that a GPU machine runs with
#   bash DEST/run.sh "$OUT"
# (carry DEST, and .gpu-libs where the machine lacks the system libraries).
set -euo pipefail
cd "$(dirname "$0")/.."
DEST=${1:-.gpu-dcp}
BUILD=${BUILD_DIR:-build}
targets=(lattn lattn_cli cuda_dcp_bench dcp_prefill_test dcp_layer_test dcp_device_test nccl_communicator_test)
cmake --build "$BUILD" -j "${JOBS:-2}" --target "${targets[@]}"
rm -rf "$DEST"
mkdir -p "$DEST/bin" "$DEST/lib"
cp -L "$BUILD/src/liblattn.so.0" "$DEST/lib/"
cp "$BUILD/tools/lattn" "$BUILD/bench/cuda_dcp_bench" "$DEST/bin/"
for t in dcp_prefill_test dcp_layer_test dcp_device_test nccl_communicator_test; do cp "$BUILD/tests/$t" "$DEST/bin/"; done
strip --strip-unneeded "$DEST"/bin/* "$DEST"/lib/*
cp scripts/gpu-dcp-check.sh "$DEST/run.sh"
git rev-parse --short HEAD > "$DEST/COMMIT" 2>/dev/null || echo unknown > "$DEST/COMMIT"
du -sh "$DEST"
