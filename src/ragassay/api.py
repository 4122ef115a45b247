"""The Python API: ``ragassay.evaluate(system, golden=..., corpus=...)`` -> :class:`Run`.

A thin layer over the functions the CLI calls: traces come from the adapters in
:mod:`ragassay.trace.adapters`, are scored and stored by :mod:`ragassay.analysis.runner` (the code path of
``ragassay score``), and a run compares, gates and reports through :mod:`ragassay.analysis.compare`,
:mod:`ragassay.analysis.gate` and :mod:`ragassay.report`. Nothing is computed here that the CLI does not
compute the same way, so a number from a notebook and a number from CI agree.

The store is opened for each operation and closed again (DuckDB allows one writer per file), so a
notebook can keep several :class:`Run` objects and the CLI can read the same store in between.
"""

from __future__ import annotations

import functools
import html
import inspect
import json
import math
import numbers
import os
import secrets
import shutil
import tempfile
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ragassay.errors import InputError

DEFAULT_STORE = "ragassay.duckdb"


# ---------------------------------------------------------------------------------------------- inputs


def _corpus(corpus: Any):
    from ragassay.corpus import Corpus, bundled_corpus_dir, load_corpus

    if isinstance(corpus, Corpus):
        return corpus
    return load_corpus(corpus if corpus is not None else bundled_corpus_dir())


def _golden(golden: Any, corpus):
    from ragassay.golden import GOLDEN_FILE, GoldenSet, build_golden, bundled_golden_source, load_golden

    if isinstance(golden, GoldenSet):
        gs = golden
    else:
        src = Path(golden) if golden is not None else bundled_golden_source()
        gs = load_golden(src) if src.is_dir() and (src / GOLDEN_FILE).exists() else build_golden(src, corpus)
    pinned = gs.manifest.get("corpus_digest")
    if pinned is not None and pinned != corpus.digest:
        raise InputError(f"the golden set was built against corpus {pinned}, but the corpus given has digest "
                         f"{corpus.digest}; pass the corpus it was built from, or rebuild the golden set")
    return gs


def _sniff_file(path: Path) -> str:
    """'traces' (ragassay JSONL), 'ragas' (rows as JSON/JSONL) or 'trec' (a run file), from the first line."""
    if not path.is_file():
        raise InputError(f"{path}: file not found; pass a trace JSONL, RAGAS rows or a TREC run file")
    with path.open("rb") as fh:
        first = b""
        for i, raw in enumerate(fh):
            line = (raw.removeprefix(b"\xef\xbb\xbf") if i == 0 else raw).strip()  # a byte-order mark is allowed
            if line:
                first = line
                break
    if not first:
        raise InputError(f"{path}: file is empty; expected traces, RAGAS rows or a TREC run")
    if first[:1] == b"[":
        return "ragas"
    if first[:1] == b"{":
        try:
            rec = json.loads(first)
        except ValueError:
            # a pretty-printed JSON object spans lines: a column-oriented RAGAS export
            return "ragas"
        return "traces" if isinstance(rec, dict) and "type" in rec else "ragas"
    return "trec"


def _traces_for(system: Any, corpus, golden, *, name: str | None, trials: int, concurrency: int,
                progress: bool):
    """(header, traces, problems) for anything but a trace JSONL file, which the runner reads itself."""
    from ragassay.trace.adapters import traces_from_callable, traces_from_ragas_rows, traces_from_trec_run

    if callable(system):
        run_name = name or getattr(system, "__name__", "callable")
        with _calls_bar(run_name, trials * len(golden.queries), show=progress) as counted:
            return traces_from_callable(counted(system), golden.queries, trials=trials, concurrency=concurrency,
                                        progress=False, run_name=run_name)
    if isinstance(system, (str, Path)):
        kind = _sniff_file(Path(system))
        if kind == "ragas":
            return traces_from_ragas_rows(system, corpus, golden, run_name=name or Path(system).stem)
        return traces_from_trec_run(system, corpus)
    return traces_from_ragas_rows(system, corpus, golden, run_name=name or "ragas-import")


@contextmanager
def _open(store: Any, read_only: bool) -> Iterator[Any]:
    from ragassay.store import Store

    if isinstance(store, Store):
        yield store
        return
    with Store.open(store, read_only=read_only) as st:
        yield st


def _stderr_console():
    """The console progress bars draw on: stderr, so a script's stdout carries only what it prints itself."""
    from rich.console import Console

    return Console(stderr=True)


@contextmanager
def _calls_bar(label: str, total: int, *, show: bool) -> Iterator[Callable[[Callable], Callable]]:
    """A transient bar of a callable system's finished calls on stderr, drawn only when ``show`` and stderr is
    a terminal. Yields ``counted(fn)``: ``fn`` itself when nothing is drawn (its timings untouched), else a
    wrapper that keeps its name, qualified name (the run's config) and sync or ``async`` kind."""
    console = _stderr_console()
    if not (show and console.is_terminal):
        yield lambda fn: fn
        return
    from rich.markup import escape
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), console=console,
                  transient=True) as bar:
        task = bar.add_task(escape(label), total=total)

        def counted(fn: Callable) -> Callable:
            if inspect.iscoroutinefunction(fn):
                async def wrapper(question):
                    try:
                        return await fn(question)
                    finally:
                        bar.advance(task)
            else:
                def wrapper(question):
                    try:
                        return fn(question)
                    finally:
                        bar.advance(task)
            functools.update_wrapper(wrapper, fn)
            wrapper.__qualname__ = getattr(fn, "__qualname__", repr(fn))  # a callable object has none of its own
            return wrapper

        yield counted


