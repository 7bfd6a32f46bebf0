"""A long agent run under the loop's compression policy: is the session layer bounded?

Run: ``PYTHONPATH=src:benchmarks .venv/bin/python benchmarks/bench_context_session.py
[--operations 1000] [--budget 24000]`` (``--quick``: 300 operations).

The transcript of :func:`generate_agent_transcript` is replayed one step at a time (a step
is one tool call with its result, plus the messages around it); before each "model call"
the :class:`~tether.context.policy.ContextPolicy` (the agent loop's policy: the 70/85/90%
thresholds of the window's usage alone compress, fit if still over) runs. Printed: compressions per step after warm-up and the shortest gap between two, the
session and working layers' peaks against their budgets,
the prompt's peak against the budget, and fact retention at the end of the run beside what
``trim_messages`` keeps of the same transcript at the same budget.
"""

from __future__ import annotations

import argparse
import logging
import time
from collections.abc import Iterator

from bench_context_quality import HAVE_LANGCHAIN, lc_text

from tether.context import ContextItem, ContextWindow, Layer, TiktokenTokenizer
from tether.context.planted import AGENT_CATEGORIES, AgentTranscript, generate_agent_transcript
from tether.context.policy import ContextPolicy


def steps(items: tuple[ContextItem, ...]) -> Iterator[list[ContextItem]]:
    step: list[ContextItem] = []
    for item in items:
        if item.kind == "tool_call" and any(i.kind == "tool_call" for i in step):
            yield step
            step = []
        step.append(item)
    if step:
        yield step


def run(tr: AgentTranscript, budget: int, warmup: int = 50) -> dict[str, float]:
    window = ContextWindow("gpt-4o", budget=budget)
    policy = ContextPolicy()
    session_budget = window.layer_budgets[Layer.SESSION]
    working_budget = window.layer_budgets[Layer.WORKING]
    peak_prompt = peak_session = peak_working = 0
    compressions_after_warmup = 0
    last_compression: int | None = None
    shortest_gap = 10**9
    n_steps = 0
    elapsed = 0.0
    for n, step in enumerate(steps(tr.items)):
        for item in step:
            window.add(item)
        start = time.perf_counter()
        events = policy.before_call(window)
        elapsed += time.perf_counter() - start
        n_steps = n + 1
        usage = window.usage()
        peak_prompt = max(peak_prompt, usage.tokens)
        peak_session = max(peak_session, usage.layers[Layer.SESSION].tokens)
        peak_working = max(peak_working, usage.layers[Layer.WORKING].tokens)
        if n >= warmup and any(e.kind == "context_compressed" for e in events):
            compressions_after_warmup += sum(e.kind == "context_compressed" for e in events)
            if last_compression is not None:
                shortest_gap = min(shortest_gap, n - last_compression)
            last_compression = n
    kept = tr.retention(window.render())
    lc = tr.retention(lc_text(tr, budget, TiktokenTokenizer("o200k_base"))) if HAVE_LANGCHAIN else {}
    out = {
        "steps": n_steps,
        "compressions per step after warm-up": compressions_after_warmup / max(n_steps - warmup, 1),
        "shortest gap between compressions (steps)": shortest_gap,
        "peak prompt / budget": peak_prompt / budget,
        "peak session layer / its budget": peak_session / session_budget,
        "peak working layer / its budget": peak_working / working_budget,
        "policy ms per step": elapsed * 1e3 / n_steps,
    }
    for column in AGENT_CATEGORIES:
        found, planted = kept.get(column, (0, 0))
        out[f"kept {column}"] = found / planted if planted else float("nan")
        if lc:
            out[f"trim_messages kept {column}"] = lc[column][0] / planted if planted else float("nan")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--operations", type=int, default=1000)
    parser.add_argument("--budget", type=int, default=24_000)
    parser.add_argument("--seed", type=int, default=31)
    parser.add_argument("--quick", action="store_true", help="300 operations")
    args = parser.parse_args()
    logging.getLogger("tether").setLevel(logging.ERROR)
    from harness import Report

    rep = Report("bench_context_session", "a long agent run under the loop's compression policy")
    tr = generate_agent_transcript(seed=args.seed, operations=300 if args.quick else args.operations)
    for _ in rep.runs(1):  # deterministic apart from the policy's time
        out = run(tr, args.budget)
        for key, value in out.items():
            rep.line(key, value)
        rep.target("peak prompt / budget", out["peak prompt / budget"], goal=1.0)
        rep.target("peak session layer / its budget", out["peak session layer / its budget"], goal=1.0)
        for column in ("goal", "constraint", "todo", "decision"):
            rep.target(f"kept {column}", out[f"kept {column}"], goal=1.0, op=">=", unit="")
    rep.finish()


if __name__ == "__main__":
    main()
