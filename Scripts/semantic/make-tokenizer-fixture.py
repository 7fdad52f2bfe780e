#!/usr/bin/env python3
"""Reference token ids for the Swift WordPiece tokenizer's tests.

Runs the reference BERT uncased tokenizer (Hugging Face `tokenizers`, `BertWordPieceTokenizer`
with lowercase=True: the normalizer, pre-tokenizer and WordPiece model that all-MiniLM-L6-v2's
tokenizer.json names) over a few hundred varied strings: corpus descriptions, accents, CJK,
emoji, controls, punctuation, long words, random Unicode. Writes JSON lines
{"text", "ids", "ids256"} (ids: [CLS] ... [SEP] untruncated; ids256: truncated to 256).

Usage (from the repository root, the model fetched by `make model`), in a scratch virtualenv
outside the repository:
    python3 -m venv /tmp/sl-venv && /tmp/sl-venv/bin/pip install tokenizers
    /tmp/sl-venv/bin/python Scripts/semantic/make-tokenizer-fixture.py \
        ~/.local/share/searchlight/models/all-MiniLM-L6-v2/vocab.txt ../shared/corpus/debian-packages.jsonl.gz \
        > Tests/SearchlightSemanticTests/Fixtures/tokenizer-reference.jsonl
"""
import gzip
import json
import random
import sys

from tokenizers import BertWordPieceTokenizer

vocab, corpus = sys.argv[1], sys.argv[2]
tok = BertWordPieceTokenizer(vocab, lowercase=True)
tok256 = BertWordPieceTokenizer(vocab, lowercase=True)
tok256.enable_truncation(256)

texts = [
    "", " ", "hello", "Hello, World!", "JSON parser for C++ (fast)", "foo_bar(baz)->qux; x += 1",
    "café naïve résumé Ångström Ørsted Straße", "İstanbul DİYARBAKIR ıi", "ΟΔΟΣ σοφός ΣΊΣΥΦΟΣ",
    "Привет, мир! Ёлка", "العربية نص", "हिन्दी पाठ", "ไทยภาษา", "日本語のテキストです。", "中文分词测试，标点！",
    "한국어 텍스트", "emoji 😀 🤗 👍🏽 🧑‍💻 🫠 ❤️ 🇫🇷", "zero\u200bwidth soft\u00adhyphen bom\ufeffmark",
    "nul\u0000char \u0001ctl \u007fdel \u000bvt \u000cff \u0085nel", "private \ue000 use, unassigned \u0378 x",
    "e\u0301 a\u0308\u0301 o\u0323\u0302", "“quotes” — en–dash … ¿qué? ¡sí! «guillemets» ‹›",
    "∑ ≤ ≥ ± × ÷ √ ∞ € $ £ ¥ © ® ™ ° § ¶ †", "fullwidth ＡＢＣ １２３ ｶﾀｶﾅ", "ligature ﬁ ﬂ Ⅻ ½ ²",
    "Kelvin \u212a Ohm \u2126 Angstrom \u212b", "ǅemal ǈ ǋ", "tab\tnew\nline\r\nreturn", "nbsp\u00a0thin\u2009ideo\u3000sp",
    "line\u2028sep para\u2029sep", "a" * 99, "b" * 100, "c" * 101, "d" * 150 + " tail",
    "pneumonoultramicroscopicsilicovolcanoconiosis antidisestablishmentarianism",
    "https://www.example.org/path?q=1&r=2#frag user@example.com", "3.14159 1,000,000 -42 +7 1e-10 0x1F",
    "C# F# .NET node.js Objective-C x86_64 i386 ARMv8", "libreoffice-writer gnome-shell-extension python3-numpy",
    "don't can't won't it's O'Reilly", "###header ##tag #hash", "[CLS] [SEP] [UNK] [PAD] [MASK]",
    "MiXeD CaSe WoRdS", "ÀÉÎÕÜ àéîõü ÇçÑñ", "Ça va? Où est-ce?", "Tiếng Việt có dấu", "Ελληνικά κείμενο",
    "עברית טקסט", "Ꭰ Ꮳ ꭰ cherokee", "𝐁𝐨𝐥𝐝 𝑰𝒕𝒂𝒍𝒊𝒄 math letters", "𠀀 𪜀 𫝀 𫠠 𬺰 CJK extensions",
    "丽 CJK compatibility \uf900 \ufa10 \U0002f800", "ア イ ウ katakana ひらがな", "ᄀ ᅡ jamo",
    "multiple     spaces   and\n\n\nblank lines", "trailing space ", " leading space", "....!!!???",
    "under_score hyphen-ated slash/ed back\\slash", "<html><body>tags & entities &amp;</body></html>",
    "{\"json\": [1, 2, 3], \"key\": null}", "tl;dr — TL;DR", "über-cool façade coöperate",
    "\u0300 starts with a combining mark", "\U0001F3F4\U000E0067\U000E0062\U000E0065\U000E006E\U000E0067\U000E007F flag",
    "\U000E0001 language tag", "\U0010FFFF last code point", "\ud7ff \ue000 \uf8ff \ufffe \ufffd replacement",
]
# Unicode ranges that stress the category and normalization tables.
rng = random.Random(18)
ranges = [(0x20, 0x7F), (0xA0, 0x24F), (0x370, 0x52F), (0x590, 0x6FF), (0x900, 0xDFF), (0x1100, 0x11FF),
          (0x1E00, 0x1FFF), (0x2000, 0x2BFF), (0x3000, 0x30FF), (0x4E00, 0x4F00), (0xAC00, 0xAD00),
          (0xFB00, 0xFFFF), (0x1F000, 0x1FAFF), (0x10000, 0x1034F)]
for _ in range(80):
    chars = []
    for _ in range(rng.randint(1, 30)):
        lo, hi = rng.choice(ranges)
        c = rng.randint(lo, hi)
        if 0xD800 <= c <= 0xDFFF:
            continue
        chars.append(chr(c))
        if rng.random() < 0.2:
            chars.append(" ")
    texts.append("".join(chars))

# Corpus documents as the encoders will see them: name, synopsis, description.
with gzip.open(corpus, "rt", encoding="utf-8") as f:
    docs = [json.loads(line) for line in f]
rng.shuffle(docs)
for d in docs[:170]:
    texts.append(f"{d.get('title', '')}. {d.get('contentDescription', '')}. {d.get('textContent', '')}")
# Non-ASCII corpus documents, and long ones (truncation).
texts += [f"{d['title']}: {d.get('textContent', '')}" for d in docs if any(ord(c) > 127 for c in d.get("textContent", ""))][:30]
texts += [" ".join(d.get("textContent", "") for d in docs[i:i + 6]) for i in range(200, 260, 6)]

for t in texts:
    print(json.dumps({"text": t, "ids": tok.encode(t).ids, "ids256": tok256.encode(t).ids}, ensure_ascii=False))
