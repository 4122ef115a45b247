"""The `llm` generator of the reference pipeline through the real SDKs, against the fake provider."""

import pytest

from ragassay.errors import InputError
from ragassay.pipeline.config import GeneratorConfig
from ragassay.pipeline.generator import LLM_SYSTEM, make_llm_generator
from ragassay.trace.schema import Unit

PACKED = [Unit(unit_id="c1", doc_id="MIT", start=0, end=20, text="Permission is granted"),
          Unit(unit_id="c2", doc_id="GPL-3", start=5, end=30, text="Section 6 covers conveying")]


def cfg(provider, server):
    return GeneratorConfig(kind="llm", provider=provider, model="gen-m", base_url=server.base_url, max_tokens=128,
                           price_input=1.0, price_output=2.0)


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_llm_generator_answers_cites_abstains_and_refuses(provider, fake_provider):
    answers = {"Which section?": {"answer": "Section 6.", "cited_units": [2, 2, 9]},
               "Unknown?": {"answer": "", "cited_units": []}}

    def respond(system, user):
        assert system == LLM_SYSTEM and '<unit id="2">Section 6 covers conveying</unit>' in user
        q = user.split("<question>")[1].split("</question>")[0]
        return {"justification": "scripted", "cannot_judge": q == "Unknown?", **answers.get(q, answers["Unknown?"])}

    fake_provider.responder = respond
    fake_provider.item_of = lambda user: "refuse" if "Refuse?" in user else None
    fake_provider.plan = {"refuse": ["refusal"]}
    gen = make_llm_generator(cfg(provider, fake_provider), api_key="sk-gen")
    g = gen.generate("Which section?", PACKED)
    assert (g.outcome, g.answer) == ("answered", "Section 6.")
    assert [c.unit_id for c in g.citations] == ["c2"] and g.details["invalid_citations"] == [9]
    assert g.tokens_in == 1000 and g.tokens_out == 50 and g.cost > 0
    assert gen.generate("Unknown?", PACKED).outcome == "abstained"
    refused = gen.generate("Refuse?", PACKED)
    assert refused.outcome == "refused" and refused.answer is None
    assert gen.name == f"llm:{provider}:gen-m"


def test_llm_generator_config_is_strict():
    with pytest.raises(ValueError, match="kind llm needs provider"):
        GeneratorConfig(kind="llm", model="m")
    with pytest.raises(ValueError, match="only the llm generator"):
        GeneratorConfig(model="m")
    # the extractive section dumps as before, so existing config shas do not move
    assert set(GeneratorConfig().model_dump()) == {"kind", "abstain_floor", "max_sentences", "absent_names"}


def test_llm_generator_without_a_key_is_an_input_error(fake_provider, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(InputError, match="OPENAI_API_KEY"):
        make_llm_generator(cfg("openai", fake_provider))
