"""Context quality: which planted facts survive compression, against LangChain's trim_messages.

Run: ``PYTHONPATH=src:benchmarks .venv/bin/python benchmarks/bench_context_quality.py``
(several minutes; ``--quick`` for 600-operation sessions only, ``--speed`` for the
compression-time target alone).

The first section uses :func:`tether.context.sessions.generate_session`: deployments,
migrations and incident fixes of 3,000 operations (``--quick``: 600), fed to a window as
the agent loop adds them (outputs over 600 tokens trimmed as the loop trims them), once
with ordinary logs and once with a long log every 5 operations. tether compresses at
``standard`` and ``deep``; ``trim_messages`` gets the budget tether's result used. The kept
fraction per category, and the replaced decisions or settings a result still states as
current, are targets (must-keep categories 1.0; configuration, artefacts, fixes, failures,
ports, paths, versions >= 0.9 at standard and >= 0.8 at deep; superseded as current: 0).

The second section keeps the earlier agent transcripts. Transcripts come
from :func:`tether.context.planted.generate_agent_transcript`: a deployment conversation fed
to a ``ContextWindow`` message by message (system pinned, the first user message as the
goal, structured tool calls), with facts inside tool outputs and command arguments, plans
as ``- [ ]`` lists and numbered steps, answers to questions and fixes of earlier errors.

For each transcript, tether compresses at ``standard`` (~60%) and ``deep`` (~30%) and
``trim_messages`` (strategy "last", system kept) gets the same budget that tether's result
used. The table prints the kept fraction per category; ``min`` columns are the worst
transcript. ``langchain-core`` comes with ``pip install -e '.[bench]'``.

The speed section compresses the 600-operation transcript (about 160k tokens), fed message
by message into a fresh window each time, at both levels: best and median of 9, against the
target of 20 ms and against one recount of the same window (the cost of tokenizing it once).
The time to feed the window is printed too: facts are mined as tool results arrive.
"""

from __future__ import annotations

import argparse
import logging
import time
from collections.abc import Callable
from typing import Any

from tether.context import ContextItem, ContextWindow, TiktokenTokenizer, count_messages
from tether.context.facts import extract_output
from tether.context.planted import AGENT_CATEGORIES, AgentTranscript, generate_agent_transcript
from tether.context.sessions import SESSION_CATEGORIES, SESSION_KINDS, GeneratedSession, generate_session

try:
    from langchain_core.messages import (
        AIMessage,
        BaseMessage,
        HumanMessage,
        SystemMessage,
        ToolMessage,
        trim_messages,
    )

    HAVE_LANGCHAIN = True
except ImportError:
    HAVE_LANGCHAIN = False

TRANSCRIPTS = ((11, 150), (12, 300), (13, 150), (14, 600))
MUST = ("goal", "constraint", "todo", "decision")


def to_langchain(items: list[ContextItem]) -> list[Any]:
    out: list[Any] = []
    calls: set[str] = set()
    for item in items:
        role = item.effective_role
        if item.kind == "tool_call" and item.tool_call_id and "name" in item.metadata:
            calls.add(item.tool_call_id)
            args = dict(item.metadata.get("arguments") or {})
            out.append(AIMessage(content="", tool_calls=[
                {"name": item.metadata["name"], "args": args, "id": item.tool_call_id}]))  # fmt: skip
        elif role == "tool" and item.tool_call_id in calls:
            out.append(ToolMessage(content=item.text, tool_call_id=item.tool_call_id))
        elif role == "system":
            out.append(SystemMessage(content=item.text))
        elif role == "assistant":
            out.append(AIMessage(content=item.text))
        else:
            out.append(HumanMessage(content=item.text))
    return out


def lc_counter(tok: TiktokenTokenizer) -> Callable[[list[Any]], int]:
    def count(messages: list[BaseMessage]) -> int:
        total = 3
        for m in messages:
            total += 4 + tok.count(m.content if isinstance(m.content, str) else str(m.content))
            for call in getattr(m, "tool_calls", None) or []:
                total += tok.count(call["name"]) + tok.count(str(call["args"]))
        return total

    return count


def lc_text(tr: AgentTranscript, budget: int, tok: TiktokenTokenizer) -> str:
    kept = trim_messages(
        to_langchain(list(tr.items)), max_tokens=budget, token_counter=lc_counter(tok),
        strategy="last", include_system=True, allow_partial=False,
    )  # fmt: skip
    return "\n".join(str(m.content) + str(getattr(m, "tool_calls", "")) for m in kept)


def fed(tr: AgentTranscript) -> ContextWindow:
    w = ContextWindow("gpt-4", budget=10**7)
    for item in tr.items:  # message by message, as an agent adds them
        w.add(item)
    return w


