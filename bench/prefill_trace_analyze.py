#!/usr/bin/env python3
"""Reads the files of cuda_prefill_bench's trace experiment
(LATTN_PREFILL_BENCH_TRACE=dir writes dir/trace_<shape>.bin; layout in
run_trace_experiment and src/cuda/sm90/prefill/prefill_schedule.h) and
prints one line per launch: time, SM clock (clock64 / globaltimer, median
over CTAs), cycles and ns per 128 x 128 key block and per tile (a least-
squares fit of each tile's time on its key blocks; causal requests of equal
length, so query block m has m + 1 key blocks), the spread of the CTAs'
rates and ends, whether the blockIdx -> SM map is the first launch's, and
the (request, head) pairs running at mid-launch. docs/perf.md, "what makes
the two levels", was read from it. Last, per "alloc" value (a copy of the
data; in trace_ab files the config row): median launch cycles, cycles per
block and per tile.

Optional first argument: a file of "smid lat0 lat1 ..." lines (per-SM L2
latencies of the same lines): SMs are then split into two L2 sides by
which lines are near, and the per-CTA rate is shown per side.

Usage: python3 bench/prefill_trace_analyze.py [l2_latencies.txt] trace_*.bin
Plain Python (no numpy)."""
import struct, sys, statistics as st, collections

HDR, TILES = 8, 192

def load(path):
    data = open(path, 'rb').read()
    off = 0
    launches = []
    def words(n):
        nonlocal off
        v = struct.unpack_from('<%dQ' % n, data, off); off += 8 * n; return v
    while off < len(data):
        alloc, = struct.unpack_from('<q', data, off); us, = struct.unpack_from('<d', data, off + 8)
        grid, = struct.unpack_from('<q', data, off + 16); off += 24
        ctas = []
        for c in range(grid):
            h = words(HDR)
            n = min(h[5], TILES)
            t = words(3 * n)
            tiles = [(t[3*i], t[3*i+1], t[3*i+2] >> 40, (t[3*i+2] >> 20) & 0xfffff, t[3*i+2] & 0xfffff) for i in range(n)]
            ctas.append(dict(cta=c, sm=h[0], t0=h[1], c0=h[2], t1=h[3], c1=h[4], n=h[5], tiles=tiles))
        launches.append(dict(alloc=alloc, us=us, ctas=ctas))
    return launches

def sides(path):
    rows = [list(map(float, l.split())) for l in open(path) if l.strip() and l[0].isdigit()]
    sm = {int(r[0]): r[1:] for r in rows}
    lines = len(rows[0]) - 1
    # a line is near for an SM when its latency is below the line's median over SMs
    med = [st.median(r[j] for r in sm.values()) for j in range(lines)]
    sig = {s: tuple(int(v[j] < med[j]) for j in range(lines)) for s, v in sm.items()}
    ref = next(iter(sig.values()))
    side = {s: int(sum(a == b for a, b in zip(sig[s], ref)) > lines // 2) for s in sig}
    near = [v[j] for s, v in sm.items() for j in range(lines) if sig[s][j]]
    far = [v[j] for s, v in sm.items() for j in range(lines) if not sig[s][j]]
    return side, st.median(near), st.median(far)

def analyze(path, side=None):
    L = load(path)
    print('==', path, len(L), 'launches')
    base_map = None
    groups = collections.defaultdict(list)  # alloc -> (cycles, cycles per block, cycles per tile)
    for i, l in enumerate(L):
        ctas = l['ctas']
        mhz = st.median((c['c1'] - c['c0']) / (c['t1'] - c['t0']) * 1e3 for c in ctas)
        t0 = min(c['t0'] for c in ctas)
        # per tile durations (ns, cycles) and key blocks (causal, equal requests: m_block + 1)
        xs, ys, yc = [], [], []
        per_cta_rate = []
        for c in ctas:
            tl = c['tiles']
            blocks = 0
            for k, tt in enumerate(tl):
                tn = tl[k+1][0] if k + 1 < len(tl) else c['t1']
                cn = tl[k+1][1] if k + 1 < len(tl) else c['c1']
                b = tt[4] + 1
                xs.append(b); ys.append(tn - tt[0]); yc.append(cn - tt[1]); blocks += b
            per_cta_rate.append(((c['t1'] - c['t0']) / blocks, c))
        n = len(xs); mx = sum(xs) / n; my = sum(ys) / n; myc = sum(yc) / n
        sxx = sum((x - mx) ** 2 for x in xs)
        a = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx; b = my - a * mx
        ac = sum((x - mx) * (y - myc) for x, y in zip(xs, yc)) / sxx; bc = myc - ac * mx
        ends = sorted(c['t1'] - t0 for c in ctas)
        smmap = tuple(c['sm'] for c in ctas)
        if base_map is None: base_map = smmap
        same = sum(x == y for x, y in zip(smmap, base_map))
        rates = sorted(r for r, _ in per_cta_rate)
        line = ('%3d a%d %7.1f us  clk %4.0f MHz  block %5.0f ns %5.0f cyc  tile+ %5.0f ns %5.0f cyc  '
                'cta ns/block min %5.0f med %5.0f max %5.0f  end %6.1f..%6.1f us  start spread %.1f  map=base %d/%d' % (
            i, l['alloc'], l['us'], mhz, a, ac, b, bc, rates[0], rates[len(rates)//2], rates[-1],
            ends[0] / 1e3, ends[-1] / 1e3, (max(c['t0'] for c in ctas) - t0) / 1e3, same, len(ctas)))
        if side:
            by = collections.defaultdict(list)
            for r, c in per_cta_rate: by[side.get(c['sm'], -1)].append(r)
            line += '  side ns/block ' + ' '.join('%d:%.0f' % (k, st.mean(v)) for k, v in sorted(by.items()))
        # live heads (K/V footprint) at mid-launch: tiles running at t_mid
        tm = t0 + (ends[-1]) / 2
        live = collections.defaultdict(set)
        for c in ctas:
            tl = c['tiles']
            for k, tt in enumerate(tl):
                tn = tl[k+1][0] if k + 1 < len(tl) else c['t1']
                if tt[0] <= tm < tn: live[(tt[2], tt[3])].add(side.get(c['sm'], -1) if side else 0)
        line += '  live(b,h) at mid %d, on both sides %d' % (len(live), sum(len(v) > 1 for v in live.values()))
        print(line)
        groups[l['alloc']].append((l['us'] * mhz, ac, bc))
    # Per "alloc" (a copy of the data, or the config row of the cycle
    # comparison): medians of launch cycles (time x clock), cycles per key
    # block and per tile.
    for a, g in sorted(groups.items()):
        print('   alloc %d: %d launches, cycles median %.4f M (min %.4f, max %.4f), block %.0f cyc, tile+ %.0f cyc' % (
            a, len(g), st.median(x[0] for x in g) * 1e-6, min(x[0] for x in g) * 1e-6, max(x[0] for x in g) * 1e-6,
            st.median(x[1] for x in g), st.median(x[2] for x in g)))

if __name__ == '__main__':
    side = None
    args = sys.argv[1:]
    if args and args[0].endswith('.txt'):
        side, near, far = sides(args[0]); args = args[1:]
        print('L2 probe: side sizes', collections.Counter(side.values()), 'near %.0f far %.0f cycles' % (near, far))
        print('side by smid:', ''.join(str(side[s]) for s in sorted(side)))
    for p in args: analyze(p, side)
