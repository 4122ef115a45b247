"""The reference agent: a small deterministic tool-using agent over a corpus, for the agent metrics (spec §12).

Three tools, each call one step of the trace (:class:`~ragassay.trace.schema.Step`):

* ``search(query)`` — the reference pipeline's BM25 branch over sentence chunks; returns the top ``top_k``
  units (a retrieval step with its ``hop``). The model sees each unit's id and a short excerpt.
* ``read(unit)`` — the unit's full text (a tool step; ``result_digest`` is the sha256 of that text).
* ``write_answer(text)`` — writes ``answer.txt`` into the trial's working directory: the end state a
  verifier checks (:func:`verify_answer`), independently of what the agent claims.

The plan is a deterministic rule, no model: a question of one of the forms in :data:`TEMPLATES` names an
anchor entity and a chain of relations ("the birthplace of the founder of X": founder, then birthplace).
Each hop searches, reads units in rank order and extracts the relation's object with a pattern
(:data:`RELATIONS`); that object (the bridge entity) is the subject of the next hop. The agent claims
success (``claimed_success``) when every hop produced an object, so a wrong bridge read from a distractor
is a confident wrong answer: a silent failure. A question no template matches, or a hop whose pattern
matches nothing, ends without an answer (``abstained``) and without the claim.

Two settings make the two bundled configurations differ in cost and accuracy: ``cheap`` searches once per
hop with the question (hop 1) or "bridge + relation words" (later hops), takes the top 3 and accepts the
first pattern match in any sentence; ``careful`` rewrites every hop's query as "subject + relation words",
takes the top 8, accepts a match only when its sentence names the subject (or says "she"/"he" in a unit
that names it) and re-checks each candidate with a second search for subject and object together.

Cost is a model of a tool-using LLM, not a measurement: every tool call is one model turn whose input is
``system_tokens`` plus the whole transcript so far (each earlier call and what it returned) and whose
output is the call itself plus ``call_tokens``; tokens are ``regex-wordpunct-v1`` tokens and the price is
the config's USD per million tokens. With an ``llm`` section the answer text is written by that model from
the units read (through the judge clients, as the ``llm`` generator), and that turn costs what the
provider reports.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ragassay.errors import InputError, SchemaError
from ragassay.fsio import MARKER_PREFIX, make_dir, mark_output_dir
from ragassay.pipeline.tokens import TOKEN_COUNTER_NAME, count_tokens
from ragassay.trace.schema import Citation, RunHeader, Step, Trace, Unit, config_sha, make_trace_id

WORK_KIND = "agent-work"
ANSWER_FILE = "answer.txt"
EXCERPT_CHARS = 80
RESULT_CHARS = 400


# ---- configuration -----------------------------------------------------------------------------------------
class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)


class SearchConfig(_Section):
    top_k: int = Field(default=3, ge=1, le=50, description="units a search returns")
    rewrite: bool = Field(default=False, description="every hop's query is 'subject + relation words'")
    anchored: bool = Field(default=False, description="a fact counts only when its sentence names the subject")
    recheck: bool = Field(default=False, description="confirm each candidate with a search for subject and object")


class CostConfig(_Section):
    system_tokens: int = Field(default=300, ge=0, description="tokens of the system prompt, sent every turn")
    call_tokens: int = Field(default=10, ge=0, description="output tokens of a tool call besides its arguments")
    price_input: float = Field(default=3.0, ge=0, description="USD per million input tokens")
    price_output: float = Field(default=15.0, ge=0, description="USD per million output tokens")


class LLMConfig(_Section):
    provider: Literal["openai", "anthropic"]
    model: str = Field(min_length=1)
    base_url: str | None = Field(default=None, min_length=1)
    max_tokens: int | None = Field(default=None, ge=1)
    price_input: float = Field(ge=0)
    price_output: float = Field(ge=0)


class AgentConfig(_Section):
    name: str = Field(min_length=1)
    chunk_size: int = Field(default=48, ge=8, description="tokens per sentence chunk (at most)")
    search: SearchConfig = Field(default_factory=SearchConfig)
    cost: CostConfig = Field(default_factory=CostConfig)
    llm: LLMConfig | None = None

    def hashed(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


def bundled_agent_dir() -> Path:
    """The bundled multi-hop example: ``corpus/``, ``golden.yaml``, ``configs/``."""
    return Path(str(resources.files("ragassay") / "data" / "agent"))


def bundled_agent_configs() -> list[str]:
    return sorted(p.stem for p in (bundled_agent_dir() / "configs").glob("*.yaml"))


def load_agent_config(ref: str | Path) -> AgentConfig:
    """A bundled configuration by name (``cheap``, ``careful``) or a YAML file; every problem one line."""
    from ragassay.yamlio import load_yaml_node

    path = Path(ref)
    if not path.suffix and not path.exists():
        names = bundled_agent_configs()
        if str(ref) not in names:
            raise InputError(f"agent config {str(ref)!r}: not a file and not a bundled configuration; use one of "
                             f"{', '.join(names)}, or a YAML file")
        path = bundled_agent_dir() / "configs" / f"{ref}.yaml"
    if not path.is_file():
        raise InputError(f"{path}: agent config not found; pass a YAML file or one of "
                         f"{', '.join(bundled_agent_configs())}")
    data, node = load_yaml_node(path, "agent config")
    return parse_agent_config(data, str(path))


def parse_agent_config(data: Any, where: str = "<agent config>") -> AgentConfig:
    if not isinstance(data, dict):
        raise SchemaError(f"{where}: an agent config is a mapping (name, chunk_size, search, cost, llm), got "
                          f"{type(data).__name__}")
    try:
        return AgentConfig.model_validate(data)
    except ValidationError as exc:
        lines = []
        for err in exc.errors():
            path = ".".join(str(p) for p in err["loc"]) or "(top level)"
            msg = "unknown key; remove it or fix its spelling" if err["type"] == "extra_forbidden" else err["msg"]
            lines.append(f"{where}: {path}: {msg}")
        raise SchemaError("\n".join(lines)) from None


# ---- the plan: question templates and relation patterns ------------------------------------------------------
_NAME = r"[A-Z][a-z]+(?: [A-Z][a-z]+)*"


@dataclass(frozen=True)
class Relation:
    """A relation between a subject and an object: the words a search adds, the pattern that reads the object
    after a subject (``{S}``), and extra subject-anchored forms (``a native of``)."""

    words: str
    tail: str
    anchored_forms: tuple[str, ...] = ()

    def loose(self) -> re.Pattern:
        return re.compile(self.tail.format(O=f"(?P<o>{_NAME})"))

    def anchored(self, subject: str) -> list[re.Pattern]:
        s = f"(?i:{re.escape(subject)})"
        obj = f"(?P<o>{_NAME})"
        forms = [f"\\b{s} {self.tail.format(O=obj)}", f"\\b(?:She|He) {self.tail.format(O=obj)}"]
        forms += [f"\\b{s}{form.format(O=obj)}" for form in self.anchored_forms]
        return [re.compile(f) for f in forms]


RELATIONS: dict[str, Relation] = {
    "founder": Relation("founded by", "was founded by {O}"),
    "author": Relation("written by", "was written by {O}"),
    "birthplace": Relation("born", "was born in {O}", (", a native of {O}",)),
    "river": Relation("lies on river", "lies on the {O} river"),
    "headquarters": Relation("headquarters", "has its headquarters in {O}"),
}

# question form -> the relations from the anchor outwards
TEMPLATES: tuple[tuple[re.Pattern, tuple[str, ...]], ...] = (
    (re.compile(r"^On which river lies the birthplace of the founder of (?P<a>.+?)\?$"),
     ("founder", "birthplace", "river")),
    (re.compile(r"^On which river lies the birthplace of the author of (?P<a>.+?)\?$"),
     ("author", "birthplace", "river")),
    (re.compile(r"^On which river lies the town where (?P<a>.+?) has its headquarters\?$"), ("headquarters", "river")),
    (re.compile(r"^In which town was the founder of (?P<a>.+?) born\?$"), ("founder", "birthplace")),
    (re.compile(r"^In which town was the author of (?P<a>.+?) born\?$"), ("author", "birthplace")),
)


def plan(question: str) -> tuple[str, tuple[str, ...]] | None:
    """(anchor entity, relation chain) of a question, or None when no template matches."""
    q = " ".join(question.split())
    for pattern, chain in TEMPLATES:
        m = pattern.match(q)
        if m:
            anchor = m.group("a")
            # "the Hollin Rail Company" in running text; a title's own capital "The" stays
            return (anchor[4:] if anchor.startswith("the ") else anchor), chain
    return None


def _sentences(text: str) -> list[str]:
    return [s for s in re.split(r"(?<=[.!?])\s+", text) if s]


def extract(relation: Relation, subject: str, text: str, anchored: bool) -> str | None:
    """The relation's object read from ``text``: the first match in sentence order. Loose reading takes any
    sentence; anchored reading needs the subject in the sentence (or a pronoun form in a text naming it)."""
    if not anchored:
        m = relation.loose().search(text)
        return m.group("o") if m else None
    named = subject.lower() in text.lower()
    pats = relation.anchored(subject)
    for sent in _sentences(text):
        for i, p in enumerate(pats):
            if i == 1 and not named:
                continue
            m = p.search(sent)
            if m:
                return m.group("o")
    return None


# ---- the workspace ------------------------------------------------------------------------------------------
class Workspace:
    """A trial's working directory; the tools read and write inside it only (no absolute paths, no ``..``)."""

    def __init__(self, root: Path):
        self.root = Path(root)

    def _path(self, name: str) -> Path:
        p = Path(name)
        if p.is_absolute() or ".." in p.parts or not p.parts:
            raise InputError(f"{name!r}: a workspace file is a relative path inside the trial's working directory")
        return self.root / p

    def write_file(self, name: str, text: str) -> Path:
        from ragassay.fsio import atomic_write_text

        path = self._path(name)
        make_dir(path.parent)
        atomic_write_text(path, text)
        return path

    def read_file(self, name: str) -> str | None:
        """The file's text, or None when the trial's directory holds no such file."""
        path = self._path(name)
        return path.read_text(encoding="utf-8") if path.is_file() else None

    def list_files(self) -> list[str]:
        return sorted(p.relative_to(self.root).as_posix() for p in self.root.rglob("*") if p.is_file())


