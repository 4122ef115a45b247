"""With an `llm` section the reference agent's answer is written by a model through the real SDK clients
(here the fake provider on 127.0.0.1): the planning stays deterministic, the answer turn costs what the
provider reports, and an abstaining model leaves no answer and no claim."""

import pytest

from ragassay.pipeline.agent import ANSWER_FILE, ReferenceAgent, parse_agent_config, run_agent
from ragassay.pipeline.generator import LLM_SYSTEM


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_llm_writes_the_answer_and_its_turn_costs_what_the_provider_reports(provider, example, fake_provider,
                                                                             monkeypatch, tmp_path):
    corpus, gs = example
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")
    seen = []

    def respond(system, user):
        assert system == LLM_SYSTEM
        seen.append(user)
        q = user.split("<question>")[1].split("</question>")[0]
        if "Kestrel" in q:
            return {"justification": "not stated", "cannot_judge": True, "answer": "", "cited_units": []}
        return {"justification": "unit 2", "cannot_judge": False, "answer": "Quellmoor", "cited_units": [2]}

    fake_provider.responder = respond
    cfg = parse_agent_config({"name": "llm", "search": {"top_k": 3},
                              "llm": {"provider": provider, "model": "agent-m", "base_url": fake_provider.base_url,
                                      "max_tokens": 64, "price_input": 1.0, "price_output": 2.0}})
    agent = ReferenceAgent(cfg, corpus)
    items = [gs["fb-01"], gs["fb-02"]]
    _, (answered, abstained) = run_agent(agent, items, tmp_path / "run")
    assert answered.answer == "Quellmoor" and answered.claimed_success is True
    assert (tmp_path / "run" / "work" / "fb-01" / "0" / ANSWER_FILE).read_text() == "Quellmoor\n"
    last = answered.steps[-1]
    assert last.name == "write_answer" and (last.tokens_in, last.tokens_out) == (1000, 50)
    assert last.cost == pytest.approx((1000 * 1.0 + 50 * 2.0) / 1e6)
    assert answered.meta["llm"]["generator"] == f"llm:{provider}:agent-m"
    # the model saw the units the agent read, and the question
    assert "Brackwater" in seen[0] and "founder of Brackwater Instruments" in seen[0]
    assert abstained.outcome == "abstained" and abstained.claimed_success is False and abstained.answer is None
    assert not (tmp_path / "run" / "work" / "fb-02" / "0" / ANSWER_FILE).exists()
    assert all(s.name != "write_answer" for s in abstained.steps)


def test_a_failing_or_refusing_model_is_a_recorded_outcome_not_a_crash(example, tmp_path):
    from ragassay.pipeline.agent import load_agent_config
    from ragassay.pipeline.generator import Generation

    corpus, gs = example

    class Broken:
        name = "broken"

        def generate(self, question, packed):
            if "Instruments" in question:
                raise RuntimeError("connection reset")
            return Generation(None, [], "refused", 10, 0, 0.0, {})

    agent = ReferenceAgent(load_agent_config("cheap"), corpus, generator=Broken())
    _, (failed, refused) = run_agent(agent, [gs["fb-01"], gs["fb-02"]], tmp_path / "run")
    assert failed.outcome == "error" and failed.error == "RuntimeError: connection reset"
    assert failed.claimed_success is False and failed.answer is None and failed.steps  # the steps so far stay
    assert refused.outcome == "refused" and refused.claimed_success is False and refused.answer is None
    assert not any((tmp_path / "run" / "work" / q / "0" / ANSWER_FILE).exists() for q in ("fb-01", "fb-02"))
