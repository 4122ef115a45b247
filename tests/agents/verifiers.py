"""Verifiers the tests load by file path (``tests/agents/verifiers.py:function``)."""


def from_meta(trace, item):
    """Success is the end state the environment recorded (``meta.resolved``), never the agent's claim."""
    return bool(trace.meta.get("resolved"))


def with_subgoals(trace, item):
    ok = bool(trace.meta.get("resolved"))
    sub = {g.id: (1.0 if ok else 0.0) for g in item.subgoals}
    if item.subgoals and not ok:
        sub[item.subgoals[0].id] = True  # found the evidence, failed to file
    return {"success": ok, "subgoals": sub}


def raises(trace, item):
    raise RuntimeError("environment unreachable")


def wrong_type(trace, item):
    return "yes"


def unknown_subgoal(trace, item):
    return {"success": True, "subgoals": {"nope": 1.0}}
