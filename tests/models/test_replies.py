"""parse_json_reply: tolerant of wrapping, strict about JSON."""

from __future__ import annotations

import pytest

from tether.errors import ModelOutputError
from tether.models import find_json_objects, parse_json_reply


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"action": "done"}', {"action": "done"}),
        ('  \n{"action": "done"}\n ', {"action": "done"}),
        ('```json\n{"action": "execute", "command": "ls"}\n```', {"action": "execute", "command": "ls"}),
        ('```\n{"a": 1}\n```', {"a": 1}),
        ('Sure! Here is the action:\n```json\n{"a": 1}\n```\nLet me know.', {"a": 1}),
        (
            'I will run this: {"action": "execute", "command": "echo {}"} and then see.',
            {"action": "execute", "command": "echo {}"},
        ),
        (
            'Answer: {"outer": {"inner": [1, {"deep": "}"}]}, "s": "a \\" quote {"} done',
            {"outer": {"inner": [1, {"deep": "}"}]}, "s": 'a " quote {'},
        ),
        ('Thinking {not json} ... {"real": true}', {"real": True}),
        ('{"a": 1} and then {"b": 2}', {"a": 1}),
    ],
    ids=[
        "bare",
        "whitespace",
        "fenced-json",
        "fenced-plain",
        "fenced-in-prose",
        "prefixed",
        "nested-braces-in-strings",
        "skips-broken-candidate",
        "first-of-two",
    ],
)
def test_finds_the_object(text, expected):
    """The object is found through fences, prose and braces inside strings."""
    assert parse_json_reply(text) == expected


@pytest.mark.parametrize(
    "text",
    ["", "   ", "no json here", '{"unterminated": "x"', "{'python': 'dict'}", "```json\n{broken,}\n```"],
    ids=["empty", "blank", "prose", "unterminated", "single-quotes", "broken-fence"],
)
def test_broken_inputs_raise_with_the_raw_text(text):
    """Every failure is ModelOutputError carrying the reply, for the loop to send back."""
    with pytest.raises(ModelOutputError) as info:
        parse_json_reply(text)
    assert info.value.raw == text


def test_a_top_level_array_is_not_an_object():
    """A JSON array is valid JSON but not the one object asked for."""
    with pytest.raises(ModelOutputError, match="got a JSON list"):
        parse_json_reply('[{"a": 1}]')


def test_long_garbage_is_excerpted_in_the_message():
    """The message stays short; the full text is in .raw."""
    text = "x" * 5000
    with pytest.raises(ModelOutputError) as info:
        parse_json_reply(text)
    assert len(str(info.value)) < 400
    assert info.value.raw == text


def test_find_json_objects_yields_all_in_order():
    assert list(find_json_objects('a {"x": 1} b {"y": {"z": 2}} c {bad}')) == [{"x": 1}, {"y": {"z": 2}}]
