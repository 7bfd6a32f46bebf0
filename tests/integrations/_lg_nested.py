"""A graph with subgraphs nested two or three levels deep (``agent`` > ``search`` >
``fetch``), each level appending messages and pausing once on an ``interrupt``: every
level gets checkpoint namespaces of its own (``agent:<task id>|search:<task id>...``),
which with a long thread id make storage keys far longer than a run id may be."""

from __future__ import annotations

from typing import Annotated, Any, TypedDict

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import interrupt

LONG_THREAD = "conversation-" + "0123456789abcdef" * 7 + "-end"  # 124 characters


class State(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]


def _level(name: str, inner: Any | None, pause: bool) -> Any:
    def work(state: State) -> dict[str, Any]:
        n = len(state.get("messages", []))
        return {"messages": [AIMessage(content=f"{name} saw {n} messages", id=f"{name}-{n}")]}

    def ask(state: State) -> dict[str, Any]:
        answer = interrupt({"level": name})
        return {"messages": [HumanMessage(content=f"{name}: {answer}", id=f"{name}-answer")]}

    g = StateGraph(State)
    g.add_node("work", work)
    last = "work"
    g.add_edge(START, "work")
    if inner is not None:
        g.add_node("inner", inner)
        g.add_edge("work", "inner")
        last = "inner"
    if pause:
        g.add_node("ask", ask)
        g.add_edge(last, "ask")
        last = "ask"
    g.add_edge(last, END)
    return g.compile()


def build(depth: int) -> Any:
    """The outer graph builder; ``depth`` levels of subgraphs (2 or 3) under it, the
    innermost pausing for an answer."""
    names = ["agent", "search", "fetch"][:depth]
    inner: Any = None
    for i, name in enumerate(reversed(names)):
        inner = _level(name, inner, pause=i == 0)
    g = StateGraph(State)
    g.add_node("agent", inner)
    g.add_edge(START, "agent")
    g.add_edge("agent", END)
    return g


FIRST = {"messages": [HumanMessage(content="find the invoice", id="user-0")]}