def run(transcripts: tuple[tuple[int, int], ...]) -> dict[str, dict[str, list[float]]]:
    tok = TiktokenTokenizer()
    scores: dict[str, dict[str, list[float]]] = {}
    for seed, ops in transcripts:
        tr = generate_agent_transcript(seed=seed, operations=ops)
        for level in ("standard", "deep"):
            w = fed(tr)
            start = time.perf_counter()
            count_messages(w.to_messages("openai"), tok)  # the baseline: recount the window once
            recount = time.perf_counter() - start
            start = time.perf_counter()
            result = w.compress(level)  # type: ignore[arg-type]
            elapsed = time.perf_counter() - start
            budget = w.usage().tokens
            rows = {f"tether {level}": tr.retention(w.render())}
            if HAVE_LANGCHAIN:
                rows[f"trim_messages @{level}"] = tr.retention(lc_text(tr, budget, tok))
            for label, kept in rows.items():
                col = scores.setdefault(label, {})
                for cat in AGENT_CATEGORIES:
                    k, n = kept.get(cat, (0, 0))
                    if n:
                        col.setdefault(cat, []).append(k / n)
            scores[f"tether {level}"].setdefault("ratio", []).append(result.kept_ratio)
            scores[f"tether {level}"].setdefault("ms", []).append(elapsed * 1e3)
            print(f"seed {seed} ops {ops}: {result.before_tokens:,} tokens, {level} -> "
                  f"{result.kept_ratio:.1%} in {elapsed * 1e3:.1f} ms "
                  f"({elapsed / recount:.2f}x one recount of the window: {recount * 1e3:.1f} ms)")  # fmt: skip
    return scores


