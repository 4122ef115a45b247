"""Pipeline config problems are SchemaErrors naming file, key path and line, one line each; the embedding and
chunk caches never overwrite a file they did not write."""

from pathlib import Path

import numpy as np
import pytest

from ragassay.analysis.demo import demo_config_dir
from ragassay.errors import InputError, SchemaError
from ragassay.pipeline.cache import (
    EmbeddingCache,
    check_cache_dir,
    load_chunk_artifact,
    save_chunk_artifact,
)
from ragassay.pipeline.chunkers import Chunk
from ragassay.pipeline.config import PipelineConfig, load_config, parse_config


def _load_error(tmp_path: Path, text: str) -> list[str]:
    p = tmp_path / "config.yaml"
    p.write_text(text, encoding="utf-8")
    with pytest.raises(SchemaError) as err:
        load_config(p)
    lines = str(err.value).splitlines()
    assert all(line.startswith(f"{p}: ") for line in lines), lines
    return [line[len(f"{p}: "):] for line in lines]


def test_every_field_problem_is_reported_with_its_path_and_line(tmp_path):
    lines = _load_error(tmp_path, "name: x\nbm25:\n  stemmer: klingon\n  stemer: english\n  depth: -3\n"
                                  "dense:\n  index: annoy\n")
    assert len(lines) == 4
    assert lines[0].startswith("bm25.stemmer (line 3): unknown stemmer 'klingon'; use one of arabic,")
    assert "unknown key 'bm25.stemer' (line 4); remove it or fix its spelling (did you mean 'stemmer'?)" in lines
    assert "bm25.depth (line 5): Input should be greater than or equal to 1, got -3" in lines
    assert "dense.index (line 7): Input should be 'exact' or 'hnsw', got 'annoy'" in lines


@pytest.mark.parametrize(("text", "expected"), [
    ("bm25: {enabled: 1}\n", "bm25.enabled (line 1): Input should be a valid boolean, got 1"),
    ("fusion: {depth: '10'}\n", "fusion.depth (line 1): Input should be a valid integer, got '10'"),
    ("bm25: {k1: .nan}\n", "bm25.k1 (line 1): Input should be a finite number, got nan"),
    ("name: 2024\n", "name (line 1): Input should be a valid string, got 2024"),
    ("chunker: 128\n", "chunker (line 1): Input should be a valid dictionary or instance of ChunkerConfig"),
    ("bm25: {stopwords: klingon}\n", "bm25.stopwords (line 1): unknown stopword list 'klingon'"),
])
def test_wrong_types_are_not_converted(tmp_path, text, expected):
    lines = _load_error(tmp_path, text)
    assert len(lines) == 1 and lines[0].startswith(expected), lines


def test_fusion_weights_must_name_enabled_branches(tmp_path):
    lines = _load_error(tmp_path, "fusion:\n  method: weighted\n  weights:\n    bogus: 1\n    dense: 2\n")
    assert lines == [
        "fusion.weights.bogus (line 4): no retrieval branch named 'bogus'; the branches are bm25 and dense",
        "fusion.weights.dense (line 5): the dense branch is not enabled; remove its weight or set "
        "dense.enabled: true",
    ]


def test_fusion_weights_are_refused_where_they_would_be_ignored_or_degenerate(tmp_path):
    lines = _load_error(tmp_path, "fusion: {method: rrf, weights: {bm25: 1}}\n")
    assert lines == ["fusion.weights (line 1): weights apply to method weighted only (method is rrf); remove "
                     "them or set method: weighted"]
    lines = _load_error(tmp_path, "fusion: {method: weighted, weights: {bm25: -1}}\n")
    assert lines[0] == "fusion.weights.bm25 (line 1): a weight must be >= 0, got -1.0"
    lines = _load_error(tmp_path, "fusion: {method: weighted, weights: {bm25: 0}}\n")
    assert lines[0].startswith("fusion.weights (line 1): every weight is 0")


def test_final_k_beyond_fusion_depth_is_an_error(tmp_path):
    lines = _load_error(tmp_path, "fusion: {depth: 20}\nreranker:\n  kind: lexical\n  final_k: 30\n")
    assert lines == ["reranker.final_k (line 4): 30 is more than fusion.depth (20): only fused units can be "
                     "offered, so metrics @final_k would be capped silently; lower final_k or raise fusion.depth"]


def test_reranker_model_only_where_used(tmp_path):
    assert _load_error(tmp_path, "reranker: {kind: lexical, model: minilm}\n") == [
        "reranker.model (line 1): a model is not used by reranker kind lexical; remove it or set kind: "
        "embedding or cross-encoder"]
    assert _load_error(tmp_path, "reranker: {kind: cross-encoder}\n") == [
        "reranker.model (line 1): reranker kind cross-encoder needs model: <local path to a CrossEncoder>"]


def test_no_branch_and_not_oracle(tmp_path):
    assert _load_error(tmp_path, "bm25: {enabled: false}\n") == [
        "bm25.enabled (line 1): enable at least one retrieval branch (bm25 or dense), or set oracle: true"]


def test_file_level_problems(tmp_path):
    p = tmp_path / "config.yaml"
    for text, expected in [
        ("", f"{p}: the pipeline config is empty"),
        ("- a\n- b\n", f"{p}: a pipeline config must be a mapping of sections"),
        ("name: a\nname: b\n", f"{p}:2: key 'name' given twice (first at line 1)"),
        ("name: [\n", f"{p}:2: invalid YAML in the pipeline config"),
    ]:
        p.write_text(text)
        with pytest.raises(InputError) as err:
            load_config(p)
        assert str(err.value).startswith(expected), str(err.value)
    p.write_bytes(b"name: caf\xe9\n")
    with pytest.raises(InputError, match=r"not UTF-8 text \(byte 0xE9 at offset 9\)"):
        load_config(p)
    with pytest.raises(InputError, match="no such file"):
        load_config(tmp_path / "missing.yaml")


