"""The agent report's money: cents from ten cents up, four decimals below, so small per-run costs stay apart."""

from ragassay.cli.agent_text import _fmt, _fmt_delta


def test_costs_under_ten_cents_keep_four_decimals_and_the_spec_example_keeps_cents():
    assert _fmt("agent_cost", 0.012) == "$0.0120" and _fmt("agent_cost", 0.0252) == "$0.0252"
    assert _fmt("cost_per_resolved_task", 3.5) == "$3.50" and _fmt("cost_per_resolved_task", 0.5842) == "$0.58"
    assert _fmt_delta("agent_cost", 0.0132) == "+$0.0132" and _fmt_delta("cost_per_resolved_task", -2.92) == "-$2.92"
    assert _fmt("agent_cost", None) == "undefined"
