"""`score` over several trace files on a real local Ray cluster stores what local scoring stores."""

import pytest
from tests.scale.conftest import rows

from ragassay.analysis.demo import demo_config_dir
from ragassay.analysis.partitions import score_files_into_store
from ragassay.analysis.runner import load_inputs, run_pipeline_into_store
from ragassay.executors import get_executor
from ragassay.store import Store

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def trace_files(tmp_path_factory):
    corpus, golden = load_inputs(None, None)
    out = tmp_path_factory.mktemp("traces")
    with Store.open(out / "made.duckdb") as st:
        for name in ("bm25", "hybrid_rerank", "oracle"):
            run_pipeline_into_store(st, demo_config_dir() / f"{name}.yaml", corpus, golden,
                                    traces_dir=out / name)
    files = sorted(out.glob("*/*.jsonl"))
    assert len(files) == 3
    return corpus, golden, files


def _scored(store, runs):
    return [(store.get_run(r).name, store.get_run(r).extra, rows(store, r),
             store.query_status(r).drop_columns(["run_id", "written_at"]).to_pylist()) for r, _ in runs]


def test_score_of_several_files_on_ray_equals_local_scoring(tmp_path, trace_files, ray_cluster):
    corpus, golden, files = trace_files
    with Store.open(tmp_path / "local.duckdb") as st:
        local = score_files_into_store(st, files, corpus, golden, batch_size=100)
        want = _scored(st, local)
    ex = get_executor("ray")
    try:
        with Store.open(tmp_path / "ray.duckdb") as st:
            dist = score_files_into_store(st, files, corpus, golden, batch_size=100, executor=ex)
            got = _scored(st, dist)
            assert all(st.get_run(r).status == "complete" for r, _ in dist)
    finally:
        ex.close()
    assert [i["n_traces"] for _, i in dist] == [i["n_traces"] for _, i in local] == [171, 171, 171]
    assert [g[0] for g in got] == ["bm25", "hybrid_rerank", "oracle"]
    assert got == want
    assert sum(len(g[2]) for g in got) > 3 * 171 * 9


def _cli(args, capsys):
    from ragassay.cli.app import main

    with pytest.raises(SystemExit) as e:
        main(args)
    captured = capsys.readouterr()
    return (e.value.code or 0), captured.out, captured.err


def test_cli_score_and_run_on_ray_store_the_local_numbers(tmp_path, trace_files, ray_cluster, capsys):
    import json

    from ragassay.golden import build_golden, bundled_golden_source

    corpus, golden, files = trace_files
    gdir = tmp_path / "golden"
    build_golden(bundled_golden_source(), corpus, gdir)
    db = str(tmp_path / "cli.duckdb")
    code, out, _ = _cli(["score", *map(str, files[:2]), "--golden", str(gdir), "--store", db, "--executor", "ray",
                         "--json"], capsys)
    assert code == 0
    runs = json.loads(out)["runs"]
    assert [r["run"]["name"] for r in runs] == ["bm25", "hybrid_rerank"]
    code, out, _ = _cli(["score", str(files[0]), "--golden", str(gdir), "--store", db, "--name", "bm25_local",
                         "--json"], capsys)
    assert code == 0
    code, out, _ = _cli(["run", str(demo_config_dir() / "bm25.yaml"), "--store", db, "--name", "bm25_ray_run",
                         "--executor", "ray", "--json"], capsys)
    assert code == 0
    with Store.open(db, read_only=True) as st:
        assert rows(st, runs[0]["run"]["run_id"]) == rows(st, "bm25_local")
        assert rows(st, "bm25_ray_run") == rows(st, "bm25_local")


def test_cli_refuses_an_unknown_executor_before_loading_anything(tmp_path, capsys):
    code, _, err = _cli(["run", str(demo_config_dir() / "bm25.yaml"), "--store", str(tmp_path / "x.duckdb"),
                         "--executor", "spark"], capsys)
    assert code == 2 and "--executor 'spark': use local, ray" in err
    assert not (tmp_path / "x.duckdb").exists()