_SAFE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def work_dir_name(query_id: str) -> str:
    """A query id as one safe folder name: itself when it is plain, else ``q-`` and 16 hex digits of its sha256."""
    if _SAFE_ID.match(query_id) and len(query_id) <= 100:
        return query_id
    return "q-" + hashlib.sha256(query_id.encode("utf-8")).hexdigest()[:16]


def prepare_work_root(root: Path) -> None:
    """Make ``root`` (``<run folder>/work``) empty and ours. A folder ragassay made for an earlier run (its
    ``.ragassay-agent-work`` marker) is wiped; any other non-empty folder is refused, since wiping it could
    delete someone's files and keeping it would let a trial see them."""
    root = Path(root)
    if root.is_symlink():
        raise InputError(f"{root}: is a symbolic link; choose another run folder")
    if root.exists():
        if not root.is_dir():
            raise InputError(f"{root}: is a file, not a folder; choose another run folder")
        entries = sorted(e.name for e in root.iterdir())
        if entries:
            if not (root / f"{MARKER_PREFIX}{WORK_KIND}").is_file():
                raise InputError(f"{root}: the agent's working folder exists and was not made by ragassay (it holds "
                                 f"{', '.join(entries[:3])}{', ...' if len(entries) > 3 else ''}); every trial must "
                                 "start empty, so move it away or choose another --out-dir or --name")
            shutil.rmtree(root)
    make_dir(root)
    mark_output_dir(root, WORK_KIND)


