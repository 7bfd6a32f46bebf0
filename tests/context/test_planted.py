from __future__ import annotations

from tether.context.planted import AGENT_CATEGORIES, generate_agent_transcript


def test_agent_transcript_is_deterministic_and_plants_every_category() -> None:
    """Same seed, same items; every report column has facts, each unique to its items."""
    a = generate_agent_transcript(seed=5, operations=80)
    b = generate_agent_transcript(seed=5, operations=80)
    assert a.items == b.items and a.facts == b.facts
    full = "\n".join(i.content + str(i.metadata) for i in a.items)
    kept = a.retention(full)
    for column in AGENT_CATEGORIES:
        found, planted = kept[column]
        assert planted > 0 and found == planted, column
    assert a.retention("")["goal"] == (0, 1)


def test_two_part_facts_need_both_parts() -> None:
    """A resolution counts only with its error and its fix, a decision with question and answer."""
    tr = generate_agent_transcript(seed=6, operations=40)
    fact = next(f for f in tr.facts if f.category == "resolution")
    assert not fact.kept_in(fact.markers[0])
    assert fact.kept_in(" ".join(fact.markers))
