#!/bin/bash
# The sparse phases of `lattn bench` (sparse-decode by default) for two
# commands alternated round by round, so that a change in the machine's load
# hits both alike; then per case and command: the fastest repeat of all
# rounds, the median of the rounds' medians (and their range), and the
# median of the rounds' same-run roofline fractions. docs/perf.md ("Sparse
# MLA (CPU)") says what it measured.
#
#   scripts/bench_sparse_ab.sh ROUNDS "A" "B" [-- lattn bench flags replacing the default ones]
#
# A and B are command prefixes, split on spaces, e.g.
#   "env LATTN_SPARSE_CPU_DEQUANT=1 build-cpu/tools/lattn" "build-cpu/tools/lattn"
# Each round runs `<A> bench --device cpu --model deepseek-v3.2 <flags>` and
# then the same for B. The load average is printed before every run: on a
# loaded machine, trust the minima and the A/B difference, not the fractions.
set -eu
ROUNDS=${1:?rounds}
A=${2:?command A}
B=${3:?command B}
shift 3
[ "${1:-}" = "--" ] && shift
# 101 repeats: a case then lasts about 0.2 s (H16 T8 top-2048 decode), longer
# than most of the stretches in which the dev machine's host slows one core's
# memory accesses by 25-50 % for 0.1-0.3 s; with 9 repeats (20 ms) a run's
# median fell wholly inside or outside one (docs/perf.md, "Sparse MLA (CPU)").
FLAGS=(--phase sparse-decode --repeats 101)
[ $# -gt 0 ] && FLAGS=("$@")
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT

round=1
while [ "$round" -le "$ROUNDS" ]; do
  for tag in A B; do
    cmd=$A
    [ "$tag" = B ] && cmd=$B
    echo "round $round, $tag ($cmd): load average $(cut -d' ' -f1-3 /proc/loadavg)" >&2
    # shellcheck disable=SC2086  # the command prefix is split on purpose
    $cmd bench --device cpu --model deepseek-v3.2 "${FLAGS[@]}" -q > "$OUT/$tag.$round.txt"
  done
  round=$((round + 1))
done

/usr/bin/python3 - "$OUT" <<'EOF'
import glob, statistics, sys
from collections import defaultdict
runs = defaultdict(lambda: defaultdict(list))
for path in sorted(glob.glob(sys.argv[1] + "/*.txt")):
    tag = path.rsplit("/", 1)[1].split(".")[0]
    for line in open(path):
        if line.startswith("ceilings"):
            print(f"{tag}: {line.strip()}")
        if not line.startswith(("sparse-", "indexer")):
            continue
        words = line.split()
        # name, median_us, min_us, GFLOP/s, GB/s, roofline, topk_us
        nums = [float(w) for w in words[-6:]]
        name = " ".join(words[:-6])
        runs[name][tag].append(nums)
print(f"{'case':56} {'cmd':3} {'runs':>4} {'min us':>10} {'median us':>10} {'run medians':>23} {'fraction':>8}")
for name, tags in runs.items():
    for tag in sorted(tags):
        rows = tags[tag]
        meds = [r[0] for r in rows]
        mins = [r[1] for r in rows]
        frac = statistics.median(r[4] for r in rows)
        print(f"{name:56} {tag:3} {len(rows):4} {min(mins):10.1f} {statistics.median(meds):10.1f} "
              f"{min(meds):11.1f}-{max(meds):11.1f} {frac:8.3f}")
EOF
