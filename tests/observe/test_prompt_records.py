"""Prompt records: every model call stored as a delta, rebuilt byte for byte."""

from __future__ import annotations

import json

import pytest

from tests.stores.conftest import new_id
from tether.agent import AgentLoop, LoopConfig
from tether.context.records import PROMPT_LOG_KEY, diff_prompts, find_record, rebuild, rebuild_all
from tether.models import ScriptedModel
from tether.state import RunStatus
from tether.tools import LocalSession


def execute(command: str) -> dict:
    return {"action": "execute", "command": command, "reasoning": "next"}


async def long_run(store, tmp_path, n: int, *, budget: int = 6_000):
    """A run of ``n`` commands printing varied output, then done; compression kicks in."""
    replies = [execute(f"seq {i} {i + 40} | tr '\\n' ' '; echo step {i}") for i in range(n)]
    replies.append({"action": "done", "message": "all steps ran"})
    model = ScriptedModel(replies)
    loop = AgentLoop(
        model, LocalSession(cwd=tmp_path), store, config=LoopConfig(max_iterations=n + 5, budget=budget)
    )
    result = await loop.start(new_id(), "run the numbered steps")
    assert result.status is RunStatus.COMPLETED, result.message
    return model, result


async def test_replay_gives_the_exact_messages_the_model_received(store, tmp_path):
    """Each call rebuilt from the stored records equals, byte for byte, what the model got."""
    model, result = await long_run(store, tmp_path, 30)
    cp = await store.load(result.run_id)  # from the store, not from memory
    records = cp.state[PROMPT_LOG_KEY]
    assert len(records) == len(model.calls) == 31
    for call, sent in zip(rebuild_all(records), model.calls, strict=True):
        assert json.dumps(call.messages) == json.dumps(sent)
        assert call.record["reply"] is not None
    one = rebuild(records, find_record(records, 17))
    assert one.messages == model.calls[16] and one.iteration == 17
    assert one.record["layers"]["System"] > 0 and one.record["tokens"] > 0
    assert one.record["settings"]["jsonMode"] is True
    assert [m["id"] for m in one.meta][:2] == ["system", "goal"]


@pytest.mark.slow
async def test_records_store_the_change_not_the_prompt(store, tmp_path):
    """Over 200 iterations the stored records stay proportional to what each call added."""
    _model, result = await long_run(store, tmp_path, 200, budget=4_000)
    records = result.state[PROMPT_LOG_KEY]
    prompts = list(rebuild_all(records))
    full = sum(len(json.dumps(p.messages)) for p in prompts)
    stored = sum(len(json.dumps(r)) for r in records)
    assert stored < full / 3, (stored, full)  # not a copy per call, even with a small prompt
    # per call: the delta is at most 2x the messages that were new in that call, plus the reply and a fixed header
    for before, after, record in zip(prompts, prompts[1:], records[1:], strict=False):
        seen = {json.dumps(m) for m in before.messages}
        new = sum(len(json.dumps(m)) for m in after.messages if json.dumps(m) not in seen)
        ops = len(json.dumps(record["ops"]))
        assert ops <= 2 * new + 200, (record["iteration"], ops, new)


async def test_diff_names_what_entered_left_and_was_compressed(store, tmp_path):
    """Between two calls, the diff lists items by id; a compression shows as compressed."""
    _model, result = await long_run(store, tmp_path, 40, budget=4_000)
    records = result.state[PROMPT_LOG_KEY]
    a, b = rebuild(records, find_record(records, 3)), rebuild(records, find_record(records, 4))
    d = diff_prompts(a, b)
    entered = {e["id"] for e in d.entered}
    assert {"call-3", "result-3"} <= entered  # the previous action and its output
    assert "instant-iteration" in {c["id"] for c in d.changed}
    assert not d.left and not d.compressed
    compressed = [
        diff_prompts(p, q)
        for p, q in zip(list(rebuild_all(records)), list(rebuild_all(records))[1:], strict=False)
    ]
    assert any(x.compressed for x in compressed), "a 40-step run on a 4K budget compresses at least once"
    folded = next(x for x in compressed if x.compressed)
    assert all(e["id"].startswith(("call-", "result-")) for e in folded.compressed)
    assert folded.tokens_after < folded.tokens_before or folded.entered


async def test_records_survive_a_resume_in_a_new_loop(store, tmp_path):
    """A run paused on a question and resumed by a new loop keeps recording deltas."""
    question = {"action": "ask_user", "question": "Which port?", "options": ["80", "8080"]}
    model = ScriptedModel([execute("echo one"), question])
    loop = AgentLoop(model, LocalSession(cwd=tmp_path), store)
    run_id = new_id()
    paused = await loop.start(run_id, "g")
    assert paused.status is RunStatus.PAUSED
    again = ScriptedModel([execute("echo two"), {"action": "done", "message": "ok"}])
    done = await AgentLoop(again, LocalSession(cwd=tmp_path), store).answer(run_id, "8080")
    assert done.status is RunStatus.COMPLETED
    records = done.state[PROMPT_LOG_KEY]
    sent = model.calls + again.calls
    assert [c.messages for c in rebuild_all(records)] == sent
    assert isinstance(records[-1]["ops"][0], list)  # the resumed call copied from the one before
