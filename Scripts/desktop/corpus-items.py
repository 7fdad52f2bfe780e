# Debian corpus -> wire items (JSON lines) for `searchlight import BUNDLE -`; copies > 1 reuse the
# documents under new identifiers (as the bench does past the corpus's size).
# Usage: corpus-items.py COPIES [LIMIT] [CORPUS.jsonl.gz]  (Docs/Desktop.md, "Answer time")
import gzip, json, sys
copies = int(sys.argv[1]) if len(sys.argv) > 1 else 1
docs = [json.loads(l) for l in gzip.open(sys.argv[3] if len(sys.argv) > 3 else '../shared/corpus/debian-packages.jsonl.gz', 'rt')]
out = sys.stdout
n = 0
limit = int(sys.argv[2]) if len(sys.argv) > 2 else None
for c in range(copies):
    for d in docs:
        if limit and n >= limit: sys.exit(0)
        a = {"title": d["title"], "contentDescription": d.get("contentDescription", ""), "textContent": d.get("textContent", ""),
             "contentType": "public.plain-text", "contentURL": "https://packages.debian.org/" + d["title"]}
        if d.get("keywords"): a["keywords"] = d["keywords"]
        out.write(json.dumps({"uniqueIdentifier": d["id"] + ("" if c == 0 else "#%d" % c), "attributeSet": a}) + "\n")
        n += 1
