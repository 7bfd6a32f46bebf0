"""An agent-like LangGraph graph for the TetherSaver tests (also run as a child process).

``agent`` appends an AI message and a log line per turn; after the third turn it asks a
human (``interrupt``) before going on; it stops after ``turns`` turns. Message ids are
fixed so that two runs on two savers can be compared value for value.
"""

from __future__ import annotations

import operator
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import interrupt


class State(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]
    log: Annotated[list[str], operator.add]
    turn: int
    approved: str


def build(turns: int = 6, *, pause_at: int = 3, stall: Path | None = None) -> Any:
    """The graph builder; ``stall``: on turn 4 write this file and sleep (to be killed)."""

    def agent(state: State) -> dict[str, Any]:
        turn = state.get("turn", 0) + 1
        if stall is not None and turn == 4 and not stall.exists():
            stall.write_text("stalled")
            time.sleep(60)
        return {
            "messages": [AIMessage(content=f"turn {turn}: " + "x" * 200, id=f"ai-{turn}")],
            "log": [f"agent {turn}"],
            "turn": turn,
        }

    def human(state: State) -> dict[str, Any]:
        answer = interrupt({"question": f"go on after turn {state['turn']}?"})
        return {"approved": str(answer), "messages": [HumanMessage(content=str(answer), id="human-ok")]}

    def route(state: State) -> str:
        if state["turn"] >= turns:
            return END
        if state["turn"] == pause_at and "approved" not in state:
            return "human"
        return "agent"

    g = StateGraph(State)
    g.add_node("agent", agent)
    g.add_node("human", human)
    g.add_edge(START, "agent")
    g.add_conditional_edges("agent", route, ["agent", "human", END])
    g.add_edge("human", "agent")
    return g


FIRST_INPUT: dict[str, Any] = {
    "messages": [HumanMessage(content="deploy the service", id="user-0")],
    "turn": 0,
}


ROOT = Path(__file__).resolve().parents[2]


def kill_when_stalled(module: str, *args: str, stall: Path) -> None:
    """Run ``python -m module args`` and SIGKILL it once it has written ``stall``."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "src")])}  # this checkout
    child = subprocess.Popen([sys.executable, "-m", module, *args], cwd=ROOT, env=env)
    try:
        deadline = time.monotonic() + 60
        while not stall.exists():
            assert child.poll() is None, "the child exited before the kill point"
            assert time.monotonic() < deadline
            time.sleep(0.05)
        child.send_signal(signal.SIGKILL)
        assert child.wait(10) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()


if __name__ == "__main__":  # child: run one thread on a store URL until it finishes or is killed
    from tether.integrations.langgraph import TetherSaver

    url, thread_id, stall_file = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    with TetherSaver.from_url(url) as saver:
        graph = build(turns=6, pause_at=99, stall=stall_file).compile(checkpointer=saver)
        # durability="sync": each checkpoint is stored before the next step starts
        graph.invoke(FIRST_INPUT, {"configurable": {"thread_id": thread_id}}, durability="sync")
    os._exit(0)
