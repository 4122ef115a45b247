"""The embeddings a Ray run computes once for all workers are the local run's, call for call and bit for bit."""

import dataclasses

import numpy as np
import pytest
from tests.scale.conftest import rows

from ragassay.analysis.demo import demo_config_dir
from ragassay.analysis.runner import BATCH_QUERIES, load_inputs, run_pipeline_into_store
from ragassay.executors import get_executor
from ragassay.executors.local import run_keys
from ragassay.executors.shared import PipelineRecipe
from ragassay.pipeline import load_config
from ragassay.pipeline.embedders import TableEmbedder, embed_groups, make_embedder
from ragassay.store import Store


@pytest.fixture(scope="module")
def inputs():
    return load_inputs(None, None)


class Recorder:
    """An embedder that records every call the pipeline makes, then answers it with ``inner``."""

    def __init__(self, inner):
        self.inner, self.name, self.max_tokens, self.dim = inner, inner.name, inner.max_tokens, inner.dim
        self.calls = {"passages": [], "queries": []}

    def embed_passages(self, texts):
        self.calls["passages"].append(list(texts))
        return self.inner.embed_passages(texts)

    def embed_queries(self, texts):
        self.calls["queries"].append(list(texts))
        return self.inner.embed_queries(texts)

    def token_lengths(self, texts):
        return self.inner.token_lengths(texts)


def _batches(golden, trials):
    todo = [(q.query_id, tr) for tr in range(trials) for q in golden.queries]
    return [todo[s:s + BATCH_QUERIES] for s in range(0, len(todo), BATCH_QUERIES)]


@pytest.mark.parametrize("batched", [False, True])
def test_the_recipe_names_every_embedding_call_the_local_run_makes(inputs, batched):
    corpus, golden = inputs
    recipe = PipelineRecipe(load_config(demo_config_dir() / "hybrid.yaml"), corpus)
    emb = recipe.embedder()
    rec = Recorder(emb)
    pipe = recipe(rec)
    batches = _batches(golden, 2)
    for keys in batches:
        run_keys(pipe, golden, keys, batched)
    assert rec.calls["passages"] == [recipe.passage_call(emb)]
    assert len(rec.calls["passages"][0]) == pipe.stats["embed_cache_misses"] > 100
    want = recipe.query_calls(emb, golden, batches, batched)
    assert rec.calls["queries"] == want
    # each distinct question is embedded once, in its first batch: one call per question, or one per batch
    assert sum(map(len, want)) == len({q.question for q in golden.queries})
    if batched:  # 171 questions: batches 1-3 of trial 0 embed them, trial 1 embeds nothing
        assert len(want) == 3
    else:
        assert {len(c) for c in want} == {1}


def test_the_recipe_leaves_out_what_the_cache_folder_holds(inputs, tmp_path):
    corpus, golden = inputs
    cfg = load_config(demo_config_dir() / "hybrid.yaml").model_copy(update={"cache_dir": str(tmp_path / "c")})
    recipe = PipelineRecipe(cfg, corpus)
    first = recipe()
    first.run(golden.queries[:40], progress=False)  # caches every passage and 40 questions
    emb = recipe.embedder()
    rec = Recorder(emb)
    pipe = recipe(rec)
    batches = _batches(golden, 1)
    for keys in batches:
        run_keys(pipe, golden, keys, True)
    assert recipe.passage_call(emb) == [] and rec.calls["passages"] == []
    want = recipe.query_calls(emb, golden, batches, True)
    assert rec.calls["queries"] == want
    assert sum(map(len, want)) == len({q.question for q in golden.queries[40:]} - {q.question for q in golden.queries[:40]})


@pytest.mark.slow
def test_minilm_groups_embedded_apart_are_one_call_bit_for_bit_and_a_table_serves_them(inputs):
    corpus, _ = inputs
    emb = make_embedder("minilm", batch_size=8)
    texts = [d.text[i:i + 40 + 7 * (i % 13)] for d in list(corpus.docs.values())[:4] for i in range(0, 900, 90)]
    whole = emb.embed_passages(texts)
    groups = embed_groups(emb, texts)
    assert len(groups) == -(-len(texts) // 8) and sorted(np.concatenate(groups).tolist()) == list(range(len(texts)))
    apart = np.empty_like(whole)
    for idx in reversed(groups):  # any order, any process: each group is its own model batch
        apart[idx] = emb.embed_passages([texts[i] for i in idx])
    assert np.array_equal(apart, whole)
    lens = emb.token_lengths(texts)
    table = TableEmbedder(emb, passages=(texts, whole, lens))
    assert table.name == emb.name and table.dim == 384
    assert np.array_equal(table.embed_passages(texts[3:9]), whole[3:9])
    assert np.array_equal(table.token_lengths(texts[:5]), lens[:5])
    # a call the table cannot answer whole goes to the model whole, as it would without the table
    other = [texts[0], "a question the table never saw"]
    assert np.array_equal(table.embed_passages(other), emb.embed_passages(other))


@pytest.mark.slow
@pytest.mark.parametrize("batched", [False, True])
def test_a_minilm_run_on_ray_stores_the_local_rows(tmp_path, inputs, ray_cluster, batched):
    corpus, golden = inputs
    # 60 questions x 2 trials: two batches, so the second actor meets questions only the first embedded
    golden = dataclasses.replace(golden, queries=golden.queries[:60])
    cfg = tmp_path / "minilm.yaml"
    # long chunks keep the corpus embedding short; the questions are the CPU-bound stage either way
    cfg.write_text("name: minilm\nchunker: {kind: recursive, size: 1024}\n"
                   "dense: {enabled: true, embedder: minilm, index: exact, depth: 20}\n"
                   "fusion: {method: rrf, k: 60, depth: 20}\nreranker: {kind: none, final_k: 5}\n")
    got = {}
    ex = get_executor("ray")
    try:
        for label, executor in (("local", None), ("ray", ex)):
            with Store.open(tmp_path / f"{label}.duckdb") as st:
                run_id, _ = run_pipeline_into_store(st, cfg, corpus, golden, trials=2, batched=batched,
                                                    executor=executor)
                got[label] = rows(st, run_id)
                extra = st.get_run(run_id).extra
                got[label + "_stats"] = {k: extra["pipeline_stats"][k] for k in
                                         ("embed_cache_misses", "embedder", "n_chunks")}
    finally:
        ex.close()
    assert len(got["ray"]) == len(got["local"]) >= 2 * 60 * 9
    assert got["ray"] == got["local"]
    assert got["ray_stats"] == got["local_stats"]
