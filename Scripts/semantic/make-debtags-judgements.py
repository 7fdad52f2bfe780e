#!/usr/bin/env python3
"""A relevance set nobody on the project wrote, from Debian's debtags package.

Queries are tag descriptions from the debtags vocabulary (the one-line "Description:" of a tag);
the relevant documents for a query are the corpus packages that carry that tag in the debtags
database. The evaluation indexes the corpus *without* its tag keywords, so the answer is not in
the indexed text.

Tags kept ("eligible"): facets about what a package is for or works with (not junior::, role::,
interface::, implemented-in::, uitoolkit::, x11::, suite::, special::, made-of::, culture::,
scope::, accessibility::), with 15 to 600 packages of the corpus, not a placeholder (::TODO), and
a description that is not just the tag's name (the one-word "Server", "Client", "Board",
"Checking" … mean something only beside their facet; see Docs/SemanticSearch.md for the judgement).

The eligible tags in name order are split by position: the even ones (1st, 3rd, …) are the
**tuning** half, the set every fusion constant until 25 November 2026 was chosen on; the odd ones
are the **held-out** half, used by nobody before that date. Files written to OUTDIR:

    debtags-tuning.jsonl    the tuning half   {"tag", "query", "relevant": [ids], "split": "tuning"}
    debtags-heldout.jsonl   the held-out half (same fields, "split": "held-out")
    debtags-all.jsonl       both, in tag name order: the full set (the tools' default)
    debtags-sources.json    what they were made from: the debtags package's version, the SHA-256
                            of the vocabulary, the tag database and the corpus, and the counts

Deterministic: the same three inputs give byte-identical files (sorted tags, sorted ids, no time
stamps). Plain Python 3, no packages.

    apt-get install debtags && debtags update   # /usr/share/debtags/vocabulary, /var/lib/debtags/package-tags
    python3 Scripts/semantic/make-debtags-judgements.py ../shared/corpus/debian-packages.jsonl.gz \
        Scripts/semantic/relevance
    # --vocabulary FILE --package-tags FILE: other copies of the two debtags files (the tests)
"""
import gzip
import hashlib
import json
import os
import subprocess
import sys

VOCABULARY = "/usr/share/debtags/vocabulary"
PACKAGE_TAGS = "/var/lib/debtags/package-tags"
SKIP_FACETS = {"junior", "role", "interface", "implemented-in", "uitoolkit", "x11", "suite", "special", "made-of", "culture",
               "scope", "accessibility"}


def usage(message):
    sys.stderr.write(f"make-debtags-judgements: {message}\n"
                     "usage: make-debtags-judgements.py CORPUS.jsonl[.gz] OUTDIR [--vocabulary FILE] [--package-tags FILE]\n")
    sys.exit(2)


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def debtags_version():
    """The installed debtags package's version, or None (the files given on the command line)."""
    try:
        out = subprocess.run(["dpkg-query", "-W", "-f=${Version}", "debtags"], capture_output=True, text=True, check=True)
        return out.stdout.strip() or None
    except (OSError, subprocess.CalledProcessError):
        return None


args = sys.argv[1:]
options = {}
positional = []
while args:
    a = args.pop(0)
    if a in ("--vocabulary", "--package-tags"):
        if not args:
            usage(f"{a} needs a file")
        options[a[2:]] = args.pop(0)
    elif a.startswith("--"):
        usage(f"unknown option {a}")
    else:
        positional.append(a)
if len(positional) != 2:
    usage("give the corpus and the output folder")
corpus, outdir = positional
vocabulary = options.get("vocabulary", VOCABULARY)
package_tags = options.get("package-tags", PACKAGE_TAGS)
for path, what in ((corpus, "the corpus"), (vocabulary, "the debtags vocabulary (apt-get install debtags)"),
                   (package_tags, "the debtags tag database (apt-get install debtags; debtags update)")):
    if not os.path.isfile(path):
        usage(f"cannot read {what}: {path}")
if not os.path.isdir(outdir):
    usage(f"no such folder: {outdir}")

descriptions = {}
tag = None
for line in open(vocabulary, encoding="utf-8"):
    if line.startswith("Tag:"):
        tag = line.split(":", 1)[1].strip()
    elif line.startswith("Description:") and tag:
        descriptions[tag] = line.split(":", 1)[1].strip()
        tag = None
    elif not line.strip():
        tag = None

packages = {}
for line in open(package_tags, encoding="utf-8"):
    if ":" not in line:
        continue
    name, tags = line.split(":", 1)
    packages[name.strip()] = {t.strip() for t in tags.split(",") if t.strip()}

ids_by_name = {}
opener = gzip.open if corpus.endswith(".gz") else open
with opener(corpus, "rt", encoding="utf-8") as f:
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


def line(t, desc, docs, split):
    return json.dumps({"tag": t, "query": desc, "relevant": sorted(docs), "split": split}, ensure_ascii=False) + "\n"


rows = [(t, desc, docs, "tuning" if i % 2 == 0 else "held-out") for i, (t, desc, docs) in enumerate(eligible)]
files = {"debtags-tuning.jsonl": [r for r in rows if r[3] == "tuning"],
         "debtags-heldout.jsonl": [r for r in rows if r[3] == "held-out"],
         "debtags-all.jsonl": rows}
counts = {}
for name, chosen in files.items():
    with open(os.path.join(outdir, name), "w", encoding="utf-8") as out:
        for r in chosen:
            out.write(line(*r))
    counts[name] = {"queries": len(chosen), "judgements": sum(len(r[2]) for r in chosen)}
    print(f"{name}: {len(chosen)} queries, {counts[name]['judgements']} judgements", file=sys.stderr)

sources = {
    "debtags_package_version": debtags_version() if (vocabulary, package_tags) == (VOCABULARY, PACKAGE_TAGS) else None,
    "vocabulary": {"path": vocabulary if vocabulary == VOCABULARY else os.path.basename(vocabulary), "sha256": sha256(vocabulary),
                   "tags_with_description": len(descriptions)},
    "package_tags": {"path": package_tags if package_tags == PACKAGE_TAGS else os.path.basename(package_tags),
                     "sha256": sha256(package_tags), "packages": len(packages)},
    "corpus": {"path": os.path.basename(corpus), "sha256": sha256(corpus), "package_names": len(ids_by_name)},
    "eligible_tags": len(eligible),
    "files": counts,
}
with open(os.path.join(outdir, "debtags-sources.json"), "w", encoding="utf-8") as out:
    out.write(json.dumps(sources, indent=2, sort_keys=True) + "\n")
