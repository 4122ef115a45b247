"""`ragassay doctor`: is this environment and this project set up to give numbers one can trust?

Each check is a PASS / WARN / FAIL line with the fix. Environment: Python and package versions, the optional
extras, writable working folder, Chromium for the report's browser test. Project (when given): the store's
schema version; a golden set's pins against a corpus (corpus digest), its hit rule, whether it has negative
queries (spec §17: a set without unanswerable questions cannot measure abstention), whether it is older than
the corpus files; the runs in the store that were single-trial. Exit codes like ``gate``: 0 when nothing
FAILs, 1 on a FAIL, 2 on bad input.
"""

from __future__ import annotations

import datetime as dt
import importlib.metadata as md
import os
import shutil
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import typer
from rich.text import Text

from ragassay.cli.common import EXIT_FAIL, console, print_json

EXTRAS = {"dense": ["torch", "sentence-transformers"], "llm": ["anthropic", "openai"], "ray": ["ray"],
          "dev": ["pytest", "pytrec-eval-terrier", "ir-measures", "ranx", "opentelemetry-sdk"]}
CORE = ["numpy", "scipy", "duckdb", "pyarrow", "pydantic", "typer", "rich"]
CHROMIUM = ("chromium", "chromium-browser", "google-chrome", "headless_shell")


@dataclass
class Check:
    area: str
    verdict: str  # PASS | WARN | FAIL
    detail: str
    fix: str = ""


def _version(dist: str) -> str | None:
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return None


def environment_checks(workdir: Path) -> list[Check]:
    out = []
    py = sys.version_info
    out.append(Check("python", "PASS" if py >= (3, 11) else "FAIL", f"Python {py.major}.{py.minor}.{py.micro}",
                     "" if py >= (3, 11) else "install Python 3.11 or newer"))
    missing = [d for d in CORE if _version(d) is None]
    out.append(Check("core packages", "FAIL" if missing else "PASS",
                     ", ".join(f"{d} {_version(d)}" for d in CORE if d not in missing)
                     + (f"; missing {', '.join(missing)}" if missing else ""),
                     "pip install ragassay (with -c constraints.txt)" if missing else ""))
    for extra, dists in EXTRAS.items():
        absent = [d for d in dists if _version(d) is None]
        out.append(Check(f"extra [{extra}]", "WARN" if absent else "PASS",
                         "installed" if not absent else f"missing {', '.join(absent)}",
                         f"pip install 'ragassay[{extra}]' if you need it" if absent else ""))
    try:
        with tempfile.NamedTemporaryFile(dir=workdir, prefix=".ragassay-doctor-"):
            pass
        out.append(Check("working folder", "PASS", f"{workdir} is writable"))
    except OSError as e:
        out.append(Check("working folder", "FAIL", f"{workdir}: {e.strerror}", "run from a folder you can write to"))
    browser = next((shutil.which(b) for b in CHROMIUM if shutil.which(b)), None)
    if browser is None:
        cache = Path(os.environ.get("PLAYWRIGHT_BROWSERS_PATH", Path.home() / ".cache" / "ms-playwright"))
        browser = next((str(p) for p in cache.glob("chromium*")), None) if cache.is_dir() else None
    out.append(Check("chromium", "PASS" if browser else "WARN", browser or "no headless Chromium found",
                     "" if browser else "only the report's browser test needs it: apt-get install chromium"))
    return out


def store_checks(path: Path) -> list[Check]:
    from ragassay.errors import RagassayError
    from ragassay.store import SCHEMA_VERSION, Store

    if not path.exists():
        return [Check("store", "WARN", f"{path} does not exist yet", "it is created by the first run or score")]
    try:
        with Store.open(path, read_only=True) as st:
            runs = st.list_runs()
    except RagassayError as e:
        return [Check("store", "FAIL", str(e).splitlines()[0], "see the message; `ragassay export` then a new store")]
    out = [Check("store", "PASS", f"{path}: schema version {SCHEMA_VERSION}, {len(runs)} run(s)")]
    single = [r.name for r in runs if r.trials == 1 and r.source == "pipeline"]
    if single:
        out.append(Check("trials", "WARN", f"{len(single)} pipeline run(s) with one trial: {', '.join(single[:5])}",
                         "a stochastic pipeline needs --trials >= 3 to separate its noise from a change (§17)"))
    return out


