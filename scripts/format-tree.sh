#!/usr/bin/env bash
# Formats every C++/CUDA source of the tree with .clang-format (clang-format
# 14), once, so that later changes are checked line by line against a tree
# that already follows it (scripts/check-format.sh checks only changed lines).
# Run it on a quiet tree (every branch merged): it touches most files, and a
# branch made before it conflicts on every reformatted line.
#   scripts/format-tree.sh           format in place (review with git diff, commit alone)
#   scripts/format-tree.sh --check   list the files that do not follow it; exit 1 if any
# The files scripts/gen_decode_instantiations.py writes are left as it
# writes them (its --check, run by CI, compares the folder with its output).
set -euo pipefail
cd "$(dirname "$0")/.."
check=0
case "${1:-}" in
  "") ;;
  --check) check=1 ;;
  *) echo "usage: scripts/format-tree.sh [--check]" >&2; exit 2 ;;
esac
command -v clang-format-14 >/dev/null || { echo "format-tree: clang-format-14 is missing (scripts/install-deps.sh)" >&2; exit 2; }

# Tracked sources only (nothing a build or a user left in the tree).
mapfile -d '' files < <(git ls-files -z -- 'src' 'include' 'tests' 'tools' 'bench' 'python' 'examples' |
  grep -zE '\.(c|cc|cpp|h|hpp|cu|cuh)$' | grep -zv '^src/cuda/sm80/decode/instantiations/' || true)
[ "${#files[@]}" -gt 0 ] || { echo "format-tree: no sources found"; exit 0; }

if [ "$check" = 1 ]; then
  bad=0
  for f in "${files[@]}"; do
    if ! clang-format-14 --style=file --dry-run -Werror "$f" >/dev/null 2>&1; then
      echo "$f"
      bad=1
    fi
  done
  [ "$bad" = 0 ] && echo "format-tree: all ${#files[@]} sources follow .clang-format"
  exit "$bad"
fi

printf '%s\0' "${files[@]}" | xargs -0 -n 50 clang-format-14 --style=file -i
echo "format-tree: formatted ${#files[@]} sources; review with 'git diff --stat', build, test, and commit alone"
