"""AgentAction parsing: lenient about wrapping, strict about meaning (the action fields the prompt names)."""

from __future__ import annotations

import pytest

from tether.agent.actions import parse_action
from tether.errors import ModelOutputError


def test_fenced_and_prefixed_replies_parse():
    a = parse_action('Sure! ```json\n{"action": "execute", "command": "npm ci", "reasoning": "deps"}\n```')
    assert a.action_type == "execute" and a.command == "npm ci" and a.reasoning == "deps"
    q = parse_action(
        '{"action": "ask_user", "question": "Port?", "options": ["3000"], "category": "decision"}'
    )
    assert q.input_type == "choice" and q.options == ["3000"]
    assert parse_action('{"action_type": "done", "message": "ok"}').action_type == "done"


@pytest.mark.parametrize(
    ("reply", "fragment"),
    [
        ('{"action": "execute"}', '"execute" needs a non-empty "command"'),
        ('{"action": "done", "message": "  "}', '"done" needs a non-empty "message"'),
        ('{"action": "ask_user", "question": "Which?"}', 'needs "options"'),
        ('{"action": "dance"}', "action"),
        ('{"action": "ask_user", "question": "q", "input_type": "voice"}', "input_type"),
        ("no json here", "no JSON object"),
    ],
)
def test_invalid_replies_say_what_to_fix(reply, fragment):
    with pytest.raises(ModelOutputError) as err:
        parse_action(reply)
    assert fragment in str(err.value)
    assert err.value.raw == reply or reply in str(err.value.raw)