def default_traces_dir(store: str | os.PathLike) -> Path:
    """Where a run's traces are kept unless told otherwise: ``<store path without its suffix>.traces`` beside
    the store (``ragassay.duckdb`` -> ``ragassay.traces/``), one ``<run_id>.jsonl`` per run. ``evaluate`` and
    ``ragassay run`` share it, and the run records it in ``extra.traces_dir`` for every reader. A store named
    ``*.traces`` is refused: its traces folder would be the store itself."""
    folder = Path(store).with_suffix(".traces")
    if folder == Path(store):
        raise InputError(f"{store}: a store named *.traces would share its path with its traces folder; name the "
                         "store with another suffix (e.g. .duckdb), or choose the traces folder yourself")
    return folder


def _is_memory(path: Any) -> bool:
    return str(path) == ":memory:"


# an in-memory store's traces folder lives as long as the Store object (and so as every Run holding it)
_MEMORY_TRACES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _traces_home(store: Any, traces_dir: Any) -> Path:
    """The folder this evaluation keeps its traces in (see :func:`evaluate`); a folder that is not new, empty
    or ragassay's traces output is refused before anything runs."""
    from ragassay.fsio import check_output_dir
    from ragassay.store import Store

    if traces_dir is not None:
        folder = Path(traces_dir)
    elif isinstance(store, Store) and _is_memory(store.path):
        if store not in _MEMORY_TRACES:
            _MEMORY_TRACES[store] = tempfile.TemporaryDirectory(prefix="ragassay-traces-")
        return Path(_MEMORY_TRACES[store].name)
    elif isinstance(store, Store):
        folder = default_traces_dir(store.path)
    elif not Path(store).parent.exists():
        # refused here as Store.open refuses it: the traces folder beside the store, made first, would create
        # the missing directory and the store would then open in it
        raise InputError(f"{store}: directory {Path(store).parent} does not exist; create it or choose another path")
    else:
        folder = default_traces_dir(store)
    check_output_dir(folder, "traces")
    return folder


def evaluate(system: Any, *, golden: Any = None, corpus: Any = None, store: Any = DEFAULT_STORE,
             name: str | None = None, trials: int = 1, concurrency: int = 4, options: Any = None,
             allow_pin_mismatch: bool = False, progress: bool = False, traces_dir: Any = None,
             verifier: Any = None, human_fix_cost: float | None = None) -> Run:
    """Score a system against a golden set, store the rows, and return the stored :class:`Run`.

    ``system`` is one of: a callable ``fn(question) -> str | dict | Trace`` (sync or ``async``; it runs
    ``trials`` times per query, ``concurrency`` at once); a path to a ragassay trace JSONL, to RAGAS rows
    (``.json``/``.jsonl``) or to a TREC run file (told apart by their first line); or RAGAS rows in memory
    (a list of dicts or a pandas DataFrame). ``golden`` is a built golden-set folder, an authoring file
    (built on the fly) or a :class:`~ragassay.golden.GoldenSet`; ``corpus`` a folder, a JSONL file or a
    :class:`~ragassay.corpus.Corpus`; both default to the bundled demo data. ``store`` is a DuckDB path or
    an open :class:`~ragassay.store.Store`; ``options`` a :class:`~ragassay.analysis.scoring.ScoringOptions`
    (hit rule, relevance threshold, gain, ties), by default the hit rule, relevance threshold and gain the
    golden set's manifest states. Scoring and storage are exactly ``ragassay score``'s. ``progress`` shows bars on
    stderr when it is a terminal: the calls of a callable system, then the scoring of the traces.

    The traces evaluate makes (from a callable, RAGAS rows or a TREC run) are kept as
    ``<traces_dir>/<run_id>.jsonl`` and recorded with the run, so ``ragassay judge RUN`` and the report's
    per-query view read them; ``traces_dir`` defaults to :func:`default_traces_dir` of the store, and for an
    in-memory store to a temporary folder removed with the Store object. A trace file given as ``system``
    is the run's traces where it is, as for ``ragassay score`` (a ``traces_dir`` with it is refused).

    Agent runs, as ``ragassay score --verifier V --human-fix-cost C``: traces that carry agent steps, or any
    traces with a ``verifier``, also get the agent rows (:func:`ragassay.analysis.agent.score_agent_into_store`;
    the counts in ``run.info["agent"]``). ``verifier`` is ``"module:function"`` or ``"file.py:function"`` (loaded
    as ``--verifier`` loads it), a callable ``f(trace, item)`` or a
    :class:`~ragassay.analysis.agent.PythonVerifier` / :class:`~ragassay.analysis.agent.CommandVerifier`;
    ``human_fix_cost`` (USD per failed task fixed by hand) is pinned for :meth:`Run.agent_report`.
    """
    _check_evaluate_args(golden=golden, corpus=corpus, store=store, name=name, trials=trials,
                         concurrency=concurrency, options=options, allow_pin_mismatch=allow_pin_mismatch,
                         progress=progress, traces_dir=traces_dir, verifier=verifier, human_fix_cost=human_fix_cost)
    # a verifier that does not load is refused before anything runs, as `ragassay score` refuses it
    agent = (_verifier(verifier), None if human_fix_cost is None else float(human_fix_cost))
    if isinstance(system, (str, Path)) and _is_trace_file(Path(system)):
        from ragassay.analysis.stream import reading_ahead

        if traces_dir is not None:
            raise InputError(f"traces_dir={_short(traces_dir)}: a trace file given as the system stays the run's "
                             "traces where it is; leave traces_dir out")

        # a trace file is read while the corpus and golden set load, as `ragassay score` reads it
        with reading_ahead(Path(system)) as ahead:
            return _evaluate(system, golden, corpus, store, name, trials, concurrency, options,
                             allow_pin_mismatch, progress, ahead, None, agent)
    return _evaluate(system, golden, corpus, store, name, trials, concurrency, options, allow_pin_mismatch,
                     progress, None, _traces_home(store, traces_dir), agent)


