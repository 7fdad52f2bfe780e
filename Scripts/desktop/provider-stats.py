import re, sys, statistics
log, wall = sys.argv[1], sys.argv[2]
el = [float(m) for m in re.findall(r'search answered elapsed_ms=([\d.]+)', open(log).read())][-40:]
w = [int(l.split()[0]) / 1000 for l in open(wall)]
def q(xs, p): xs = sorted(xs); return xs[min(len(xs) - 1, int(round(p * (len(xs) - 1))))]
for name, xs in (("provider", el), ("gdbus wall", w)):
    print(f"{name}: n={len(xs)} median={statistics.median(xs):.1f} ms p90={q(xs,.9):.1f} ms max={max(xs):.1f} ms")
slow = sorted(((float(l.split()[0])/1000, l.split(None, 2)[2].strip()) for l in open(wall)), reverse=True)[:5]
print("slowest (wall):", slow)
