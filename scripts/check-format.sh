#!/usr/bin/env bash
# Fails when C++/CUDA lines changed since a base commit do not follow
# .clang-format (clang-format 14). Only changed lines are checked, so older
# code is reformatted when someone touches it, not all at once.
#   scripts/check-format.sh [BASE]   BASE: default the merge base with main,
#                                    else HEAD~1 (a fresh clone in CI)
# Fix: git clang-format-14 BASE
set -euo pipefail
cd "$(dirname "$0")/.."
base="${1:-}"
if [ -z "$base" ]; then
  base="$(git merge-base HEAD main 2>/dev/null || true)"
  if [ -z "$base" ] || [ "$base" = "$(git rev-parse HEAD)" ]; then
    base="$(git rev-parse --verify -q HEAD~1 || true)"
  fi
fi
[ -n "$base" ] || { echo "check-format: no base commit; nothing to check"; exit 0; }
out="$(git clang-format-14 --binary clang-format-14 --extensions c,cc,cpp,h,hpp,cu,cuh --diff "$base" -- src include tests tools bench python examples 2>&1 || true)"
case "$out" in
  *"no modified files to format"* | *"did not modify any files"* | "")
    echo "check-format: lines changed since $(git rev-parse --short "$base") follow .clang-format"
    ;;
  *)
    echo "$out"
    echo "check-format: the lines above do not follow .clang-format; run: git clang-format-14 $(git rev-parse --short "$base")"
    exit 1
    ;;
esac