def _check_evaluate_args(*, golden, corpus, store, name, trials, concurrency, options, allow_pin_mismatch,
                         progress, traces_dir, verifier=None, human_fix_cost=None) -> None:
    """Every keyword argument of :func:`evaluate` has the type it documents, checked before anything is read,
    run or stored; one :class:`InputError` lists every problem, one line each."""
    from ragassay.analysis.agent import CommandVerifier, PythonVerifier
    from ragassay.analysis.scoring import ScoringOptions
    from ragassay.corpus import Corpus
    from ragassay.golden import GoldenSet
    from ragassay.store import Store

    wanted = [
        ("golden", golden, golden is None or _is_path(golden) or isinstance(golden, GoldenSet),
         "a built golden-set folder, an authoring file, a GoldenSet, or None for the bundled set"),
        ("corpus", corpus, corpus is None or _is_path(corpus) or isinstance(corpus, Corpus),
         "a corpus folder, a JSONL file, a Corpus, or None for the bundled corpus"),
        ("store", store, (_is_path(store) and not _is_memory(store)) or isinstance(store, Store),
         "a DuckDB file path or an open Store (for an in-memory store, Store.open(':memory:'): a ':memory:' path "
         "would be gone when evaluate returns)"),
        ("name", name, name is None or (isinstance(name, str) and name.strip() != ""),
         "a non-empty run name, or None for the system's own"),
        ("trials", trials, _is_count(trials), "a positive integer (runs of each query)"),
        ("concurrency", concurrency, _is_count(concurrency), "a positive integer (calls at once)"),
        ("options", options, options is None or isinstance(options, ScoringOptions),
         "a ragassay.analysis.scoring.ScoringOptions (hit rule, relevance threshold, gain, ties), or None for the "
         "golden set's manifest"),
        ("allow_pin_mismatch", allow_pin_mismatch, isinstance(allow_pin_mismatch, bool), "True or False"),
        ("progress", progress, isinstance(progress, bool), "True or False"),
        ("traces_dir", traces_dir, traces_dir is None or _is_path(traces_dir),
         "a folder path for the run's traces, or None for the folder beside the store"),
        ("verifier", verifier, verifier is None or (isinstance(verifier, str) and verifier.strip() != "")
         or isinstance(verifier, (PythonVerifier, CommandVerifier)) or callable(verifier),
         "'module:function' or 'file.py:function', a callable f(trace, item), a PythonVerifier or CommandVerifier "
         "(ragassay.analysis.agent), or None"),
        ("human_fix_cost", human_fix_cost, human_fix_cost is None or _is_number(human_fix_cost, low=0),
         "a cost >= 0 (USD per failed task fixed by hand), or None"),
    ]
    _refuse(wanted)


def _refuse(wanted: Sequence[tuple[str, Any, bool, str]]) -> None:
    """One :class:`InputError` listing every ``(argument, value, ok, what to give)`` that is not ok, one line
    each; nothing when all are."""
    problems = [f"{arg}={_short(value)}: give {want}" for arg, value, ok, want in wanted if not ok]
    if problems:
        raise InputError("\n".join(problems))


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_count(v: Any, low: int = 1) -> bool:
    return _is_int(v) and v >= low


def _is_path(v: Any) -> bool:
    return isinstance(v, (str, os.PathLike)) and str(v) != ""


def _is_number(v: Any, low: float | None = None) -> bool:
    """A finite real number (not a bool), at least ``low`` when given."""
    return (isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v)
            and (low is None or v >= low))


def _verifier(verifier: Any):
    """The verifier ``evaluate`` was given, as ``ragassay score --verifier`` resolves it (None: none)."""
    if verifier is None:
        return None
    from ragassay.analysis.agent import CommandVerifier, PythonVerifier, load_verifier

    if isinstance(verifier, (PythonVerifier, CommandVerifier)):
        return verifier
    if isinstance(verifier, str):
        return load_verifier(verifier)
    spec = f"{getattr(verifier, '__module__', None) or '?'}:{getattr(verifier, '__qualname__', repr(verifier))}"
    return PythonVerifier(verifier, spec)


def _short(value: Any) -> str:
    text = repr(value)
    return (text if len(text) <= 60 else text[:57] + "...") + f" ({type(value).__name__})"


def _is_trace_file(path: Path) -> bool:
    """Whether ``path`` is a ragassay trace JSONL; any problem reading it is left for ``_sniff_file`` to
    raise where it did (after the corpus and golden set, whose errors come first)."""
    try:
        return _sniff_file(path) == "traces"
    except (InputError, OSError):
        return False


def _evaluate(system, golden, corpus, store, name, trials, concurrency, options, allow_pin_mismatch, progress,
              read_ahead, traces_home: Path | None, agent: tuple = (None, None)) -> Run:
    """Score ``system`` into ``store``; traces made here are kept in ``traces_home`` (None: a trace file,
    already on disk, is read where it is). ``agent`` is (verifier, human fix cost): the agent rows are added
    as ``ragassay score`` adds them."""
    from ragassay._progress import scoring_bar
    from ragassay.analysis.runner import score_traces_into_store

    corp = _corpus(corpus)
    gs = _golden(golden, corp)
    if options is None:
        from ragassay.analysis.scoring import ScoringOptions, manifest_gain

        # the golden set's manifest states how its labels are meant to be read (a BEIR import: doc, >= 1, linear)
        options = ScoringOptions(hit_rule=gs.manifest.get("hit_rule") or "any_overlap",
                                 relevance_threshold=gs.manifest.get("relevance_threshold") or 2,
                                 gain=manifest_gain(gs.manifest))
    adapter_problems: list = []
    if read_ahead is not None:  # evaluate found a trace file (anything else is sniffed by _traces_for)
        path = Path(system)
        label = path.name
    else:
        header, traces, adapter_problems = _traces_for(system, corp, gs, name=name, trials=trials,
                                                       concurrency=concurrency, progress=progress)
        label = header.run_name
        path = _write_pending(traces_home, header.model_copy(update={"dataset_version": gs.dataset_version,
                                                                     "corpus_digest": corp.digest}), traces)
    console = _stderr_console()
    try:
        with _open(store, read_only=False) as st, \
                scoring_bar(label, disable=not (progress and console.is_terminal), console=console) as tick:
            run_id, info = score_traces_into_store(st, path, corp, gs, options=options, name=name,
                                                   allow_pin_mismatch=allow_pin_mismatch,
                                                   read_ahead=read_ahead, progress=tick)
            _score_agent(st, run_id, path, gs, info, *agent)
            if read_ahead is None:
                _keep(st, run_id, path, traces_home)
            rec = st.get_run(run_id)
    finally:
        if read_ahead is None:
            path.unlink(missing_ok=True)  # scored and kept (moved away), or refused: nothing half-done stays
    info["adapter_problems"] = [f"{p.line}: {p.message}" for p in adapter_problems]
    return Run(rec, store, info, golden=gs, corpus=corp)