def fresh_workdir(root: Path, query_id: str, trial: int) -> Path:
    """``<root>/<query>/<trial>/``, created now and empty: a directory that already exists is an error."""
    path = Path(root) / work_dir_name(query_id) / str(trial)
    make_dir(path.parent)
    try:
        path.mkdir()
    except FileExistsError:
        raise InputError(f"{path}: the working directory of query {query_id!r} trial {trial} already exists; "
                         "two queries share a folder name or the run folder was reused") from None
    return path


# ---- the agent ----------------------------------------------------------------------------------------------
class QueryLike(Protocol):
    query_id: str
    question: str


class Agent(Protocol):
    """What the runner needs of an agent: a name, its config as recorded, and one trial in a workspace."""

    name: str
    config: dict[str, Any]

    def solve(self, query: QueryLike, trial: int, workspace: Workspace) -> Trace: ...


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass
class _Turns:
    """The cost model's running transcript: every turn sends the system prompt and everything so far."""

    cost_cfg: CostConfig
    context: int = 0
    steps: list[Step] = field(default_factory=list)

    def turn(self, call: dict[str, Any], seen: str, step: dict[str, Any], t0: float,
             measured: tuple[int, int, float] | None = None) -> Step:
        c = self.cost_cfg
        call_tokens = count_tokens(json.dumps(call, ensure_ascii=False)) + c.call_tokens
        if measured is None:
            t_in, t_out = c.system_tokens + self.context, call_tokens
            cost = (t_in * c.price_input + t_out * c.price_output) / 1e6
        else:
            t_in, t_out, cost = measured
        self.context += call_tokens + count_tokens(seen)
        s = Step(**step, duration_ms=(time.perf_counter() - t0) * 1000.0, tokens_in=t_in, tokens_out=t_out,
                 cost=round(cost, 10))
        self.steps.append(s)
        return s


