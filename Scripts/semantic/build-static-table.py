#!/usr/bin/env python3
"""Builds the static token table (Models/all-MiniLM-L6-v2-static.bin) from the model's files.

Model2Vec-like, in the transformer's own 384-d space:
  1. every vocabulary token's transformer embedding ([CLS] token [SEP], mean-pooled; made by
     `searchlight-semantic embed-vocabulary`, our Swift encoder, which matches the reference);
  2. reduced by PCA to D dimensions;
  3. weighted by corpus frequency, SIF-style: w = a / (a + p(token)), so rare tokens weigh more
     (p counted over the corpus documents that are not held out);
  4. stored int8 with a scale per row;
  5. a linear map (D -> 384, with bias) fitted by ridge regression so that
     normalize(mean(rows of a document's word pieces) @ map + bias) approximates the transformer's
     embedding of that document (targets: sentence-transformers, Scripts/semantic/reference-embed.py);
  6. then rows, map and bias refined together (tokenlearn-style) by Adam on the training
     documents' cosine loss for STATIC_REFINE_STEPS steps (40), the rows held near their start,
     keeping the step with the best held-out cosine (measured on the int8 rows).
The first HELD_OUT documents of the seeded order (documents.py) are kept out of the fit and the
frequencies; the script reports the cosine between static and transformer embeddings on them.

Needs numpy and tokenizers (a scratch virtualenv outside the repository). From the repository root:
    .build/release/searchlight-semantic embed-vocabulary --output /tmp/vocab.f32
    python reference-embed.py corpus WHEEL ../shared/corpus/debian-packages.jsonl.gz /tmp/targets.npy 16000
    python Scripts/semantic/build-static-table.py MODEL_DIR/vocab.txt /tmp/vocab.f32 /tmp/targets.npy \
        ../shared/corpus/debian-packages.jsonl.gz Models/all-MiniLM-L6-v2-static.bin
then record the printed SHA-256 in the Makefile (STATIC_TABLE_SHA256).
"""
import hashlib
import os
import struct
import sys

import numpy as np
from tokenizers import BertWordPieceTokenizer

sys.path.insert(0, os.path.dirname(__file__))
from documents import corpus_documents, document_text  # noqa: E402

D = int(os.environ.get("STATIC_DIMENSION", "128"))
SIF_A = float(os.environ.get("STATIC_SIF_A", "1e-3"))
RIDGE = float(os.environ.get("STATIC_RIDGE", "1e-4"))
HELD_OUT = int(os.environ.get("STATIC_HELD_OUT", "1000"))
MAX_PIECES = 254

vocab_file, vocab_emb_file, targets_file, corpus_file, out_file = sys.argv[1:6]
tokens = open(vocab_file, encoding="utf-8").read().split("\n")
if tokens and tokens[-1] == "":
    tokens.pop()
V = len(tokens)
E = np.fromfile(vocab_emb_file, dtype=np.float32).reshape(V, -1).astype(np.float64)
O = E.shape[1]
Y = np.load(targets_file).astype(np.float64)
docs = corpus_documents(corpus_file)
N = len(Y)
tok = BertWordPieceTokenizer(vocab_file, lowercase=True)


def pieces(texts):
    return [e.ids[1:-1][:MAX_PIECES] for e in tok.encode_batch(texts)]


# Frequencies over every document but the held-out ones.
counts = np.zeros(V)
rest = [document_text(d) for d in docs[HELD_OUT:]]
for start in range(0, len(rest), 4096):
    for ids in pieces(rest[start:start + 4096]):
        np.add.at(counts, ids, 1)
p = counts / counts.sum()
weights = SIF_A / (SIF_A + p)

# PCA of the token embeddings.
mean = E.mean(axis=0)
_, _, vt = np.linalg.svd(E - mean, full_matrices=False)
P = (E - mean) @ vt[:D].T
R = P * weights[:, None]

# int8 rows with a scale per row: value = code * scale.
scales = np.abs(R).max(axis=1) / 127
scales[scales == 0] = 1
codes = np.clip(np.round(R / scales[:, None]), -127, 127).astype(np.int8)
Rq = codes.astype(np.float64) * scales[:, None]

doc_pieces = pieces([document_text(d) for d in docs[:N]])


def features(ids_list):
    X = np.zeros((len(ids_list), D))
    for i, ids in enumerate(ids_list):
        if ids:
            X[i] = Rq[ids].mean(axis=0)
    return X


X = features(doc_pieces)
Xa = np.hstack([X, np.ones((N, 1))])
train, held = slice(HELD_OUT, N), slice(0, HELD_OUT)
A = Xa[train].T @ Xa[train]
A += RIDGE * np.trace(A) / A.shape[0] * np.eye(A.shape[0])
Wb = np.linalg.solve(A, Xa[train].T @ Y[train])
W, b = Wb[:D], Wb[D]