def _score_agent(st, run_id: str, path: Path, gs, info: dict, verifier, human_fix_cost) -> None:
    """The run's agent rows, when its traces carry steps or a verifier is given (``ragassay score``'s step
    after scoring), their counts in ``info["agent"]``."""
    from ragassay.analysis.agent import score_agent_into_store

    got = score_agent_into_store(st, run_id, path, gs, verifier, human_fix_cost=human_fix_cost)
    if got is not None:
        info["agent"] = got


def _write_pending(folder: Path, header, traces) -> Path:
    """The traces, written atomically under a hidden name in ``folder`` until their run has an id."""
    from ragassay.fsio import MARKER_PREFIX, make_dir, mark_output_dir
    from ragassay.trace import write_traces

    make_dir(folder)
    mark_output_dir(folder, "traces")
    path = write_traces(folder / f".evaluate-{secrets.token_hex(8)}.jsonl", header, traces)
    # write_traces leaves mkstemp's 0600; outputs are shared (fsio), so the file takes the mode the marker
    # got from open() under the umask
    shutil.copymode(folder / f"{MARKER_PREFIX}traces", path)
    return path


def _keep(st, run_id: str, pending: Path, folder: Path) -> None:
    """Move the scored traces to ``<folder>/<run_id>.jsonl`` (one rename: a reader sees the whole file or
    none) and record them with the run the way ``ragassay run`` does: ``extra.traces_dir``, and the source
    names the kept file instead of the pending one."""
    from ragassay.analysis.run_record import _update_extra

    kept = folder.resolve() / f"{run_id}.jsonl"
    os.replace(pending, kept)
    _update_extra(st, run_id, {"traces_dir": str(kept.parent)})
    st.connection.execute("UPDATE runs SET source = ? WHERE run_id = ?", [f"traces:{kept}", run_id])


def load_run(ref: str, store: Any = DEFAULT_STORE) -> Run:
    """A stored run by run_id, unique run_id prefix or name (the latest run of that name)."""
    with _open(store, read_only=True) as st:
        return Run(st.get_run(ref), store, {})


# ---------------------------------------------------------------------------------------------- results