def test_cache_dir_that_cannot_be_created_is_named(tmp_path):
    (tmp_path / "afile").write_text("x")
    lines = _load_error(tmp_path, f"cache_dir: {tmp_path / 'afile' / 'cache'}\n")
    assert len(lines) == 1 and lines[0].startswith(f"cache_dir (line 1): {tmp_path / 'afile' / 'cache'}: ")
    lines = _load_error(tmp_path, "cache_dir: /proc/ragassay-cache\n")
    assert lines[0].startswith("cache_dir (line 1): /proc/ragassay-cache: cannot create the folder")


def test_cache_dir_must_be_new_empty_or_a_cache(tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    lines = _load_error(tmp_path, f"cache_dir: {mine}\n")
    assert "folder is not empty and is not an earlier ragassay cache output" in lines[0]
    assert (mine / "notes.txt").read_text() == "keep me"
    fresh = tmp_path / "fresh" / "deeper"
    cfg_path = tmp_path / "ok.yaml"
    cfg_path.write_text(f"cache_dir: {fresh}\n")
    assert load_config(cfg_path).cache_dir == str(fresh)
    assert not (tmp_path / "fresh").exists()  # checked by creating and removing it: loading leaves nothing
    (fresh / "chunks").mkdir(parents=True)
    (fresh / "embeddings").mkdir()
    assert load_config(cfg_path).cache_dir == str(fresh)  # an earlier cache is reused
    (tmp_path / "empty").mkdir()
    check_cache_dir(tmp_path / "empty")
    assert (tmp_path / "empty").is_dir()
    (fresh / "stray.txt").write_text("x")
    with pytest.raises(InputError, match="is not an earlier ragassay cache output"):
        check_cache_dir(fresh)


def test_cache_dir_tilde_means_home(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    assert parse_config({"cache_dir": "~/c"}).cache_dir == str(tmp_path / "c")


def test_bundled_configs_still_validate():
    cfgs = {p.stem: load_config(p) for p in demo_config_dir().glob("*.yaml")}
    assert set(cfgs) == {"bm25", "hybrid", "hybrid_rerank", "oracle"}
    assert cfgs["hybrid_rerank"].reranker.final_k == 5


def test_python_construction_checks_the_same_rules():
    with pytest.raises(ValueError, match="fusion.weights.bogus: no retrieval branch named 'bogus'"):
        PipelineConfig(fusion={"method": "weighted", "weights": {"bogus": 1.0}})


def _fill(cache: EmbeddingCache) -> np.ndarray:
    vecs, _ = cache.get(["a", "b"], lambda t: np.ones((len(t), 3)), lambda t: np.full(len(t), 2))
    return vecs


def test_embedding_cache_round_trip_and_refuses_foreign_files(tmp_path):
    cache = EmbeddingCache(tmp_path, "emb/x", "queries")
    _fill(cache)
    cache.flush()
    again = EmbeddingCache(tmp_path, "emb/x", "queries")
    vecs, lens = again.get(["b"], lambda t: pytest.fail("should be cached"), lambda t: pytest.fail("cached"))
    assert vecs.tolist() == [[1.0, 1.0, 1.0]] and lens.tolist() == [2] and again.hits == 1

    other = EmbeddingCache(tmp_path, "other", "queries")
    other.dir.mkdir(parents=True)
    (other.dir / "manifest.json").write_text("my own notes")
    _fill(other)
    with pytest.raises(InputError, match="manifest.json: exists and is not a ragassay cache file"):
        other.flush()
    assert (other.dir / "manifest.json").read_text() == "my own notes"

    third = EmbeddingCache(tmp_path, "third", "queries")
    third.dir.mkdir(parents=True)
    (third.dir / "vectors.npy").write_bytes(b"precious")
    (third.dir / "readme.txt").write_text("not a cache")
    _fill(third)
    with pytest.raises(InputError, match="vectors.npy: exists and is not a ragassay cache file"):
        third.flush()
    assert (third.dir / "vectors.npy").read_bytes() == b"precious"


def test_embedding_cache_unwritable_dir_is_a_clean_error(tmp_path):
    (tmp_path / "f").write_text("x")
    cache = EmbeddingCache(tmp_path / "f", "emb", "queries")
    _fill(cache)
    with pytest.raises(InputError, match="cannot create the folder"):
        cache.flush()


def test_chunk_artifact_refuses_to_replace_a_foreign_file(tmp_path):
    docs = {"d": "hello world"}
    chunks = [Chunk("d:0-5", "d", 0, 5, "hello", 1)]
    path = tmp_path / "chunks" / "k.json"
    save_chunk_artifact(path, chunks, [["hello"]], [[[0, 5, ["hello"]]]])
    loaded, terms, sentences = load_chunk_artifact(path, docs)
    assert [c.text for c in loaded] == ["hello"] and terms == [["hello"]]
    save_chunk_artifact(path, chunks, [["hello"]], [[[0, 5, ["hello"]]]])  # its own file is replaced
    path.write_text('{"something": "else"}')
    with pytest.raises(InputError, match="k.json: exists and is not a ragassay cache file"):
        save_chunk_artifact(path, chunks, [["hello"]], [[[0, 5, ["hello"]]]])
    assert path.read_text() == '{"something": "else"}'
