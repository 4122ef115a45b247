"""Clean environments (spec section 12.4): each (item, trial) starts in a fresh, empty working directory that
no other trial's files reach, recorded in the trace; a foreign non-empty work folder is refused, ragassay's
own earlier one is wiped."""

import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from ragassay.errors import InputError
from ragassay.pipeline.agent import (
    ANSWER_FILE,
    Workspace,
    fresh_workdir,
    prepare_work_root,
    run_agent,
    work_dir_name,
)
from ragassay.trace.schema import Trace


@dataclass
class Q:
    query_id: str
    question: str = "q?"


class Snooper:
    """An agent that looks for what earlier trials left: its own answer.txt, then the previous trial's."""

    name = "snooper"
    config = {"name": "snooper"}

    def __init__(self):
        self.seen = []

    def solve(self, query, trial, ws):
        before = {"listing": ws.list_files(), "own": ws.read_file(ANSWER_FILE),
                  "entries": sorted(os.listdir(ws.root))}
        try:
            before["previous"] = ws.read_file(f"../{trial - 1}/{ANSWER_FILE}")
        except InputError as e:
            before["previous"] = f"refused: {e}"
        self.seen.append((query.query_id, trial, str(ws.root), before))
        ws.write_file(ANSWER_FILE, f"{query.query_id} trial {trial}\n")
        ws.write_file("notes/scratch.txt", "left behind")
        return Trace(trace_id=f"{query.query_id}-{trial}", query_id=query.query_id, trial=trial,
                     answer="x", outcome="answered", claimed_success=True)


def test_every_trial_starts_empty_and_cannot_see_another_trials_files(tmp_path):
    agent = Snooper()
    _, traces = run_agent(agent, [Q("a"), Q("b")], tmp_path / "run", trials=3)
    assert len(agent.seen) == 6
    for qid, trial, root, before in agent.seen:
        assert before["listing"] == [] and before["entries"] == [] and before["own"] is None
        assert before["previous"].startswith("refused")
        assert Path(root) == (tmp_path / "run" / "work" / qid / str(trial))
    # the traces record where each trial ran, and the end state is there, one per trial
    for t in traces:
        wd = Path(t.meta["workdir"])
        assert wd == (tmp_path / "run" / "work" / t.query_id / str(t.trial)).resolve()
        assert (wd / ANSWER_FILE).read_text() == f"{t.query_id} trial {t.trial}\n"
    assert [(t.query_id, t.trial) for t in traces] == [(q, k) for k in range(3) for q in "ab"]


def test_workspace_refuses_paths_outside_the_trial_directory(tmp_path):
    ws = Workspace(tmp_path / "w")
    for bad in ("../x", "/etc/passwd", "a/../../x", ""):
        with pytest.raises(InputError, match="inside the trial's working directory"):
            ws.read_file(bad)
    assert ws.read_file("missing.txt") is None


def test_a_foreign_non_empty_work_folder_is_refused_and_left_alone(tmp_path):
    work = tmp_path / "run" / "work"
    work.mkdir(parents=True)
    (work / "precious.txt").write_text("mine")
    with pytest.raises(InputError, match="not made by ragassay"):
        run_agent(Snooper(), [Q("a")], tmp_path / "run")
    assert (work / "precious.txt").read_text() == "mine"


def test_ragassays_own_earlier_work_folder_is_wiped_before_a_rerun(tmp_path):
    run_agent(Snooper(), [Q("a"), Q("old")], tmp_path / "run", trials=2)
    agent = Snooper()
    run_agent(agent, [Q("a")], tmp_path / "run", trials=1)
    work = tmp_path / "run" / "work"
    assert sorted(p.name for p in work.iterdir()) == [".ragassay-agent-work", "a"]
    assert sorted(p.name for p in (work / "a").iterdir()) == ["0"]
    assert agent.seen[0][3]["entries"] == []


def test_an_existing_trial_directory_is_an_error_not_reused(tmp_path):
    prepare_work_root(tmp_path / "work")
    fresh_workdir(tmp_path / "work", "a", 0)
    with pytest.raises(InputError, match="already exists"):
        fresh_workdir(tmp_path / "work", "a", 0)


def test_query_ids_that_are_not_plain_folder_names_get_a_hashed_folder(tmp_path):
    assert work_dir_name("fb-01") == "fb-01"
    for qid in ("..", "a/b", "x\\y", ".hidden"):
        name = work_dir_name(qid)
        assert name.startswith("q-") and len(name) == 18
    agent = Snooper()
    run_agent(agent, [Q(".."), Q("a/b")], tmp_path / "run")
    roots = [Path(r) for _, _, r, _ in agent.seen]
    assert all(r.parent.parent == tmp_path / "run" / "work" for r in roots)
    assert roots[0] != roots[1]


def test_trials_must_be_a_positive_whole_number(tmp_path):
    for bad in (0, -1, True, 1.5):
        with pytest.raises(InputError, match="trials"):
            run_agent(Snooper(), [Q("a")], tmp_path / "run", trials=bad)
