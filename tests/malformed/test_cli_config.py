"""Malformed pipeline configs given to `ragassay run`, bad `power` / `demo` flags, unknown commands: each ends
as a clean `error:` line naming the file, key and line (exit 2), and no file present before is lost."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.malformed.conftest import tree_digest

from ragassay import __version__

BOMB = ("a: &a [x, x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
        "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
        "e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]\nf: [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]\n")

# (id, config file content, fragments the error must contain; "{cfg}" is the config path, "{tmp}" the folder)
CONFIGS: list[tuple[str, str | bytes, tuple[str, ...]]] = [
    ("yaml-unclosed-bracket", "name: [\n", ("{cfg}:2: invalid YAML in the pipeline config",)),
    ("yaml-tab-indent", "bm25:\n\tk1: 1\n", ("{cfg}:2: invalid YAML in the pipeline config",)),
    ("yaml-bad-mapping", "name: a: b\n", ("{cfg}:1: invalid YAML in the pipeline config",)),
    ("duplicate-top-key", "name: a\nname: b\n", ("{cfg}:2: key 'name' given twice (first at line 1)",)),
    ("duplicate-nested-key", "bm25:\n  k1: 1\n  k1: 2\n", ("{cfg}:3: key 'k1' given twice (first at line 2)",)),
    ("alias-bomb", BOMB, ("{cfg}: YAML aliases expand", "write the pipeline config out without nested aliases")),
    ("recursive-alias", "name: &a [*a]\n", ("recursive YAML alias",)),
    ("not-utf8", b"name: caf\xe9\n", ("{cfg}: not UTF-8 text (byte 0xE9 at offset 9)",)),
    ("utf16", "name: x\n".encode("utf-16"), ("{cfg}: not UTF-8 text (byte 0xFF at offset 0)",)),
    ("nul-byte", b"name: a\x00b\n", ("{cfg}:1: control character U+0000",)),
    ("empty-file", "", ("{cfg}: the pipeline config is empty",)),
    ("comments-only", "# nothing here\n", ("{cfg}: the pipeline config is empty",)),
    ("top-level-list", "- bm25\n- dense\n", ("{cfg}: a pipeline config must be a mapping of sections", "got list")),
    ("top-level-scalar", "hello\n", ("{cfg}: a pipeline config must be a mapping of sections", "got str")),
    ("unknown-top-key", "nmae: x\n", ("{cfg}: unknown key 'nmae' (line 1)", "did you mean 'name'?")),
    ("unknown-section-key", "bm25:\n  stemer: english\n",
     ("{cfg}: unknown key 'bm25.stemer' (line 2)", "did you mean 'stemmer'?")),
    ("unknown-section", "retriever: {depth: 5}\n", ("{cfg}: unknown key 'retriever' (line 1)",)),
    ("stemmer-klingon", "bm25: {stemmer: klingon}\n", ("{cfg}: bm25.stemmer (line 1): unknown stemmer 'klingon'",)),
    ("stopwords-klingon", "bm25: {stopwords: klingon}\n",
     ("{cfg}: bm25.stopwords (line 1): unknown stopword list 'klingon'",)),
    ("bm25-depth-negative", "bm25: {depth: -5}\n",
     ("{cfg}: bm25.depth (line 1): Input should be greater than or equal to 1, got -5",)),
    ("bm25-depth-zero", "bm25: {depth: 0}\n", ("{cfg}: bm25.depth (line 1): Input should be greater than or equal to 1",)),
    ("dense-depth-negative", "dense: {enabled: true, depth: -1}\n", ("{cfg}: dense.depth (line 1)",)),
    ("fusion-depth-zero", "fusion: {depth: 0}\n", ("{cfg}: fusion.depth (line 1)",)),
    ("bm25-b-above-one", "bm25: {b: 1.5}\n", ("{cfg}: bm25.b (line 1): Input should be less than or equal to 1",)),
    ("bm25-k1-negative", "bm25: {k1: -1}\n", ("{cfg}: bm25.k1 (line 1): Input should be greater than or equal to 0",)),
    ("bm25-k1-infinite", "bm25: {k1: .inf}\n", ("{cfg}: bm25.k1 (line 1): Input should be a finite number",)),
    ("enabled-as-string", "bm25: {enabled: 'yes'}\n",
     ("{cfg}: bm25.enabled (line 1): Input should be a valid boolean, got 'yes'",)),
    ("depth-as-string", "bm25: {depth: '10'}\n", ("{cfg}: bm25.depth (line 1): Input should be a valid integer",)),
    ("depth-fractional", "bm25: {depth: 10.5}\n", ("{cfg}: bm25.depth (line 1): Input should be a valid integer",)),
    ("section-as-number", "chunker: 128\n", ("{cfg}: chunker (line 1): Input should be a valid dictionary",)),
    ("section-null", "fusion:\n", ("{cfg}: fusion (line 1): Input should be a valid dictionary",)),
    ("chunker-kind", "chunker: {kind: paragraph}\n",
     ("{cfg}: chunker.kind (line 1): Input should be 'fixed', 'recursive' or 'sentence', got 'paragraph'",)),
    ("chunker-size-zero", "chunker: {size: 0}\n", ("{cfg}: chunker.size (line 1)",)),
    ("overlap-not-fixed", "chunker: {kind: recursive, overlap: 8}\n",
     ("{cfg}: chunker.overlap (line 1): overlap applies to the fixed chunker only",)),
    ("overlap-not-below-size", "chunker: {kind: fixed, size: 16, overlap: 16}\n",
     ("{cfg}: chunker.overlap (line 1): overlap (16) must be smaller than size (16)",)),
    ("weights-bogus-branch", "fusion:\n  method: weighted\n  weights: {bogus: 1}\n",
     ("{cfg}: fusion.weights.bogus (line 3): no retrieval branch named 'bogus'",)),
    ("weights-disabled-branch", "fusion:\n  method: weighted\n  weights: {dense: 1}\n",
     ("{cfg}: fusion.weights.dense (line 3): the dense branch is not enabled",)),
    ("weights-with-rrf", "fusion: {weights: {bm25: 1}}\n",
     ("{cfg}: fusion.weights (line 1): weights apply to method weighted only (method is rrf)",)),
    ("weights-negative", "fusion: {method: weighted, weights: {bm25: -2}}\n",
     ("{cfg}: fusion.weights.bm25 (line 1): a weight must be >= 0, got -2.0",)),
    ("weights-not-numbers", "fusion: {method: weighted, weights: {bm25: high}}\n",
     ("{cfg}: fusion.weights.bm25 (line 1): Input should be a valid number",)),
    ("fusion-method", "fusion: {method: borda}\n", ("{cfg}: fusion.method (line 1): Input should be 'rrf' or 'weighted'",)),
    ("final-k-beyond-fusion-depth", "fusion: {depth: 50}\nreranker: {final_k: 100}\n",
     ("{cfg}: reranker.final_k (line 2): 100 is more than fusion.depth (50)",)),
    ("cross-encoder-without-model", "reranker: {kind: cross-encoder}\n",
     ("{cfg}: reranker.model (line 1): reranker kind cross-encoder needs model",)),
    ("reranker-kind", "reranker: {kind: magic}\n", ("{cfg}: reranker.kind (line 1)", "got 'magic'")),
    ("reranker-model-unused", "reranker: {kind: none, model: minilm}\n",
     ("{cfg}: reranker.model (line 1): a model is not used by reranker kind none",)),
    ("budget-negative", "packer: {budget_tokens: -1}\n", ("{cfg}: packer.budget_tokens (line 1)",)),
    ("packer-policy", "packer: {policy: greedy}\n", ("{cfg}: packer.policy (line 1): Input should be 'stop' or 'skip'",)),
    ("abstain-floor-above-one", "generator: {abstain_floor: 2}\n", ("{cfg}: generator.abstain_floor (line 1)",)),
    ("generator-kind", "generator: {kind: abstractive}\n",
     ("{cfg}: generator.kind (line 1): Input should be 'extractive' or 'llm'",)),
    ("generator-llm-incomplete", "generator: {kind: llm}\n",
     ("{cfg}: generator (line 1): kind llm needs provider, model, price_input, price_output",)),
    ("no-branch", "bm25: {enabled: false}\n",
     ("{cfg}: bm25.enabled (line 1): enable at least one retrieval branch (bm25 or dense), or set oracle: true",)),
    ("name-empty", "name: ''\n", ("{cfg}: name (line 1): String should have at least 1 character",)),
    ("oracle-as-string", "oracle: 'true'\n", ("{cfg}: oracle (line 1): Input should be a valid boolean",)),
    ("cache-dir-empty", "cache_dir: ''\n", ("{cfg}: cache_dir (line 1): String should have at least 1 character",)),
    ("cache-dir-proc", "cache_dir: /proc/ragassay-x\n",
     ("{cfg}: cache_dir (line 1): /proc/ragassay-x: cannot create the folder",)),
    ("cache-dir-under-a-file", "cache_dir: {tmp}/keep.txt/cache\n",
     ("{cfg}: cache_dir (line 1): {tmp}/keep.txt/cache:", "is a file, not a folder")),
    ("cache-dir-foreign-folder", "cache_dir: {tmp}/mine\n",
     ("{cfg}: cache_dir (line 1): {tmp}/mine: folder is not empty and is not an earlier ragassay cache output",)),
    ("unknown-embedder", "dense: {enabled: true, embedder: no-such-model}\n",
     ("unknown embedder 'no-such-model'; use 'wordllama', 'minilm' or a local model folder",)),
    ("embedder-folder-not-a-model", "dense: {enabled: true, embedder: '{tmp}/mine'}\n",
     ("{tmp}/mine: not a local sentence-transformers model folder",)),
    ("embedder-folder-broken", "dense: {enabled: true, embedder: '{tmp}/model'}\n",
     ("{tmp}/model: cannot load it as a sentence-transformers embedding model (Unrecognized model",)),
    ("cross-encoder-folder-missing", "reranker: {kind: cross-encoder, model: '{tmp}/absent'}\n",
     ("{tmp}/absent: cross-encoder model folder not found",)),
    ("cross-encoder-folder-broken", "reranker: {kind: cross-encoder, model: '{tmp}/model'}\n",
     ("{tmp}/model: cannot load it as a sentence-transformers CrossEncoder (Unrecognized model",)),
]


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """A folder with files that must survive every case untouched."""
    (tmp_path / "keep.txt").write_text("user data\n")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.md").write_text("# mine\n")
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}\n")  # a model folder missing its model type
    return tmp_path


def _assert_nothing_lost(before: dict[str, str], after: dict[str, str]) -> None:
    assert {k: after.get(k) for k in before} == before


@pytest.mark.parametrize(("content", "fragments"), [c[1:] for c in CONFIGS], ids=[c[0] for c in CONFIGS])
def test_run_with_a_malformed_config(cli, workdir, content, fragments):
    cfg = workdir / "config.yaml"
    if isinstance(content, str):
        content = content.replace("{tmp}", str(workdir)).encode("utf-8")
    cfg.write_bytes(content)
    before = tree_digest(workdir)
    res = cli("run", cfg, "--store", workdir / "store.duckdb")
    res.assert_clean_error(*(f.replace("{cfg}", str(cfg)).replace("{tmp}", str(workdir)) for f in fragments))
    _assert_nothing_lost(before, tree_digest(workdir))


@pytest.mark.parametrize(("args", "fragments"), [
    (("run",), ("Missing argument 'config'",)),
    (("run", "{tmp}/absent.yaml"), ("{tmp}/absent.yaml: no such file; pass the pipeline config file",)),
    (("run", "{tmp}/mine"), ("{tmp}/mine: is a folder; pass the pipeline config file",)),
    (("run", "{tmp}/keep.txt", "--bogus"), ("No such option: --bogus", "see 'ragassay run --help'")),
    (("run", "{tmp}/keep.txt", "--trials", "0"), ("Invalid value for '--trials'",)),
], ids=["no-config", "config-missing", "config-is-folder", "unknown-option", "trials-zero"])
def test_run_with_bad_arguments(cli, workdir, monkeypatch, args, fragments):
    monkeypatch.chdir(workdir)  # the default --store is ./ragassay.duckdb
    before = tree_digest(workdir)
    res = cli(*(a.replace("{tmp}", str(workdir)) for a in args))
    res.assert_clean_error(*(f.replace("{tmp}", str(workdir)) for f in fragments))
    _assert_nothing_lost(before, tree_digest(workdir))


DIFFS = {
    "diffs-inf": ("0.1\ninf\n", ("{f}:2: 'inf' is infinite",)),
    "diffs-empty": ("# no data\n", ("{f}: no numbers found",)),
    "diffs-two-columns": ("0.1,0.2\n", ("{f}:1: expected one column",)),
    "diffs-word": ("0.1\n0.2\noops\n", ("{f}:3: 'oops' is not a number",)),
    "diffs-one-value": ("0.1\n", ("sigma_d: need at least 2 non-NaN differences, got 1",)),
    "diffs-not-utf8": (b"0.1\n\xff\n", ("{f}: not UTF-8 text (byte offset 4)",)),
}


@pytest.mark.parametrize(("args", "fragments"), [
    (("--n", "1", "--sigma-d", "0.2"), ("--n must be at least 2 paired items", "got 1")),
    (("--n", "0", "--sigma-d", "0.2"), ("--n must be at least 2 paired items", "got 0")),
    (("--n", "-5", "--sigma-d", "0.2"), ("--n must be at least 2 paired items", "got -5")),
    (("--n", "60", "--sigma-d", "-0.1"), ("--sigma-d must be a finite number > 0, got -0.1",)),
    (("--n", "60", "--sigma-d", "0"), ("--sigma-d must be a finite number > 0, got 0.0",)),
    (("--n", "60", "--sigma-d", "nan"), ("--sigma-d must be a finite number > 0, got nan",)),
    (("--n", "60", "--sigma-d", "inf"), ("--sigma-d must be a finite number > 0, got inf",)),
    (("--mde", "0", "--sigma-d", "0.2"), ("--mde must be a finite effect > 0, got 0.0",)),
    (("--mde", "-0.1", "--sigma-d", "0.2"), ("--mde must be a finite effect > 0, got -0.1",)),
    (("--n", "60", "--sigma-d", "0.2", "--alpha", "1.5"), ("--alpha must lie strictly between 0 and 1, got 1.5",)),
    (("--n", "60", "--sigma-d", "0.2", "--alpha", "0"), ("--alpha must lie strictly between 0 and 1, got 0.0",)),
    (("--n", "60", "--sigma-d", "0.2", "--power", "1"), ("--power must lie strictly between 0 and 1, got 1.0",)),
    (("--n", "1", "--sigma-d", "-1", "--mde", "0"), ("--sigma-d must be", "--n must be", "--mde must be")),
    (("--n", "60", "--sigma-d", "wide"), ("Invalid value for '--sigma-d'",)),
    (("--n", "sixty", "--sigma-d", "0.2"), ("Invalid value for '--n'",)),
    ((), ("need --sigma-d S or --diffs FILE",)),
    (("--sigma-d", "0.2"), ("need --n N (prints the MDE) or --mde D",)),
    (("--diffs", "{tmp}/absent.csv"), ("{tmp}/absent.csv: file not found",)),
    (("--diffs", "{tmp}/mine"), ("{tmp}/mine: is a folder",)),
    (("--diffs", "{tmp}/keep.txt", "--sigma-d", "0.2"), ("give either --sigma-d or --diffs, not both",)),
    *[(("--diffs", "{f}"), frags) for frags in (v[1] for v in DIFFS.values())],
], ids=["n-1", "n-0", "n-negative", "sigma-negative", "sigma-zero", "sigma-nan", "sigma-inf", "mde-0",
        "mde-negative", "alpha-above-one", "alpha-zero", "power-one", "three-problems", "sigma-word", "n-word",
        "nothing", "sigma-only", "diffs-missing", "diffs-folder", "diffs-and-sigma", *DIFFS])
def test_power_with_bad_flags(cli, workdir, request, args, fragments):
    f = workdir / "diffs.csv"
    case = request.node.callspec.id
    if case in DIFFS:
        body = DIFFS[case][0]
        f.write_bytes(body if isinstance(body, bytes) else body.encode("utf-8"))
    before = tree_digest(workdir)
    res = cli("power", *(a.replace("{tmp}", str(workdir)).replace("{f}", str(f)) for a in args))
    res.assert_clean_error(*(x.replace("{tmp}", str(workdir)).replace("{f}", str(f)) for x in fragments))
    if case == "three-problems":
        assert res.err.count("error: ") == 3
    _assert_nothing_lost(before, tree_digest(workdir))


@pytest.mark.parametrize(("args", "fragments"), [
    (("--resamples", "5"), ("Invalid value for '--resamples'",)),
    (("--resamples", "many"), ("Invalid value for '--resamples'",)),
    (("-o", "/proc/ragassay-demo"), ("/proc/ragassay-demo: cannot create the folder",)),
    (("-o", "{tmp}/keep.txt"), ("{tmp}/keep.txt: is an existing file, not a folder; refusing to replace it",)),
    (("-o", "{tmp}/keep.txt/demo"), ("{tmp}/keep.txt/demo:", "is a file, not a folder")),
    (("-o", "{tmp}/mine"), ("{tmp}/mine: folder is not empty and is not an earlier ragassay demo output",)),
    (("--bogus",), ("No such option: --bogus", "see 'ragassay demo --help'")),
], ids=["resamples-small", "resamples-word", "out-proc", "out-is-file", "out-under-file", "out-foreign-folder",
        "unknown-option"])
def test_demo_with_bad_flags(cli, workdir, args, fragments):
    before = tree_digest(workdir)
    res = cli("demo", *(a.replace("{tmp}", str(workdir)) for a in args))
    res.assert_clean_error(*(f.replace("{tmp}", str(workdir)) for f in fragments))
    assert tree_digest(workdir) == before


@pytest.mark.parametrize(("args", "fragments"), [
    (("frobnicate",), ("No such command 'frobnicate'; see 'ragassay --help'",)),
    (("rn",), ("No such command 'rn'. Did you mean 'run', 'runs'?",)),
    (("--frobnicate",), ("No such option: --frobnicate",)),
    (("golden", "frobnicate"), ("No such command 'frobnicate'; see 'ragassay golden --help'",)),
    (("[/bold]",), ("No such command '[/bold]'",)),
], ids=["unknown-command", "typo", "unknown-root-option", "unknown-subcommand", "markup-as-command"])
def test_unknown_commands(cli, args, fragments):
    cli(*args).assert_clean_error(*fragments)


def test_version(cli):
    res = cli("--version")
    assert (res.code, res.out, res.err) == (0, f"{__version__}\n", "")