def refine(steps, lr=float(os.environ.get("STATIC_REFINE_LR", "2e-3")), decay=float(os.environ.get("STATIC_REFINE_DECAY", "1e-2"))):
    """Tokenlearn-style: adjust the rows, the map and the bias by Adam on the training documents'
    cosine loss, the rows held near their PCA start; keeps the step with the best held-out cosine."""
    global Rq, Wb
    train_ids = doc_pieces[HELD_OUT:N]
    flat = np.concatenate([np.asarray(ids, dtype=np.int64) for ids in train_ids if ids])
    owner = np.concatenate([np.full(len(ids), i, dtype=np.int64) for i, ids in enumerate(train_ids) if ids])
    inv = np.concatenate([np.full(len(ids), 1 / len(ids), dtype=np.float32) for ids in train_ids if ids])
    n_train = len(train_ids)
    R = Rq.astype(np.float32).copy()
    R0 = R.copy()
    Wt = Wb.astype(np.float32).copy()
    Yt = Y[train].astype(np.float32)
    params = [R, Wt]
    m = [np.zeros_like(p) for p in params]
    v = [np.zeros_like(p) for p in params]
    best = (cosines(held).mean(), Rq.copy(), Wb.copy())
    for step in range(1, steps + 1):
        G = R[flat] * inv[:, None]
        X = np.zeros((n_train, D), dtype=np.float32)
        for j in range(D):
            X[:, j] = np.bincount(owner, weights=G[:, j], minlength=n_train)
        Xa1 = np.hstack([X, np.ones((n_train, 1), dtype=np.float32)])
        S = Xa1 @ Wt
        norm = np.maximum(np.linalg.norm(S, axis=1, keepdims=True), 1e-12)
        U = S / norm
        cos = (U * Yt).sum(axis=1, keepdims=True)
        dS = -(Yt - U * cos) / norm / n_train
        dW = Xa1.T @ dS
        dX = (dS @ Wt.T)[:, :D]
        dG = dX[owner] * inv[:, None]
        dR = np.zeros_like(R)
        for j in range(D):
            dR[:, j] = np.bincount(flat, weights=dG[:, j], minlength=V)
        dR += decay * (R - R0) / n_train
        for i, (p_, g) in enumerate(zip(params, [dR, dW])):
            m[i] = 0.9 * m[i] + 0.1 * g
            v[i] = 0.999 * v[i] + 0.001 * g * g
            p_ -= lr * (m[i] / (1 - 0.9 ** step)) / (np.sqrt(v[i] / (1 - 0.999 ** step)) + 1e-8)
        if step % 10 == 0 or step == steps:
            # Quantise as the file will hold it, then measure on the held-out documents.
            sc = np.abs(R).max(axis=1) / 127
            sc[sc == 0] = 1
            Rq_try = np.clip(np.round(R / sc[:, None]), -127, 127) * sc[:, None]
            saved = (Rq, Wb)
            Rq, Wb = Rq_try, Wt.astype(np.float64)
            Xa[:] = np.hstack([features(doc_pieces), np.ones((N, 1))])
            h = cosines(held).mean()
            print(f"refine step {step}: train cosine {float(cos.mean()):.4f}, held-out {h:.4f}", file=sys.stderr)
            if h > best[0]:
                best = (h, Rq.copy(), Wb.copy())
            Rq, Wb = saved
    Rq, Wb = best[1], best[2]
    Xa[:] = np.hstack([features(doc_pieces), np.ones((N, 1))])
    return Rq, Wb


def cosines(sl):
    S = Xa[sl] @ Wb
    S /= np.maximum(np.linalg.norm(S, axis=1, keepdims=True), 1e-12)
    return (S * Y[sl]).sum(axis=1)


STEPS = int(os.environ.get("STATIC_REFINE_STEPS", "40"))
if STEPS:
    print(f"before refinement: held-out mean {cosines(held).mean():.4f}", file=sys.stderr)
    Rq, Wb = refine(STEPS)
    W, b = Wb[:D], Wb[D]
    scales = np.abs(Rq).max(axis=1) / 127
    scales[scales == 0] = 1
    codes = np.clip(np.round(Rq / scales[:, None]), -127, 127).astype(np.int8)
c_train, c_held = cosines(train), cosines(held)
print(f"D={D} a={SIF_A} ridge={RIDGE}: cosine to the transformer, train mean {c_train.mean():.4f}; "
      f"held-out ({HELD_OUT} docs) mean {c_held.mean():.4f}, median {np.median(c_held):.4f}, "
      f"p10 {np.percentile(c_held, 10):.4f}, min {c_held.min():.4f}", file=sys.stderr)

vocab_bytes = "\n".join(tokens).encode("utf-8")
with open(out_file, "wb") as f:
    f.write(b"SLST")
    f.write(struct.pack("<5I", 1, V, D, O, len(vocab_bytes)))
    f.write(vocab_bytes)
    f.write(scales.astype("<f4").tobytes())
    f.write(codes.tobytes())
    f.write(W.astype("<f4").tobytes())
    f.write(b.astype("<f4").tobytes())
digest = hashlib.sha256(open(out_file, "rb").read()).hexdigest()
print(f"wrote {out_file}: {os.path.getsize(out_file)} bytes, SHA-256 {digest}", file=sys.stderr)

# The held-out check for the Swift tests: texts and their transformer embeddings' cosine to the
# static vector the table gives here (the Swift StaticEncoder must give the same vectors).
if len(sys.argv) > 6:
    import json
    S = Xa[held] @ Wb
    S /= np.maximum(np.linalg.norm(S, axis=1, keepdims=True), 1e-12)
    with open(sys.argv[6], "w", encoding="utf-8") as f:
        for i in range(40):
            f.write(json.dumps({"text": document_text(docs[i]), "static": [round(float(x), 6) for x in S[i]],
                                "transformer": [round(float(x), 6) for x in Y[i]]}, ensure_ascii=False) + "\n")
