"""ragassay quick start: score your own RAG function on the bundled golden set, then compare two versions."""
import ragassay
from ragassay.corpus import bundled_corpus_dir, load_corpus

corpus = load_corpus(bundled_corpus_dir())  # your documents: load_corpus("docs/")
lowered = {d.doc_id: d.text.lower() for d in corpus.docs.values()}

def my_rag(question: str, k: int = 5) -> dict:  # your pipeline: return the ranked units and the answer
    words = set(question.lower().split())
    top = sorted(lowered, key=lambda doc_id: -sum(w in lowered[doc_id] for w in words))[:k]
    units = [{"unit_id": d, "doc_id": d, "start": 0, "end": len(corpus.docs[d].text)} for d in top]
    return {"fused": units, "packed": units, "answer": corpus.docs[top[0]].text[:300], "outcome": "answered"}

base = ragassay.evaluate(my_rag, corpus=corpus, store="quickstart.duckdb", name="top5")
cand = ragassay.evaluate(lambda q: my_rag(q, k=1), corpus=corpus, store="quickstart.duckdb", name="top1")
comparison = base.compare(cand, metrics=["recall@fusion_depth", "nDCG@final_k"])
print(*comparison.claims, "gate: " + base.gate(cand).verdict, sep="\n")
