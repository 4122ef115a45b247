"""Fixtures for the reference agent tests: the bundled example (built once), agents, a local CLI app, and the
fake provider server of the judge tests."""

import pytest
import typer
from tests.judges.conftest import fake_provider  # noqa: F401 - re-exported fixture
from typer.testing import CliRunner

from ragassay.corpus.loader import load_corpus
from ragassay.golden.builder import build_golden
from ragassay.pipeline.agent import ReferenceAgent, bundled_agent_dir, load_agent_config


@pytest.fixture(scope="session")
def example():
    d = bundled_agent_dir()
    corpus = load_corpus(d / "corpus")
    return corpus, build_golden(d / "golden.yaml", corpus)


@pytest.fixture(scope="session")
def agents(example):
    corpus, _ = example
    return {name: ReferenceAgent(load_agent_config(name), corpus) for name in ("cheap", "careful")}


@pytest.fixture
def cli():
    """A local app with the `agent` group (and its run/demo commands) and `transcripts`; returns invoke(args)."""
    from ragassay.cli import agent, transcripts

    app = typer.Typer()
    agent.register(app)
    transcripts.register(app)
    runner = CliRunner()

    def invoke(args):
        return runner.invoke(app, [str(a) for a in args])
    return invoke
