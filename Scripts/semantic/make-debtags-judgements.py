#!/usr/bin/env python3
"""A relevance set nobody on the project wrote, from Debian's debtags package.

Queries are tag descriptions from the debtags vocabulary (the one-line "Description:" of a tag);
the relevant documents for a query are the corpus packages that carry that tag in the debtags
database. The evaluation indexes the corpus *without* its tag keywords, so the answer is not in
the indexed text.

Tags kept: facets about what a package is for or works with (not junior::, role::, interface::,
implemented-in::, uitoolkit::, x11::, suite::, special::, made-of::, culture::, scope::), with
15 to 600 packages of the corpus, not a placeholder (::TODO), and a description that is not just the tag's name; then every
second such tag in name order, so the set spans the vocabulary. Plain Python 3, no packages.

    apt-get install debtags        # /usr/share/debtags/vocabulary, /var/lib/debtags/package-tags
    python3 Scripts/semantic/make-debtags-judgements.py ../shared/corpus/debian-packages.jsonl.gz \
        > Scripts/semantic/relevance/debtags-judgements.jsonl
"""
import gzip
import json
import sys

VOCABULARY = "/usr/share/debtags/vocabulary"
PACKAGE_TAGS = "/var/lib/debtags/package-tags"
SKIP_FACETS = {"junior", "role", "interface", "implemented-in", "uitoolkit", "x11", "suite", "special", "made-of", "culture", "scope", "accessibility"}

descriptions = {}
tag = None
for line in open(VOCABULARY, encoding="utf-8"):
    if line.startswith("Tag:"):
        tag = line.split(":", 1)[1].strip()
    elif line.startswith("Description:") and tag:
        descriptions[tag] = line.split(":", 1)[1].strip()
        tag = None
    elif not line.strip():
        tag = None

packages = {}
for line in open(PACKAGE_TAGS, encoding="utf-8"):
    if ":" not in line:
        continue
    name, tags = line.split(":", 1)
    packages[name.strip()] = {t.strip() for t in tags.split(",") if t.strip()}

ids_by_name = {}
with gzip.open(sys.argv[1], "rt", encoding="utf-8") as f:
    for line in f:
        d = json.loads(line)
        ids_by_name.setdefault(d["title"], []).append(d["id"])

relevant = {}
for name, tags in packages.items():
    for t in tags:
        for doc_id in ids_by_name.get(name, []):
            relevant.setdefault(t, set()).add(doc_id)

eligible = []
for t, desc in sorted(descriptions.items()):
    facet, _, value = t.partition("::")
    docs = relevant.get(t, set())
    if facet in SKIP_FACETS or value == "TODO" or not 15 <= len(docs) <= 600:
        continue
    if desc.lower().replace(" ", "") == value.lower().replace("-", "").replace(" ", ""):
        continue
    eligible.append((t, desc, docs))

chosen = eligible[::2]
for t, desc, docs in chosen:
    print(json.dumps({"tag": t, "query": desc, "relevant": sorted(docs)}, ensure_ascii=False))
print(f"{len(chosen)} queries of {len(eligible)} eligible tags; {sum(len(d) for _, _, d in chosen)} judgements",
      file=sys.stderr)
