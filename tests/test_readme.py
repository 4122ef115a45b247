"""The README's claims that code can check: the quick start is the tested example, every command it shows
exists, and every page it links exists."""

import re
from pathlib import Path

from ragassay.cli.app import COMMANDS

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def test_quick_start_block_is_the_tested_example():
    block = re.search(r"## Python quick start\n\n```python\n(.*?)```", README, re.S).group(1)
    example = (ROOT / "examples" / "quickstart.py").read_text(encoding="utf-8").split("\n", 1)[1]
    assert block.strip() == example.strip()


def test_every_command_in_the_usage_block_exists():
    usage = re.search(r"## Using it\n\n```bash\n(.*?)```", README, re.S).group(1)
    used = {line.split()[1] for line in usage.splitlines() if line.startswith("ragassay ")}
    assert used and used <= set(COMMANDS), used - set(COMMANDS)


def test_every_linked_doc_exists():
    links = set(re.findall(r"\]\((docs/[^)]+\.md)\)", README))
    assert links and all((ROOT / link).is_file() for link in links)
    assert {f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md")} <= links  # and every page is linked


def test_the_gate_example_fails_a_candidate_that_errors_on_half_the_questions(tmp_path, capsys):
    """The README's gate block, run on the quick start's pipeline and a copy that fails on every other question:
    FAIL, exit 1, and the lines the README quotes (error rate and lost pairs)."""
    import pytest

    import ragassay
    from ragassay.cli.app import main
    from ragassay.corpus import bundled_corpus_dir, load_corpus

    policy = re.search(r"## The gate in CI\n\n```yaml\n(.*?)```", README, re.S).group(1)
    (tmp_path / "gate.yaml").write_text(policy, encoding="utf-8")
    quoted = re.search(r"## The gate in CI\n.*?\n```\n(gate FAIL.*?)```", README, re.S).group(1)
    corpus = load_corpus(bundled_corpus_dir())
    lowered = {d.doc_id: d.text.lower() for d in corpus.docs.values()}

    def rag(question: str) -> dict:
        words = set(question.lower().split())
        top = sorted(lowered, key=lambda doc_id: -sum(w in lowered[doc_id] for w in words))[:5]
        units = [{"unit_id": d, "doc_id": d, "start": 0, "end": len(corpus.docs[d].text)} for d in top]
        return {"fused": units, "packed": units, "answer": corpus.docs[top[0]].text[:300], "outcome": "answered"}

    calls = iter(range(10**6))

    def flaky(question: str) -> dict:
        if next(calls) % 2:
            raise RuntimeError("upstream timeout")
        return rag(question)

    store = tmp_path / "s.duckdb"
    ragassay.evaluate(rag, corpus=corpus, store=store, name="top5")
    ragassay.evaluate(flaky, corpus=corpus, store=store, name="candidate")
    with pytest.raises(SystemExit) as e:
        main(["gate", "top5", "candidate", "--policy", str(tmp_path / "gate.yaml"), "--store", str(store)])
    out = " ".join(capsys.readouterr().out.split())
    assert e.value.code == 1
    for line in quoted.strip().splitlines():
        head, _, tail = " ".join(line.split()).partition("(...)")
        assert head in out, head
        assert tail.strip() in out, tail


def test_every_subcommand_and_option_in_the_usage_block_exists():
    import shlex

    import click
    import typer

    from ragassay.cli.app import app

    group = typer.main.get_command(app)
    usage = re.search(r"## Using it\n\n```bash\n(.*?)```", README, re.S).group(1)
    checked = 0
    for line in usage.splitlines():
        if not line.startswith("ragassay ") or "|" in line.split("#")[0]:
            continue
        argv = shlex.split(line.split("  #")[0])[1:]
        cmd = group.load(argv[0]) if argv[0] in COMMANDS else None
        assert cmd is not None, line
        rest = argv[1:]
        ctx = click.Context(cmd)
        while hasattr(cmd, "list_commands") and rest and rest[0] in cmd.list_commands(ctx):
            cmd, rest = cmd.get_command(ctx, rest[0]), rest[1:]
            ctx = click.Context(cmd)
        if type(cmd).__name__ == "_ScoreByDefault":  # `ragassay judge RUN ...` is `ragassay judge score RUN ...`
            cmd = cmd.get_command(ctx, "score")
        known = {o for p in cmd.params for o in p.opts}
        used = {w.split("=")[0] for w in rest if w.startswith("-")}
        assert used <= known, (line, used - known)
        checked += 1
    assert checked >= 40