def golden_checks(golden: Path, corpus: Path | None) -> list[Check]:
    from ragassay.corpus import load_corpus
    from ragassay.golden import load_golden

    gs = load_golden(golden)
    m = gs.manifest
    out = [Check("golden set", "PASS", f"{golden}: {len(gs)} queries, dataset {gs.dataset_version}")]
    out.append(Check("hit rule", "PASS" if m.get("hit_rule") else "FAIL", f"hit rule {m.get('hit_rule')!r}",
                     "" if m.get("hit_rule") else "rebuild the golden set: the manifest must state its hit rule"))
    neg = sum(not q.answerable for q in gs.queries)
    out.append(Check("negative queries", "PASS" if neg else "WARN", f"{neg} of {len(gs)} unanswerable",
                     "" if neg else "add unanswerable questions, or abstention and over-refusal go unmeasured (§17)"))
    if corpus is not None:
        corp = load_corpus(corpus)
        ok = m.get("corpus_digest") == corp.digest
        out.append(Check("pins", "PASS" if ok else "FAIL",
                         f"golden corpus digest {m.get('corpus_digest')} vs corpus {corp.digest}",
                         "" if ok else "rebuild the golden set against this corpus (ragassay golden build)"))
        built = m.get("built_at")
        files = [p for p in Path(corpus).rglob("*") if p.is_file()] if Path(corpus).is_dir() else [Path(corpus)]
        newest = max((p.stat().st_mtime for p in files), default=None)
        if built and newest is not None:
            built_ts = dt.datetime.fromisoformat(built.replace("Z", "+00:00")).timestamp()
            stale = newest > built_ts and not ok
            out.append(Check("freshness", "WARN" if stale else "PASS",
                             "corpus files changed after the golden set was built" if stale
                             else "golden set built against the current corpus",
                             "rebuild and re-review the golden set" if stale else ""))
    return out


def doctor(
    store: Path = typer.Option(Path("ragassay.duckdb"), "--store", help="DuckDB results file to check."),
    golden: Path = typer.Option(None, "--golden", help="Built golden-set folder to check."),
    corpus: Path = typer.Option(None, "--corpus", help="Corpus to check the golden set's pins against."),
    json_out: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Check the environment (versions, extras, writable folder, Chromium) and, when given, the store's schema,
    a golden set's pins against a corpus, its hit rule and negative queries: PASS / WARN / FAIL with a fix.

    Exit code 0 unless a check FAILs (1); 2 on bad input."""
    checks = environment_checks(Path.cwd()) + store_checks(store)
    if golden is not None:
        checks += golden_checks(golden, corpus)
    verdict = "FAIL" if any(c.verdict == "FAIL" for c in checks) else "WARN" if any(
        c.verdict == "WARN" for c in checks) else "PASS"
    if json_out:
        print_json({"verdict": verdict, "checks": [asdict(c) for c in checks]})
    else:
        colour = {"PASS": "green", "WARN": "yellow", "FAIL": "red"}
        for c in checks:
            line = Text(f"{c.verdict:4}", style=colour[c.verdict]) + Text(f" {c.area}: {c.detail}")
            if c.fix:
                line += Text(f" — fix: {c.fix}", style="dim")
            console.print(line)
        console.print(Text("doctor ") + Text(verdict, style=f"bold {colour[verdict]}"))
    if verdict == "FAIL":
        raise typer.Exit(EXIT_FAIL)


def register(app: typer.Typer) -> None:
    app.command("doctor")(doctor)
