#!/usr/bin/env python3
# Profiles one call of searchlightd end to end from the daemon's side (`git show
# 8eae301:Docs/Performance.md`, "The socket path, profiled"): a single-threaded client sends the
# bench's requests over the socket and times each round trip; with DPID=<daemon pid> it also prints
# the daemon's context switches and CPU per call.
# Usage: drive.py SOCKET term|prefix|user|userlex N   (the bench's index: bundle bench.query, --keep)
import socket, json, sys, time, os
path, kind, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
s = socket.socket(socket.AF_UNIX); s.connect(path)
f = s.makefile('rb')
def call(i, method, params):
    s.sendall((json.dumps({"jsonrpc":"2.0","id":i,"method":method,"params":params})+"\n").encode())
    line = f.readline()
    return line
call(0, "initialize", {"protocolVersion":1,"role":"app","bundleIdentifier":"bench.query"})
reqs = {
 "term": ("query.search", {"query":'textContent == "library"cdw',"fetchAttributes":["title"],"limit":20,"index":""}),
 "prefix": ("query.search", {"query":'title == "pars*"cdw',"fetchAttributes":["title"],"limit":20,"index":""}),
 "user": ("query.user", {"text":"gtk theme","context":{"enableRankedResults":True,"maxRankedResultCount":20,"maxResultCount":20,"maxSuggestionCount":0,"fetchAttributes":["title"]},"index":""}),
 "userlex": ("query.user", {"text":"gtk theme","context":{"enableRankedResults":True,"maxRankedResultCount":20,"maxResultCount":20,"maxSuggestionCount":0,"fetchAttributes":["title"],"semanticSearch":False},"index":""}),
}
m, p = reqs[kind]
r = call(1, m, p)
if b'"error"' in r: print(r[:300]); sys.exit(1)
if os.environ.get("SHOW"): print(len(r), r[:400])
def snap(pid):
    out = {}
    for t in os.listdir(f"/proc/{pid}/task"):
        try:
            st = open(f"/proc/{pid}/task/{t}/status").read().split("\n")
            name = open(f"/proc/{pid}/task/{t}/comm").read().strip()
        except OSError: continue
        v = sum(int(l.split()[1]) for l in st if "ctxt_switches" in l)
        out[t] = (name, v)
    return out
dpid = os.environ.get("DPID")
def cpu(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")",1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
if dpid: a = snap(dpid); ca = cpu(dpid); wa = time.perf_counter(); mine = os.times()
ts = []
for i in range(n):
    t = time.perf_counter(); call(i+2, m, p); ts.append((time.perf_counter()-t)*1e6)
if dpid:
    b = snap(dpid); tot = 0
    for t,(name,v) in b.items():
        d = v - a.get(t,(name,0))[1]
        if d: print("  %-24s %7d  %.2f/call" % (name, d, d/n))
        tot += d
    print("  daemon context switches per call: %.2f" % (tot/n))
    m2 = os.times()
    print("  daemon cpu per call: %.0f us; driver cpu per call: %.0f us; wall per call %.0f us" % ((cpu(dpid)-ca)/n*1e6, ((m2.user+m2.system)-(mine.user+mine.system))/n*1e6, (time.perf_counter()-wa)/n*1e6))
ts.sort()
if n: print(kind, "n", n, "p50 %.0f us p90 %.0f p99 %.0f bytes %d" % (ts[n//2], ts[int(n*.9)], ts[int(n*.99)], len(r)))
if os.environ.get("HOLD"): input()
