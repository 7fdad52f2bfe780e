#!/usr/bin/env python3
"""Refinement share figures (issue 37): items/s refined by the low-priority share, and user-query
latency (query.user through the socket, transformer loaded by query.prepare) before the share
starts and while it runs, in one daemon run. Usage (from the source tree, after `make release`): python3 Scripts/semantic/refinement-share.py .build/release OUT_DIR N_ITEMS HOGS
(HOGS: shell busy loops started once the items are donated; the fake /proc then says cpu 70 %)."""
import gzip, json, os, socket, subprocess, sys, time, statistics

bindir, out, n, hogs = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
corpus = sys.argv[5] if len(sys.argv) > 5 else "../shared/corpus/debian-packages.jsonl.gz"
model = os.path.expanduser("~/.local/share/searchlight/models/all-MiniLM-L6-v2")
os.makedirs(out + "/proc/pressure", exist_ok=True)
def pressure(cpu, mem=0.0):
    for name, v in (("cpu", cpu), ("io", 0.0), ("memory", mem)):
        with open(f"{out}/proc/pressure/{name}.new", "w") as f: f.write(f"some avg10={v} avg60=0.00 avg300=0.00 total=1\n")
        os.rename(f"{out}/proc/pressure/{name}.new", f"{out}/proc/pressure/{name}")
pressure(70 if hogs else 0)
sock = out + "/d.sock"
settle = 25
d = subprocess.Popen([bindir + "/searchlightd", "--socket", sock, "--state-dir", out + "/state", "--units-dir", out + "/units",
    "--proc-root", out + "/proc", "--model-dir", model, "--refine-share-items", "10000", "--refine-share-after", str(settle),
    "--model-idle", "600"], stderr=open(out + "/daemon.log", "w"))
class Conn:
    def __init__(self, role, bundle=None):
        for _ in range(200):
            try:
                self.s = socket.socket(socket.AF_UNIX); self.s.connect(sock); break
            except OSError: time.sleep(0.05)
        self.f = self.s.makefile("rb"); self.id = 0
        p = {"protocolVersion": 1, "role": role, "capabilities": {}}
        if bundle: p["bundleIdentifier"] = bundle
        self.call("initialize", p)
    def call(self, method, params):
        self.id += 1
        self.s.sendall((json.dumps({"jsonrpc": "2.0", "id": self.id, "method": method, "params": params}) + "\n").encode())
        while True:
            m = json.loads(self.f.readline())
            if m.get("id") == self.id:
                if "error" in m: raise RuntimeError(m["error"])
                return m["result"]
items = []
with gzip.open(corpus, "rt") as f:
    for line in f:
        e = json.loads(line)
        items.append({"uniqueIdentifier": e["id"], "attributeSet": {k: e[k] for k in ("title", "contentDescription", "textContent") if e.get(k)}})
        if len(items) >= n: break
app = Conn("app", "bench.share"); admin = Conn("admin")
t0 = time.time()
for i in range(0, len(items), 250): app.call("index.items", {"items": items[i:i + 250]})
donated = time.time()
print(f"donated {len(items)} in {donated - t0:.1f} s", flush=True)
app.call("query.prepare", {})
hogp = [subprocess.Popen(["sh", "-c", "while :; do :; done"]) for _ in range(hogs)]
import atexit
atexit.register(lambda: [h.kill() for h in hogp] + [d.kill()])
queries = ["game of ancient warfare", "music player", "edit pictures", "network monitor", "text editor for programmers",
           "chess", "backup files to a remote disk", "web browser", "spreadsheet", "email client"]
def counts():
    st = admin.call("admin.status", {})
    b = [x for x in st["bundles"] if x["bundle"] == "bench.share"][0]["indexes"][0]
    return b["vectors"], b["refined"], st.get("refinementShare", {}).get("state")
def latencies(k, stop=None):
    lat = []
    for i in range(k):
        if stop and stop(): break
        q = queries[i % len(queries)]
        t = time.perf_counter()
        app.call("query.user", {"text": q, "context": {"maxResultCount": 20}})
        lat.append((time.perf_counter() - t) * 1000)
        time.sleep(0.05)
    return lat
def pct(l, p): s = sorted(l); return s[min(len(s) - 1, int(p / 100 * len(s)))]
# Phase 1: before the share starts (within the settle period after the last donation).
before = latencies(10000, stop=lambda: time.time() > donated + settle - 3 or counts()[1] > 0)
v, r, st = counts()
print(f"before: {len(before)} queries p50 {pct(before,50):.1f} ms p99 {pct(before,99):.1f} ms; refined {r}/{v} state {st}", flush=True)
# Phase 2a: the share's rate alone, 40 s from its first refined vectors (no queries).
while counts()[1] == 0: time.sleep(0.2)
t1 = time.time(); r1 = counts()[1]
time.sleep(40)
t2 = time.time(); r2 = counts()[1]
print(f"rate: {r2 - r1} items in {t2 - t1:.1f} s: {(r2 - r1) / (t2 - t1):.2f} items/s wall, hogs {hogs}, loadavg {open('/proc/loadavg').read().split()[:3]}", flush=True)
# Phase 2b: queries while it refines.
during = latencies(150, stop=lambda: counts()[1] >= v)
v3, r3, st3 = counts()
print(f"during: {len(during)} queries p50 {pct(during,50):.1f} ms p99 {pct(during,99):.1f} ms; refined {r3}/{v3} after them (state {st3})", flush=True)
for h in hogp: h.kill()
d.terminate(); d.wait()
for line in open(out + "/daemon.log"):
    if "vectors refined by the share" in line or "refinement share" in line: print(line.strip()[:400])
