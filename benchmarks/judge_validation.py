"""Time `judge validate` on the bundled calibration set with each local judge (target: 240 items <= 5 s).

Measures the library path the CLI runs (load labels, judge every item, every figure with 2,000 bootstrap
resamples) without interpreter start-up. Run: .venv/bin/python benchmarks/judge_validation.py [--items N]

``--tiny`` judges the first 60 items: a smoke run for CI (tests/test_benchmarks_run.py), whose figures mean
nothing.
"""

import argparse
import time

from ragassay.judges.config import JudgeConfig
from ragassay.judges.labels import bundled_labels, load_labels
from ragassay.judges.validate import run_judge, validate_judgements


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--items", type=int, default=None, help="judge the first N items (default: all)")
    ap.add_argument("--tiny", action="store_true", help="the first 60 items (CI)")
    args = ap.parse_args()
    if args.tiny:
        args.items = 60
    path = bundled_labels()
    if path is None:
        raise SystemExit("no bundled labels in this checkout")
    for model in ("lexical", "embedding"):
        t0 = time.perf_counter()
        items = load_labels(path).items[: args.items]
        cfg = JudgeConfig(provider="local", model=model, metrics=["faithfulness"])
        judged, _ = run_judge(cfg, items)
        t1 = time.perf_counter()
        f = validate_judgements(items, judged)
        t2 = time.perf_counter()
        print(f"{model:9s} {len(items)} items: judge {t1 - t0:.2f} s, figures {t2 - t1:.2f} s, total "
              f"{t2 - t0:.2f} s (target 5 s); kappa {f['kappa']['value']:.3f}")


if __name__ == "__main__":
    main()
