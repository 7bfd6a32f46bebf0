"""The 70 / 85 / 90% thresholds drive compression in the real agent loop.

A responder model reads the prompt it is sent, counts it exactly as the window does and
asks for a command whose output takes the window where the test wants it: a run that
stays between 70% and 85% is never compressed, a crossing of 85% compresses at standard,
a jump past 90% compresses deep. The commands really run (``sed`` on a file of log lines).
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from tether.agent import AgentLoop, LoopConfig
from tether.context import ContextWindow, Layer, count_messages
from tether.context.tokens import base_tokenizer
from tether.models import ScriptedModel
from tether.state import RunStatus
from tether.state.reserved import runtime_state
from tether.stores import open_store
from tether.tools import LocalSession

BUDGET = 8_000
MODEL = "gpt-4"
_WORDS = ("orders", "billing", "ledger", "gateway", "auth", "search", "queue", "metrics", "cache")


def _log_file(path: Path, lines: int = 20_000) -> Path:
    rng = random.Random(7)
    with path.open("w") as f:
        for k in range(1, lines + 1):
            w = rng.choice(_WORDS)
            f.write(
                f"{k:05d} {w}-{rng.randrange(100, 999)} request path=/api/{w} status=200 ms={rng.randrange(1, 99)}\n"
            )
    return path


class Driver:
    """Answers each call with a command sized to reach the next usage the plan wants."""

    def __init__(self, log: Path, plan: list[tuple[float | None, float]]) -> None:
        self.log = log
        self.plan = list(plan)
        """(leave the stage at this ratio, or on a compression when None; step size)"""
        self.tok = base_tokenizer(MODEL)
        self.seen: list[float] = []
        self.line = 1

    def __call__(self, messages: list[dict[str, Any]]) -> dict[str, Any]:
        ratio = count_messages(messages, self.tok) / BUDGET
        dropped = bool(self.seen) and ratio < self.seen[-1] - 0.1
        self.seen.append(ratio)
        while self.plan:
            until = self.plan[0][0]
            if (until is None and not dropped) or (until is not None and ratio < until):
                break
            self.plan.pop(0)
            dropped = False
        if not self.plan:
            return {"action": "done", "message": "reached the planned usage"}
        step = self.plan[0][1]
        n = max(1, round(step * BUDGET / 17))  # about 17 tokens a log line
        start, self.line = self.line, self.line + n
        return {"action": "execute", "command": f"sed -n '{start},{start + n - 1}p' {self.log.name}"}


async def _run(tmp_path: Path, plan: list[tuple[float | None, float]]) -> tuple[Driver, dict[str, Any]]:
    driver = Driver(_log_file(tmp_path / "app.log"), plan)
    config = LoopConfig(model_name=MODEL, budget=BUDGET, output_tokens=BUDGET, max_iterations=200)
    async with open_store(f"sqlite:///{tmp_path}/agent.db") as store:
        loop = AgentLoop(ScriptedModel(driver, usage=False), LocalSession(cwd=tmp_path), store, config=config)
        result = await loop.start("thresholds", "read the log in parts")
    assert result.status is RunStatus.COMPLETED, result
    return driver, dict(result.state)


def _events(state: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [e["detail"] for e in runtime_state(state)["event_log"] if e["kind"] == kind]


async def test_a_run_between_70_and_85_percent_is_never_compressed(tmp_path: Path) -> None:
    driver, state = await _run(tmp_path, [(0.80, 0.03)])
    assert 0.70 < max(driver.seen) <= 0.85  # the model got 70-85% of its window
    assert _events(state, "context_compressed") == []
    assert len(_events(state, "context_warning")) == 1
    window = ContextWindow.from_log(state["context_meta"], state["context_log"])
    # the working layer is far past its own budget, and that alone compresses nothing
    working = window.usage().layers[Layer.WORKING]
    assert working.tokens > working.budget
    # the usage the model got is reported in the run's state
    sent = state["context_meta"]["sent"]
    assert sent["calls"] == len(driver.seen)
    assert abs(sent["peak"]["ratio"] - max(driver.seen)) < 0.01
    assert 0.70 < sent["peak"]["ratio"] <= 0.85


async def test_crossing_85_percent_compresses_standard_and_90_deep(tmp_path: Path) -> None:
    # climb by 3% until a compression, climb back to 80%, then one step of 15%
    driver, state = await _run(tmp_path, [(None, 0.03), (0.80, 0.03), (None, 0.15)])
    compressed = _events(state, "context_compressed")
    assert [c["level"] for c in compressed] == ["standard", "deep"], compressed
    standard, deep = compressed
    assert 0.85 < standard["ratio"] <= 0.90
    assert deep["ratio"] > 0.90
    assert standard["after_tokens"] < 0.7 * standard["before_tokens"]
    assert deep["after_tokens"] < 0.45 * deep["before_tokens"]
    # no engine compression ran while usage was at or under 85%
    ratios = [c["ratio"] for c in compressed]
    assert min(ratios) > 0.85
    window = ContextWindow.from_log(state["context_meta"], state["context_log"])
    for layer in (Layer.SESSION, Layer.WORKING):
        use = window.usage().layers[layer]
        assert use.tokens <= use.budget or layer is Layer.WORKING and window.usage().ratio < 0.85
    assert max(driver.seen) <= 0.90  # what the model was sent never passed deep's threshold