def _table_html(head: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    th = "".join(f"<th>{html.escape(str(h))}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>"


@dataclass
class Run:
    """A stored run. Every method reads the store, so the figures are the CLI's for the same run.

    A run made by :func:`evaluate` remembers the ``golden`` set and ``corpus`` it was scored on (the loaded
    objects), and :meth:`report` uses them; a run from :func:`load_run` has neither (the bundled ones are the
    default there)."""

    record: Any
    store: Any = DEFAULT_STORE
    info: dict = field(default_factory=dict)
    golden: Any = field(default=None, repr=False, compare=False)
    corpus: Any = field(default=None, repr=False, compare=False)

    @property
    def run_id(self) -> str:
        return self.record.run_id

    @property
    def name(self) -> str:
        return self.record.name

    @property
    def traces_path(self) -> Path | None:
        """The run's trace JSONL as its readers find it (``judge``, the report's per-query view):
        ``<extra.traces_dir>/<run_id>.jsonl``, else the trace file it was scored from; None if it has none."""
        return self.record.traces_path()

    def __repr__(self) -> str:
        return f"Run({self.name!r}, run_id={self.run_id!r}, n_queries={self.record.n_queries})"

    def to_arrow(self):
        """The run's result rows, one per (query, trial, metric), as a pyarrow Table (undefined = null)."""
        with _open(self.store, read_only=True) as st:
            return st.results(self.run_id)

    def to_pandas(self):
        """:meth:`to_arrow` as a pandas DataFrame (needs pandas)."""
        try:
            import pandas  # noqa: F401
        except ImportError:
            raise InputError("to_pandas needs pandas: pip install pandas (or use to_arrow)") from None
        return self.to_arrow().to_pandas()

    def to_polars(self):
        """:meth:`to_arrow` as a polars DataFrame (needs polars)."""
        try:
            import polars
        except ImportError:
            raise InputError("to_polars needs polars: pip install polars (or use to_arrow)") from None
        return polars.from_arrow(self.to_arrow())

    def summary(self) -> dict:
        """Means per metric (with defined/undefined counts), per stratum, latency percentiles and judged
        fraction: the figures ``ragassay score`` prints."""
        from ragassay.analysis.summary import stored_run_summary

        # one metric at a time: the whole results table of a 100,000-query run is ~1 GB
        with _open(self.store, read_only=True) as st:
            return stored_run_summary(st, self.run_id)

    def metric(self, name: str) -> float:
        """The mean of one metric over its defined rows (NaN when none is defined); ``name`` in any spelling
        :func:`ragassay.metrics.names.canonical_name` knows, e.g. ``nDCG@5``."""
        from ragassay.metrics.names import canonical_name

        want = canonical_name(name)
        for m in self.summary()["metrics"]:
            if m["metric"] == want:
                return m["mean"]
        raise InputError(f"run {self.name} has no metric {want!r}; it has: "
                         f"{', '.join(m['metric'] for m in self.summary()['metrics'])}")

    def compare(self, other: Run | str, *, metrics: Sequence[str] | None = None, min_effect: Any = None,
                n_resamples: int = 10_000, seed: int = 0, rebaseline: bool = False,
                strata: bool = True, missing_as_worst: Sequence[str] = (), labels: Any = None) -> Comparison:
        """Paired comparison with this run as the baseline and ``other`` as the candidate (``ragassay
        compare``): deltas, bootstrap CIs, W/L/T, MDE, BH-adjusted p, claim sentences and the coverage (pairs
        lost per metric, each side's outcome mix, the paired error and refusal rates). ``metrics`` may be
        spelled as ir_measures or trec_eval spell them (``nDCG@final_k``); ``missing_as_worst`` names metrics
        whose one-sided undefined pairs score as the worst value. ``labels`` (``compare --labels``): a PPI labels
        file or loaded :class:`~ragassay.analysis.ppi.PPILabels`; each judge metric it covers gets its
        PPI-corrected difference in :attr:`Comparison.ppi`."""
        from ragassay.analysis.compare import DEFAULT_MIN_EFFECT, compare_runs
        from ragassay.metrics.names import canonical_name

        ppi_labels = _ppi_labels(labels)  # read and checked before the store is opened, as the CLI does
        with _open(self.store, read_only=True) as st:
            comp = compare_runs(st, self.run_id, _ref(other),
                                metrics=[canonical_name(m) for m in metrics] if metrics else None,
                                min_effect=DEFAULT_MIN_EFFECT if min_effect is None else min_effect,
                                n_resamples=n_resamples, seed=seed, rebaseline=rebaseline, strata=strata,
                                missing_worst=[canonical_name(m) for m in missing_as_worst], labels=ppi_labels)
        return Comparison(comp)

    def gate(self, other: Run | str, policy: Any = None, *, rebaseline: bool = False, labels: Any = None):
        """PASS / WARN / FAIL of ``other`` against this run (``ragassay gate``); ``policy`` is a YAML path, a
        :class:`~ragassay.analysis.gate.GatePolicy`, a dict of its fields, or None for the built-in policy.
        The result's ``exit_code`` is the CLI's (1 on FAIL). ``labels`` (``gate --labels``, as for
        :meth:`compare`): a gated judge metric they cover is decided on its PPI-corrected difference; the
        corrected entries are ``result.comparison.ppi``."""
        from ragassay.analysis.gate import GatePolicy, load_policy, run_gate

        if isinstance(policy, dict):
            try:
                pol = GatePolicy.model_validate(policy)
            except Exception as exc:  # pydantic's ValidationError, reported the way a policy file is
                raise InputError(f"gate policy: {exc}") from None
        elif isinstance(policy, GatePolicy):
            pol = policy
        else:
            pol = load_policy(policy)
        ppi_labels = _ppi_labels(labels)
        with _open(self.store, read_only=True) as st:
            return run_gate(st, self.run_id, _ref(other), pol, rebaseline=rebaseline, labels=ppi_labels)

    def report(self, path: str | Path, *others: Run | str, golden: Any = None, corpus: Any = None,
               n_resamples: int = 10_000, labels: Any = None, include: Any = ()) -> Path:
        """Write the self-contained HTML report of this run (the baseline) and ``others`` to folder
        ``path``, as ``ragassay report`` does; returns the path of ``index.html``. ``golden`` and ``corpus``
        default to the ones :func:`evaluate` scored this run on, else to the bundled ones; each run's traces
        are read from the folder recorded with it (the per-query view). ``labels`` (``report --labels``, with
        at least one other run): each comparison shows the PPI-corrected difference of the judge metrics they
        cover. ``include`` (``report --include``, one path or several): saved ``--json`` outputs added as
        sections, their kind read from their keys (docs/report.md). The page and its ``queries.parquet`` are
        :func:`write_report`'s, the body ``ragassay report`` runs."""
        files = [include] if _is_path(include) else include
        _refuse([("include", include, isinstance(files, (list, tuple)) and all(_is_path(f) for f in files),
                  "a saved --json file's path, or a list of them (docs/report.md)")])
        if labels is not None and not others:
            raise InputError("labels= corrects the comparisons' judge metrics: give another run to compare with "
                             "(or use Run.ppi(labels, metric) for one run)")
        corp = _corpus(corpus if corpus is not None else self.corpus)
        gs = _golden(golden if golden is not None else self.golden, corp)
        given = golden is not None or self.golden is not None
        return write_report(self.store, [self.run_id, *(_ref(o) for o in others)], path,
                            inputs=lambda: (corp, gs), given=given, resamples=n_resamples, labels=labels,
                            include=files).path

    def ppi(self, labels: Any, metric: str, against: Run | str | None = None, *, lam: Any = "tuned",
            confidence: float = 0.95) -> dict:
        """``ragassay judge ppi``'s figures: the judge metric ``metric``'s mean of this run corrected by the human
        ``labels`` of a random subsample of its answers (:func:`ragassay.analysis.ppi.run_ppi`), or with
        ``against`` the corrected paired difference ``against`` minus this run
        (:func:`~ragassay.analysis.ppi.paired_ppi`). ``labels`` is a labels JSONL path or a loaded
        :class:`~ragassay.analysis.ppi.PPILabels`; ``lam`` is ``"tuned"`` (PPI++, ``--method tuned``),
        ``"ppi"`` (lam = 1, ``--method ppi``) or a fixed number in [0, 1]. See docs/ppi.md."""
        from ragassay.analysis.ppi import paired_ppi, run_ppi
        from ragassay.metrics.names import canonical_name

        _refuse([
            ("labels", labels, labels is not None, "a PPI labels JSONL path or a PPILabels (docs/ppi.md)"),
            ("metric", metric, isinstance(metric, str) and metric.strip() != "",
             "the judge metric's name (faithfulness, answer_relevance, correctness, ...)"),
            ("against", against, against is None or isinstance(against, Run)
             or (isinstance(against, str) and against != ""), "a Run, a run id, prefix or name, or None"),
            ("lam", lam, lam in ("tuned", "ppi") or _is_number(lam, low=0) and lam <= 1,
             "'tuned' (PPI++), 'ppi' (lam = 1) or a number in [0, 1]"),
            ("confidence", confidence, _is_number(confidence) and 0 < confidence < 1, "a number in (0, 1), e.g. 0.95"),
        ])
        got = _ppi_labels(labels)
        name = canonical_name(metric)
        with _open(self.store, read_only=True) as st:
            if against is None:
                return run_ppi(st, self.run_id, got, name, lam=lam, confidence=confidence)
            return paired_ppi(st, self.run_id, _ref(against), got, name, lam=lam, confidence=confidence)

    def agent_report(self, *others: Run | str, human_fix_cost: float | None = None, n_resamples: int = 2000,
                     seed: int = 0, confidence: float = 0.95, rebaseline: bool = False) -> dict:
        """The dict ``ragassay agent report RUN [OTHER] --json`` prints (:func:`ragassay.analysis.agent.agent_report`):
        task success, partial credit, silent failures, cost per resolved task, p95 wall-clock and per-hop
        sufficiency with bootstrap intervals, the trajectory diagnostics apart; with one other run, the paired
        deltas (other minus this run), refused as ``compare`` refuses runs whose pins differ (the verifier's
        included) unless ``rebaseline``. ``human_fix_cost`` None takes the value pinned at scoring, else 0."""
        from ragassay.analysis.agent import agent_report

        _refuse([
            ("others", others, len(others) <= 1 and all(isinstance(o, (Run, str)) for o in others),
             "at most one other run (a Run or a run id, prefix or name) to compare with"),
            ("human_fix_cost", human_fix_cost, human_fix_cost is None or _is_number(human_fix_cost, low=0),
             "a cost >= 0 (USD per failed task fixed by hand), or None for the value pinned at scoring"),
            ("n_resamples", n_resamples, _is_count(n_resamples, low=100), "an integer >= 100 (bootstrap resamples)"),
            ("seed", seed, _is_count(seed, low=0), "an integer >= 0"),
            ("confidence", confidence, _is_number(confidence) and 0 < confidence < 1, "a number in (0, 1), e.g. 0.95"),
        ])
        with _open(self.store, read_only=True) as st:
            return agent_report(st, [self.run_id, *(_ref(o) for o in others)],
                                human_fix_cost=None if human_fix_cost is None else float(human_fix_cost),
                                n_resamples=n_resamples, seed=seed, confidence=confidence, rebaseline=rebaseline)

    def claims_breakdown(self, *others: Run | str) -> dict:
        """Per run judged for claims (this one, then ``others``): the five-way breakdown of its response claims
        (counts and shares) and the mean, defined and undefined count of each of the eleven claim metrics, as
        the report's Claims section shows them (:func:`ragassay.analysis.claims_diff.claim_breakdowns`).
        A run not judged for claims is refused with the command to run."""
        from ragassay.analysis.claims_diff import claim_breakdowns

        _refuse([("others", others, all(isinstance(o, (Run, str)) for o in others),
                  "Runs or run ids, prefixes or names")])
        with _open(self.store, read_only=True) as st:
            return claim_breakdowns(st, [self.run_id, *(_ref(o) for o in others)])

    def claims_diff(self, other: Run | str, *, excerpt: int = 160) -> dict:
        """The claim-by-claim diff of this run (A) and ``other`` (B): what ``ragassay analyze claims A B --json``
        prints (:func:`ragassay.analysis.claims_diff.claims_diff`); ``excerpt`` characters of supporting text
        per claim (>= 10)."""
        from ragassay.analysis.claims_diff import claims_diff

        _refuse([("other", other, isinstance(other, Run) or (isinstance(other, str) and other != ""),
                  "a Run or a run id, prefix or name"),
                 ("excerpt", excerpt, _is_count(excerpt, low=10), "an integer >= 10 (characters per claim)")])
        with _open(self.store, read_only=True) as st:
            return claims_diff(st, self.run_id, _ref(other), excerpt_chars=excerpt)

    def cost(self, judge: Any = None, project: bool = False, *, tiers: Any = None, tier: str | None = None,
             runs_per_month: int | None = None, labelling_hours: float | None = None,
             hourly_rate: float | None = None, output_tokens: int | None = None,
             min_cached_prefix: int | None = None, golden: Any = None, corpus: Any = None) -> dict:
        """The dict ``ragassay cost RUN --json`` prints for this run (:mod:`ragassay.analysis.eval_cost`): judge
        calls, tokens, spend as paid, the same calls priced sync vs batch with and without the cached prefix
        (at the prices of the ``judge`` config), deterministic-first share, the monthly projection over tier
        ``tier`` of the ``tiers`` file (``runs_per_month``), labelling cost (hours x rate); with ``project``,
        what judging the run's answers with the ``judge`` LLM config would cost (``output_tokens``,
        ``min_cached_prefix``; the prompts rendered from the run's traces with ``golden`` and ``corpus``, by
        default the ones :func:`evaluate` scored it on, else the bundled ones). The same checks as the CLI's,
        with the arguments named as here."""
        from ragassay.analysis.eval_cost import cost_request, eval_cost_report

        _refuse([
            ("judge", judge, judge is None or _is_path(judge), "a judge config YAML path, or None"),
            ("project", project, isinstance(project, bool), "True or False"),
            ("tiers", tiers, tiers is None or _is_path(tiers),
             "a tier file path (ragassay golden status --tiers-out), or None"),
            ("tier", tier, tier is None or (isinstance(tier, str) and tier != ""), "a tier name, or None"),
            ("runs_per_month", runs_per_month, runs_per_month is None or _is_int(runs_per_month),
             "a whole number, or None"),
            ("labelling_hours", labelling_hours, labelling_hours is None or _is_number(labelling_hours),
             "a number of hours, or None"),
            ("hourly_rate", hourly_rate, hourly_rate is None or _is_number(hourly_rate), "USD per hour, or None"),
            ("output_tokens", output_tokens, output_tokens is None or _is_int(output_tokens),
             "a whole number of tokens, or None"),
            ("min_cached_prefix", min_cached_prefix,
             min_cached_prefix is None or _is_int(min_cached_prefix), "a whole number of tokens, or None"),
            ("golden", golden, golden is None or _is_path(golden) or _is_loaded(golden, "golden"),
             "a built golden-set folder, an authoring file, a GoldenSet, or None"),
            ("corpus", corpus, corpus is None or _is_path(corpus) or _is_loaded(corpus, "corpus"),
             "a corpus folder, a JSONL file, a Corpus, or None"),
        ])

        def inputs():
            corp = _corpus(corpus if corpus is not None else self.corpus)
            return corp, _golden(golden if golden is not None else self.golden, corp)

        request = cost_request(judge=judge, tiers=tiers, tier=tier, runs_per_month=runs_per_month,
                               labelling_hours=labelling_hours, hourly_rate=hourly_rate, project=project,
                               output_tokens=output_tokens, min_cached_prefix=min_cached_prefix, golden=golden,
                               corpus=corpus, inputs=inputs, spell=_arg)
        with _open(self.store, read_only=True) as st:
            return eval_cost_report(st, [self.run_id], request)

    def _repr_html_(self) -> str:
        from ragassay.analysis.compare import number_text as _num

        s = self.summary()
        rows = [(m["stage"], m["metric"], _num(m["mean"]), m["n_defined"], m["n_undefined"]) for m in s["metrics"]]
        head = (f"<p><b>{html.escape(self.name)}</b> <code>{html.escape(self.run_id)}</code> · "
                f"{self.record.n_queries} queries · {self.record.trials} trial(s) · dataset "
                f"<code>{html.escape(str(self.record.dataset_version))}</code></p>")
        return head + _table_html(("stage", "metric", "mean", "defined", "undefined"), rows)


def _ref(other: Run | str) -> str:
    return other.run_id if isinstance(other, Run) else str(other)


def check_inputs_match_runs(recs, golden, corpus, *, given: bool) -> None:
    """The golden set and corpus must be the ones every run was scored against (their pins); a report that
    puts one set's questions beside another set's scores would be silently wrong."""
    wrong = [r for r in recs if r.dataset_version != golden.dataset_version or r.corpus_digest != corpus.digest]
    if not wrong:
        return
    lines = [f"run {r.name} ({r.run_id[:10]}…) was scored on dataset {r.dataset_version} / corpus "
             f"{r.corpus_digest}" for r in wrong]
    if given:
        head = (f"the golden set and corpus given are dataset {golden.dataset_version} / corpus {corpus.digest}, "
                f"not the ones the runs were scored on")
        fix = "pass the --golden and --corpus the runs were scored with (golden= and corpus= in Python)"
    else:
        head = (f"runs were scored on dataset {wrong[0].dataset_version} / corpus {wrong[0].corpus_digest}, not "
                f"the bundled set (dataset {golden.dataset_version} / corpus {corpus.digest})")
        fix = "pass --golden and --corpus (golden= and corpus= in Python)"
    raise InputError("\n".join([head, *lines, fix]))


@dataclass(frozen=True)
class WrittenReport:
    """What :func:`write_report` wrote: the page, the per-query Parquet file, the runs and the page's warnings."""

    path: Path
    parquet: Path
    run_ids: list[str]
    warnings: list[str]


def write_report(store: Any, runs: Sequence[str], out: str | Path, *, inputs: Callable[[], tuple[Any, Any]],
                 given: bool, traces_dir: Any = None, resamples: int = 10_000, analysis_resamples: int | None = None,
                 analyses: bool = True, rebaseline: bool = False, labels: Any = None,
                 include: Sequence[Any] = ()) -> WrittenReport:
    """The one body of ``ragassay report`` and :meth:`Run.report`: the page and its per-query Parquet file.

    ``store`` is a path or an open :class:`~ragassay.store.Store`; ``runs`` the run refs, the first the
    baseline; ``inputs()`` returns the (corpus, golden set) the runs were scored on (called while the runs'
    traces are read), checked against the runs' pins (``given``: whether the user named them, for the
    message). ``labels`` (a PPI labels path or loaded labels, two or more runs) and ``include`` (saved
    ``--json`` files) are read before the store is opened, so a bad file fails in milliseconds."""
    from ragassay.analysis.report_data import (
        PARQUET_NAME,
        REPORT_RESAMPLES,
        PrefetchedTraces,
        QueriesParquet,
        build_report_data,
        comparison_resamples,
        read_cached,
        read_runs,
    )
    from ragassay.fsio import atomic_write_bytes
    from ragassay.report.include import load_include

    if labels is not None and len(runs) < 2:
        raise InputError("--labels corrects the comparisons' judge metrics: give two or more runs (or use "
                         "`ragassay judge ppi RUN --labels FILE` for one run)")
    ppi_labels = _ppi_labels(labels)
    included = [load_include(p) for p in include]
    out = Path(out)
    with _open(store, read_only=True) as opened:
        # one pivot of each run's rows serves the comparisons and every section
        st = read_cached(opened)
        recs = [st.get_run(r) for r in runs]
        # the traces are read (mostly Arrow's parse, outside the GIL) while the heavy modules load, the
        # golden set is validated and the comparisons run; nothing below depends on them until the page data
        prefetched = PrefetchedTraces(recs, traces_dir)
        from ragassay.analysis.compare import compare_runs
        from ragassay.report import render_report

        corp, gs = inputs()
        check_inputs_match_runs(recs, gs, corp, given=given)
        # each run's rows are read once (one sort of each run): they give the page's run summaries, the
        # Parquet file (encoded on a thread of its own) and the pivot the comparisons and sections slice
        used = comparison_resamples(resamples, len(gs.queries)) if len(recs) > 1 else resamples
        if len(recs) > 1:
            from ragassay.stats.bootstrap import preload_kernel

            # the compiled bootstrap loads while DuckDB sorts the rows below (it waits outside the interpreter)
            preload_kernel(used * len(gs.queries))
        parquet_rows = QueriesParquet()
        runs_read = read_runs(st, recs, parquet_rows)
        comparisons = [compare_runs(st, recs[0].run_id, r.run_id, n_resamples=used, rebaseline=rebaseline,
                                    labels=ppi_labels)
                       for r in recs[1:]]
        data = build_report_data(st, [r.run_id for r in recs], gs, corp, comparisons=comparisons,
                                 traces_dir=traces_dir, title=f"ragassay report: {', '.join(r.name for r in recs)}",
                                 analyses=analyses,
                                 analysis_resamples=REPORT_RESAMPLES if analysis_resamples is None
                                 else analysis_resamples,
                                 requested_resamples=resamples, prefetched=prefetched, runs_read=runs_read)
        # The page first: a folder holding only a Parquet file would not be recognised as a report next time.
        data["parquet"] = PARQUET_NAME
        if included:
            data["includes"] = included
        path = render_report(data, out)
        warnings = list(data.get("warnings", []))
        del data
        parquet = out / PARQUET_NAME
        atomic_write_bytes(parquet, parquet_rows.finish())
    return WrittenReport(path, parquet, [r.run_id for r in recs], warnings)


def _ppi_labels(labels: Any):
    """A PPI labels file read and checked (``load_ppi_labels``), a loaded ``PPILabels`` as it is, None as None."""
    from ragassay.analysis.ppi import PPILabels, load_ppi_labels

    if labels is None or isinstance(labels, PPILabels):
        return labels
    _refuse([("labels", labels, _is_path(labels),
              "a PPI labels JSONL path, a ragassay.analysis.ppi.PPILabels, or None (docs/ppi.md)")])
    return load_ppi_labels(labels)


def _is_loaded(value: Any, kind: str) -> bool:
    from ragassay.corpus import Corpus
    from ragassay.golden import GoldenSet

    return isinstance(value, GoldenSet if kind == "golden" else Corpus)


_NAMED = object()


def _arg(name: str, value: Any = _NAMED) -> str:
    """An argument as the Python API names it in a message: ``runs_per_month=0``, ``project=True``."""
    return name if value is _NAMED else f"{name}={value!r}"


@dataclass
class Comparison:
    """A paired comparison (:class:`ragassay.analysis.compare.Comparison`) with notebook and Markdown views."""

    result: Any

    @property
    def rows(self) -> list:
        return self.result.rows

    @property
    def claims(self) -> list[str]:
        return self.result.claims

    @property
    def ppi(self) -> list[dict]:
        """The PPI-corrected difference of each judge metric the ``labels`` cover (:func:`ragassay.analysis.ppi.
        paired_ppi`'s dicts, as ``compare --labels --json`` prints them under ``ppi``); empty without labels."""
        return self.result.ppi

    @property
    def coverage(self) -> dict:
        """Golden items, paired keys, each side's outcome mix and the paired error / refusal rate rows."""
        return self.result.coverage

    def coverage_lines(self) -> list[str]:
        """The coverage in words, as ``ragassay compare`` prints it."""
        from ragassay.analysis.compare import coverage_lines

        return coverage_lines(self.result)

    def overall(self, metric: str):
        """The all-strata row of ``metric`` (any spelling :func:`canonical_name` knows), or None."""
        from ragassay.metrics.names import canonical_name

        return self.result.overall(canonical_name(metric))

    def to_dict(self) -> dict:
        return self.result.to_dict()

    def to_markdown(self, **kw: Any) -> str:
        """The comparison as GitHub-flavoured Markdown (``compare --format markdown``)."""
        from ragassay.report.markdown import comparison_markdown

        return comparison_markdown(self.result, **kw)

    def _repr_html_(self) -> str:
        from ragassay.analysis.compare import lost_text
        from ragassay.analysis.compare import number_text as _num

        r = self.result
        rows = [(x.metric, x.stratum, x.n, lost_text(x.missing, x.lost, x.gained, x.filled), _num(x.mean_a),
                 _num(x.mean_b), _num(x.delta, True), f"[{_num(x.ci_low, True)}, {_num(x.ci_high, True)}]",
                 f"{x.wins}/{x.losses}/{x.ties}", x.verdict)
                for x in r.rows]
        head = (f"<p><b>{html.escape(r.run_a.name)}</b> → <b>{html.escape(r.run_b.name)}</b>, "
                f"{r.settings.get('n_resamples', 0):,} paired-bootstrap resamples</p>")
        claims = "".join(f"<li>{html.escape(c)}</li>" for c in r.claims)
        cover = "".join(f"<li>{html.escape(c.strip())}</li>" for c in self.coverage_lines())
        return (head + (f"<ul>{cover}</ul>" if cover else "")
                + _table_html(("metric", "stratum", "n", "lost", "A", "B", "Δ", "CI", "W/L/T", "verdict"), rows)
                + (f"<ul>{claims}</ul>" if claims else ""))


__all__ = ["Comparison", "Run", "evaluate", "load_run"]