class ReferenceAgent:
    """The deterministic reference agent over one corpus (see the module docstring)."""

    def __init__(self, cfg: AgentConfig, corpus: Any, *, generator: Any = None):
        from ragassay.pipeline.config import BM25Config, ChunkerConfig, PipelineConfig
        from ragassay.pipeline.run import Pipeline

        self.cfg = cfg
        self.name = cfg.name
        self.config = cfg.hashed()
        self.config_sha = config_sha(self.config)
        self.corpus = corpus
        pcfg = PipelineConfig(name=f"agent-{cfg.name}", chunker=ChunkerConfig(kind="sentence", size=cfg.chunk_size),
                              bm25=BM25Config(depth=max(cfg.search.top_k, 1)))
        self.pipeline = Pipeline(pcfg, corpus)
        self.chunks = self.pipeline.chunks
        self._by_id = self.pipeline.by_id
        self._generator = generator
        if generator is None and cfg.llm is not None:
            from ragassay.pipeline.config import GeneratorConfig
            from ragassay.pipeline.generator import make_llm_generator

            g = cfg.llm
            self._generator = make_llm_generator(GeneratorConfig(
                kind="llm", provider=g.provider, model=g.model, base_url=g.base_url, max_tokens=g.max_tokens,
                price_input=g.price_input, price_output=g.price_output))

    # -- tools
    def _unit(self, row: int, score: float | None = None, rank: int | None = None) -> Unit:
        c = self.chunks[row]
        return Unit(unit_id=c.unit_id, doc_id=c.doc_id, start=c.start, end=c.end, score=score, rank=rank,
                    text=c.text, tokens=c.tokens)

    def search(self, turns: _Turns, query: str, hop: int) -> list[Unit]:
        t0 = time.perf_counter()
        hits = self.pipeline._bm25(query)[: self.cfg.search.top_k]
        units = [self._unit(i, s, r) for r, (i, s) in enumerate(hits, 1)]
        seen = "\n".join(f"{u.unit_id}: {u.text[:EXCERPT_CHARS]}" for u in units)
        turns.turn({"tool": "search", "query": query}, seen,
                   dict(kind="retrieval", name="search", arguments={"query": query}, query=query, units=units,
                        hop=hop, result_digest=_sha(seen)), t0)
        return units

    def read(self, turns: _Turns, unit: Unit) -> str:
        t0 = time.perf_counter()
        text = self.chunks[self._by_id[unit.unit_id]].text
        turns.turn({"tool": "read", "unit": unit.unit_id}, text,
                   dict(kind="tool", name="read", arguments={"unit": unit.unit_id}, result_digest=_sha(text),
                        result=text[:RESULT_CHARS]), t0)
        return text

    def write_answer(self, turns: _Turns, ws: Workspace, text: str,
                     measured: tuple[int, int, float] | None = None) -> None:
        t0 = time.perf_counter()
        ws.write_file(ANSWER_FILE, text + "\n")
        note = f"wrote {ANSWER_FILE} ({len((text + chr(10)).encode('utf-8'))} bytes)"
        turns.turn({"tool": "write_answer", "text": text}, note,
                   dict(kind="tool", name="write_answer", arguments={"text": text}, result_digest=_sha(note),
                        result=note), t0, measured)

    # -- one hop
    def _hop(self, turns: _Turns, relation: Relation, subject: str, query: str, hop: int,
             read_units: dict[str, Unit], cited: dict[str, Unit]) -> str | None:
        s = self.cfg.search
        for unit in self.search(turns, query, hop):
            if unit.unit_id not in read_units:
                read_units[unit.unit_id] = unit
            text = self.read(turns, unit)
            obj = extract(relation, subject, text, s.anchored)
            if obj is None or obj.lower() == subject.lower():
                continue
            if s.recheck and not self._confirmed(turns, subject, obj, hop):
                continue
            cited.setdefault(unit.unit_id, unit)
            return obj
        return None

    def _confirmed(self, turns: _Turns, subject: str, obj: str, hop: int) -> bool:
        units = self.search(turns, f"{subject} {obj}", hop)
        return any(subject.lower() in (u.text or "").lower() and obj.lower() in (u.text or "").lower()
                   for u in units)

    # -- one trial
    def solve(self, query: QueryLike, trial: int, workspace: Workspace) -> Trace:
        t_all = time.perf_counter()
        turns = _Turns(self.cfg.cost)
        read_units: dict[str, Unit] = {}
        cited: dict[str, Unit] = {}
        meta: dict[str, Any] = {"agent": self.name}
        answer: str | None = None
        outcome = "abstained"
        error = None
        gen_details = None
        try:
            planned = plan(query.question)
            if planned is None:
                meta["stopped"] = "no question template matches"
                self.search(turns, query.question, 1)
            else:
                anchor, chain = planned
                meta["plan"] = {"anchor": anchor, "relations": list(chain)}
                subject, bridges = anchor, []
                for hop, rel_name in enumerate(chain, 1):
                    rel = RELATIONS[rel_name]
                    q = (f"{subject} {rel.words}" if (self.cfg.search.rewrite or hop > 1) else query.question)
                    obj = self._hop(turns, rel, subject, q, hop, read_units, cited)
                    if obj is None:
                        meta["stopped"] = f"hop {hop} ({rel_name} of {subject}): no unit stated it"
                        break
                    bridges.append(obj)
                    subject = obj
                else:
                    answer = bridges[-1]
                meta["bridges"] = bridges[:-1] if answer is not None else bridges
            if answer is not None:
                measured = None
                if self._generator is not None:
                    t_gen = time.perf_counter()
                    gen = self._generator.generate(query.question, list(read_units.values()))
                    gen_details = {"generator": self._generator.name, "outcome": gen.outcome,
                                   "ms": (time.perf_counter() - t_gen) * 1000.0}
                    measured = (gen.tokens_in, gen.tokens_out, gen.cost)
                    answer = gen.answer.strip() if gen.outcome == "answered" and gen.answer else None
                    if gen.outcome in ("refused", "error"):
                        outcome = gen.outcome
                        error = str(gen.details.get("reason") or "generation failed") if gen.outcome == "error" \
                            else None
                if answer is not None:
                    self.write_answer(turns, workspace, answer, measured)
                    outcome = "answered"
                elif outcome == "abstained":
                    meta["stopped"] = "the model did not write an answer"
        except Exception as exc:  # noqa: BLE001 - one failing item must not end a run; it is recorded
            outcome, error, answer = "error", f"{type(exc).__name__}: {exc}", None
        if gen_details is not None:
            meta["llm"] = gen_details
        steps = turns.steps
        packed = list(read_units.values())
        total_ms = (time.perf_counter() - t_all) * 1000.0
        return Trace(
            trace_id=make_trace_id(self.config_sha, query.query_id, trial), query_id=query.query_id, trial=trial,
            question=query.question, packed=packed, packed_tokens=sum(u.tokens or 0 for u in packed),
            answer=answer, citations=[Citation(unit_id=u.unit_id, doc_id=u.doc_id) for u in cited.values()]
            if answer is not None else [],
            outcome=outcome, error=error, durations_ms={"agent": total_ms, "total": total_ms},
            tokens_in=sum(s.tokens_in or 0 for s in steps), tokens_out=sum(s.tokens_out or 0 for s in steps),
            cost=round(sum(s.cost or 0.0 for s in steps), 10), steps=steps,
            claimed_success=outcome == "answered", meta=meta)