def report(scores: dict[str, dict[str, list[float]]]) -> None:
    header = ["method", *AGENT_CATEGORIES, "ratio"]
    rows = []
    order = ["trim_messages @standard", "tether standard", "trim_messages @deep", "tether deep"]
    for label in [o for o in order if o in scores]:
        col = scores[label]
        cells = []
        for cat in AGENT_CATEGORIES:
            vals = col.get(cat, [])
            if not vals:
                cells.append("-")
            elif cat in MUST:
                cells.append(f"{sum(vals) / len(vals):.2f} (min {min(vals):.2f})")
            else:
                cells.append(f"{sum(vals) / len(vals):.2f}")
        ratio = col.get("ratio")
        cells.append(f"{min(ratio):.1%}-{max(ratio):.1%}" if ratio else "same budget")
        rows.append([label, *cells])
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    print("\n## Planted-fact retention, mean over transcripts (min = worst transcript)")
    print(" | ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)))
    print("-+-".join("-" * w for w in widths))
    for row in rows:
        print(" | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)))
    if not HAVE_LANGCHAIN:
        print("(langchain-core not installed: trim_messages rows skipped)")


SPEED_TARGET_MS = 20.0


def speed(repeats: int = 9) -> None:
    seed, ops = TRANSCRIPTS[-1]
    tr = generate_agent_transcript(seed=seed, operations=ops)
    tok = TiktokenTokenizer()
    print(f"\n## Compression time, {ops}-operation transcript (best and median of {repeats})")
    for level in ("standard", "deep"):
        times, feeds, recounts = [], [], []
        before = 0
        for _ in range(repeats):
            extract_output.cache_clear()  # each window mines its outputs as a new run would
            start = time.perf_counter()
            w = fed(tr)
            feeds.append(time.perf_counter() - start)
            start = time.perf_counter()
            count_messages(w.to_messages("openai"), tok)
            recounts.append(time.perf_counter() - start)
            start = time.perf_counter()
            result = w.compress(level)  # type: ignore[arg-type]
            times.append((time.perf_counter() - start) * 1e3)
            before = result.before_tokens
        best, median = min(times), sorted(times)[len(times) // 2]
        verdict = "met" if best <= SPEED_TARGET_MS else "NOT met"
        print(f"Compress a {before:,}-token window, {level}: {best:.1f} ms best, {median:.1f} ms median "
              f"(target <= {SPEED_TARGET_MS:.0f} ms: {verdict}; {best / (min(recounts) * 1e3):.2f}x one recount "
              f"of the window, {min(recounts) * 1e3:.1f} ms; feeding its {len(tr.items):,} items: "
              f"{min(feeds) * 1e3:.0f} ms)")  # fmt: skip


FACT_FLOOR = {"standard": 0.9, "deep": 0.8}
MUST_SESSION = ("goal", "constraint", "todo", "decision")


def lc_session_text(items: list[ContextItem], budget: int, tok: TiktokenTokenizer) -> str:
    kept = trim_messages(
        to_langchain(items), max_tokens=budget, token_counter=lc_counter(tok),
        strategy="last", include_system=True, allow_partial=False,
    )  # fmt: skip
    return "\n".join(str(m.content) + str(getattr(m, "tool_calls", "")) for m in kept)


def lc_superseded(session: GeneratedSession, text: str) -> int:
    """Replaced decisions trim_messages keeps while it lost what replaced them."""
    old = [f for f in session.facts if f.category == "decision" and not f.current and f.kept_in(text)]
    new = [
        f for f in session.facts if f.category == "decision" and f.current and "freeze" not in f.markers[0]
    ]
    return len(old) if old and not all(f.kept_in(text) for f in new) else 0


def bench_sessions(rep: Any, operations: int) -> None:
    tok = TiktokenTokenizer()
    scores: dict[str, dict[str, list[float]]] = {}
    wrong: dict[str, int] = {}
    for long_every, label in ((40, "logs"), (5, "long outputs")):
        for kind in SESSION_KINDS:
            session = generate_session(kind, seed=21, operations=operations, long_every=long_every)
            items = session.items(output_tokens=600, tokenizer=tok)
            for level in ("standard", "deep"):
                w = ContextWindow("gpt-4", budget=10**7)
                for item in items:
                    w.add(item)
                result = w.compress(level)  # type: ignore[arg-type]
                budget = w.usage().tokens
                rows = {f"tether {level}": session.retention(w.render())}
                wrong[f"tether {level}"] = wrong.get(f"tether {level}", 0) + len(
                    session.superseded_as_current(w.items())
                )
                if HAVE_LANGCHAIN:
                    text = lc_session_text(items, budget, tok)
                    rows[f"trim_messages @{level}"] = session.retention(text)
                    key = f"trim_messages @{level}"
                    wrong[key] = wrong.get(key, 0) + lc_superseded(session, text)
                for name, kept in rows.items():
                    col = scores.setdefault(name, {})
                    for cat in SESSION_CATEGORIES:
                        k, n = kept.get(cat, (0, 0))
                        if n:
                            col.setdefault(cat, []).append(k / n)
                print(f"  {kind} ({label}, {len(session.ops):,} operations): {result.before_tokens:,} tokens, "
                      f"{level} -> {result.kept_ratio:.1%}")  # fmt: skip
    header = ["method", *SESSION_CATEGORIES, "superseded as current"]
    print("\n  kept fraction per category, minimum over sessions")
    print("  " + " | ".join(header))
    for name in ("trim_messages @standard", "tether standard", "trim_messages @deep", "tether deep"):
        if name not in scores:
            continue
        cells = [f"{min(scores[name].get(c, [float('nan')])):.2f}" for c in SESSION_CATEGORIES]
        print("  " + " | ".join([name, *cells, str(wrong.get(name, 0))]))
    for level in ("standard", "deep"):
        col = scores[f"tether {level}"]
        must = min(min(col[c]) for c in MUST_SESSION)
        rep.target(
            f"{level}: goal, constraints, TODO, current decisions (min)", must, goal=1.0, op=">=", unit=""
        )
        for cat in (c for c in SESSION_CATEGORIES if c not in MUST_SESSION):
            rep.target(f"{level}: {cat} (min)", min(col[cat]), goal=FACT_FLOOR[level], op=">=", unit="")
        rep.target(
            f"{level}: superseded decisions/settings as current",
            wrong[f"tether {level}"],
            goal=0,
            op="==",
            unit="",
        )
        if HAVE_LANGCHAIN:
            lc = scores[f"trim_messages @{level}"]
            rep.line(f"{level}: trim_messages must-keep (min)", min(min(lc[c]) for c in MUST_SESSION))
            rep.line(f"{level}: trim_messages configuration (min)", min(lc["config"]))
            rep.line(f"{level}: trim_messages superseded as current", wrong[f"trim_messages @{level}"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="600-operation sessions; no agent transcripts")
    parser.add_argument("--speed", action="store_true", help="only the compression-time target")
    args = parser.parse_args()
    logging.getLogger("tether").setLevel(logging.ERROR)
    if args.speed:
        speed()
        return
    from harness import Report

    rep = Report(
        "bench_context_quality", "facts kept by compression on long generated sessions, beside trim_messages"
    )
    for _ in rep.runs(1):  # deterministic: one run says it all
        rep.section("Generated sessions: deployments, migrations, incident fixes")
        bench_sessions(rep, 600 if args.quick else 3000)
    if not args.quick:
        report(run(TRANSCRIPTS))
        speed()
    rep.finish()


if __name__ == "__main__":
    main()
