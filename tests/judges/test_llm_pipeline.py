"""A pipeline config with `generator: {kind: llm}` really generates through the provider (never silently
extractive), and a provider failure becomes an `error` trace that says why."""

from types import SimpleNamespace

import pytest

from ragassay.corpus import Corpus, Document
from ragassay.pipeline import Pipeline

DOCS = {"gpl": "Copyleft licenses.\n\nThe GNU General Public License requires that modified versions be "
               "distributed under the same license. This is called copyleft.",
        "mit": "Permissive licenses.\n\nThe MIT license permits reuse within proprietary software provided "
               "that the copyright notice is included."}


def _config(provider, server):
    return {"chunker": {"kind": "sentence", "size": 30},
            "generator": {"kind": "llm", "provider": provider, "model": "gen-m", "base_url": server.base_url,
                          "max_tokens": 64, "price_input": 1.0, "price_output": 2.0}}


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_llm_config_generates_through_the_provider(provider, fake_provider, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY" if provider == "openai" else "ANTHROPIC_API_KEY", "sk-test")
    seen = []

    def respond(system, user):
        seen.append(user)
        return {"justification": "scripted", "cannot_judge": False, "answer": "It is called copyleft.",
                "cited_units": [1]}

    fake_provider.responder = respond
    corpus = Corpus([Document.from_raw(k, v) for k, v in DOCS.items()])
    pipe = Pipeline.from_config(_config(provider, fake_provider), corpus)
    assert pipe.stats["generator"] == f"llm:{provider}:gen-m"
    tr = pipe.run_query(SimpleNamespace(query_id="q", question="What is copyleft?"))
    assert (tr.outcome, tr.answer) == ("answered", "It is called copyleft.")
    assert len(seen) == 1 and "What is copyleft?" in seen[0]
    assert [c.unit_id for c in tr.citations] == [tr.packed[0].unit_id]
    assert tr.cost > 0 and tr.tokens_out == 50


def test_a_failed_generation_is_an_error_trace_with_its_reason(fake_provider, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    fake_provider.item_of = lambda user: "bad"
    fake_provider.plan = {"bad": ["400"]}
    corpus = Corpus([Document.from_raw(k, v) for k, v in DOCS.items()])
    pipe = Pipeline.from_config(_config("openai", fake_provider), corpus)
    tr = pipe.run_query(SimpleNamespace(query_id="q", question="What is copyleft?"))
    assert tr.outcome == "error" and tr.answer is None
    assert tr.error and "400" in tr.error