# ---- the runner ---------------------------------------------------------------------------------------------
def run_agent(agent: Agent, queries: Iterable[QueryLike], run_dir: str | Path, *, trials: int = 1,
              run_name: str | None = None, corpus_digest: str | None = None, dataset_version: str | None = None,
              progress: Callable[[int, int], None] | None = None) -> tuple[RunHeader, list[Trace]]:
    """Run every (query, trial) in its own fresh working directory ``<run_dir>/work/<query>/<trial>/``.

    The work folder is prepared by :func:`prepare_work_root` (an earlier ragassay work folder is wiped; a
    foreign non-empty one is refused); each trial's directory is created empty just before the trial and its
    path recorded in ``trace.meta["workdir"]``. Traces come in (trial, query) order.
    """
    if not isinstance(trials, int) or isinstance(trials, bool) or trials < 1:
        raise InputError(f"trials {trials!r}: give a whole number >= 1")
    queries = list(queries)
    root = Path(run_dir) / "work"
    prepare_work_root(root)
    out: list[Trace] = []
    total = len(queries) * trials
    for trial in range(trials):
        for q in queries:
            wd = fresh_workdir(root, q.query_id, trial)
            trace = agent.solve(q, trial, Workspace(wd))
            out.append(trace.model_copy(update={"meta": {**trace.meta, "workdir": str(wd.resolve())}}))
            if progress is not None:
                progress(len(out), total)
    header = RunHeader(run_name=run_name or agent.name, source="reference-agent", config=dict(agent.config),
                       corpus_digest=corpus_digest, dataset_version=dataset_version,
                       token_counter=TOKEN_COUNTER_NAME, stats={"trials": trials, "queries": len(queries)})
    return header, out


