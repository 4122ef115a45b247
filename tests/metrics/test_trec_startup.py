"""`ragassay trec` never imports pandas: pyarrow would load it (0.2-0.3 s) on its pandas conversion paths."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import pytrec_eval

from ragassay.metrics.trec import write_qrels, write_run

# Runs the CLI in a fresh interpreter and reports whether pandas was imported on the way.
PROBE = """
import sys
from ragassay.cli.app import main
try:
    main(sys.argv[1:])
except SystemExit as e:
    code = e.code
print("PANDAS" if "pandas" in sys.modules else "NO-PANDAS", code, file=sys.stderr)
"""


def _files(tmp_path, shuffle: bool):
    rng = np.random.default_rng(11)
    nq, depth = 40, 30
    rq = np.repeat([f"q{i}" for i in range(nq)], depth)
    rd = np.array([f"d{rng.integers(0, 200)}x{j}" for j in range(nq * depth)])
    rs = np.round(rng.random(nq * depth), 1)  # ties: the doc-id tie break runs
    order = rng.permutation(len(rq)) if shuffle else np.arange(len(rq))
    lq = [f"q{i}" for i in range(nq + 3) for _ in range(5)]  # three queries the run lacks
    ld = [f"d{rng.integers(0, 200)}x{rng.integers(0, nq * depth)}" for _ in lq]
    keep = sorted({(q, d): i for i, (q, d) in enumerate(zip(lq, ld, strict=True))}.values())
    qrels, run = tmp_path / "qrels.txt", tmp_path / "run.txt"
    write_qrels(qrels, [lq[i] for i in keep], [ld[i] for i in keep], rng.integers(0, 3, len(keep)))
    write_run(run, rq[order], rd[order], rs[order])
    return qrels, run


def _probe(args):
    proc = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, timeout=120)
    return proc.stdout, proc.stderr.strip().splitlines()[-1]


@pytest.mark.slow  # four fresh interpreters (2-5 s)
def test_trec_cli_scores_without_importing_pandas_and_matches_pytrec_eval(tmp_path):
    for shuffle in (False, True):
        qrels, run = _files(tmp_path, shuffle)
        out, status = _probe(["trec", str(qrels), str(run), "-m", "ndcg@10", "-m", "ap", "-m", "bpref",
                              "-m", "RBP(p=0.8)", "-q", "--json"])
        assert status == "NO-PANDAS 0"
        got = json.loads(out)["metrics"]
        with open(qrels) as fq, open(run) as fr:
            ref = pytrec_eval.RelevanceEvaluator(pytrec_eval.parse_qrel(fq), {"ndcg_cut.10", "map", "bpref"})
            res = ref.evaluate(pytrec_eval.parse_run(fr))
        for ours, theirs in (("ndcg@10", "ndcg_cut_10"), ("ap", "map"), ("bpref", "bpref")):
            for q, v in res.items():
                mine = got[ours]["per_query"][q]
                # pytrec_eval reports 0 where ragassay reports undefined (no relevant label)
                assert (mine if mine is not None else 0.0) == v[theirs]
        # the human table too
        _, status = _probe(["trec", str(qrels), str(run), "-m", "ndcg@10"])
        assert status == "NO-PANDAS 0"
