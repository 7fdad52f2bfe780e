"""The corpus documents as the semantic scripts see them, in one seeded order, and the text of a
document that gets embedded (the Swift tools use the same: SemanticDocument.text)."""
import gzip
import json
import random


def corpus_documents(path):
    with gzip.open(path, "rt", encoding="utf-8") as f:
        docs = [json.loads(line) for line in f]
    docs.sort(key=lambda d: d["id"])
    random.Random(18).shuffle(docs)
    return docs


def document_text(d):
    """Title, synopsis and description: what the item's title and textContent carry."""
    return f"{d.get('title', '')}. {d.get('contentDescription', '')}. {d.get('textContent', '')}"