# ---- the bundled example's verifier ---------------------------------------------------------------------------
def _norm(text: str) -> str:
    t = " ".join(re.sub(r"[^\w\s]", " ", text.casefold()).split())
    t = t.removeprefix("the ").removesuffix(" river")
    return t


def bridges_of(item: Any) -> list[str]:
    """The bridge entities an item names in its ``bridge:<Name_With_Underscores>`` tags."""
    return [t.removeprefix("bridge:").replace("_", " ") for t in getattr(item, "tags", []) if t.startswith("bridge:")]


def verify_answer(trace: Trace, item: Any) -> dict[str, Any]:
    """The bundled example's verifier: the end state, not the agent's claim.

    ``final-answer``: ``answer.txt`` in the trial's working directory (``trace.meta["workdir"]``) equals the
    item's reference answer once both are case-folded, stripped of punctuation, a leading "the" and a
    trailing "river". ``found-entity``: every bridge entity of the item's ``bridge:`` tags appears in some
    search query or read result of the trace. Success is ``final-answer``.
    """
    workdir = (trace.meta or {}).get("workdir")
    written = None
    if workdir:
        path = Path(workdir) / ANSWER_FILE
        written = path.read_text(encoding="utf-8") if path.is_file() else None
    reference = getattr(item, "reference_answer", None)
    final = written is not None and reference is not None and _norm(written) == _norm(reference)
    seen = " ".join((s.query or "") + " " + (s.result or "") for s in trace.steps).casefold()
    found = all(b.casefold() in seen for b in bridges_of(item))
    return {"success": bool(final), "subgoals": {"found-entity": bool(found), "final-answer": bool(final)}}


def verdicts(traces: Sequence[Trace], golden: Any,
             verifier: Callable[[Trace, Any], Any] = verify_answer) -> list[dict[str, Any]]:
    """``verifier(trace, item)`` per trace, as ``{"success", "subgoals"}`` (a bare bool has no subgoals)."""
    out = []
    for t in traces:
        v = verifier(t, golden[t.query_id])
        out.append(v if isinstance(v, dict) else {"success": bool(v), "subgoals": {}})
    return out
