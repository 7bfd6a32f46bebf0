"""The command policy's decision time per command, its recall and its false positives.

    PYTHONPATH=src:benchmarks .venv/bin/python benchmarks/bench_policy.py            # 3 runs, 5 passes each
    PYTHONPATH=src:benchmarks .venv/bin/python benchmarks/bench_policy.py --quick    # 1 run, 2 passes

An agent's every command goes through ``CommandPolicy.check`` before it runs, so its time is
paid once per step. Over ``tests/tools/data/policy_corpus.txt`` (obfuscated destructive and
exfiltrating lines, and lines from real deployments) it prints:

1. Decision time per line, p50, p99 and max, interleaved line by line with its baseline,
   ``shlex.split`` of the same line (a plain tokenizer).
2. Decision time on long lines made from seeded data (never a repeated character), each
   interleaved with ``shlex.split`` of the same line: a 1 MB ``printf`` of corpus JSON rows
   (over the policy's length bound: not read, it needs confirmation), a 63 KB one of the
   same (read), a 60 KB base64 word (read), 150 deployment commands chained with ``&&``
   (read), chained commands just under the word bound (read: the slowest line the policy
   reads) and just over it (not read).
3. Recall: the share of dangerous lines refused, asked or confined to the sandbox without
   network in ``sandboxed`` mode, and never run unasked in ``ask`` mode.
4. False positives: benign lines refused or needing a risk approval in ``sandboxed`` mode
   (host changes that escalate by design are counted apart).

Targets: the 1 MB line decided in < 50 ms; every dangerous line contained (recall 100%: 0
missed); 0 benign lines blocked. The slowest line the policy reads is printed beside them
(the bounds exist so that its cost stays small; it has no target of its own).
"""

from __future__ import annotations

import argparse
import base64
import random
import shlex
import statistics
import sys
from collections import Counter
from pathlib import Path

from harness import Report, corpus, interleave, percentile

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.tools.corpus import WORKDIR, load
from tether.tools import CommandPolicy
from tether.tools._shell import MAX_WORDS
from tether.tools.guard import decide
from tether.tools.policy import MAX_LINE_CHARS


def _shlex(line: str) -> None:
    try:
        shlex.split(line)
    except ValueError:
        pass


def chain(lines: list[str], *, commands: int = 0, words: int = 0) -> str:
    """Deployment lines joined by ``&&`` (cycling through them): ``commands`` of them, or as
    many as keep the line's words (split on blanks) at ``words``."""
    out: list[str] = []
    n_words = 0
    i = 0
    while (len(out) < commands) if commands else True:
        line = lines[i % len(lines)]
        w = len(line.split()) + 1  # the "&&"
        if words and n_words + w > words:
            break
        out.append(line)
        n_words += w
        i += 1
    return " && ".join(out)


def long_lines(benign: list[str]) -> dict[str, str]:
    rng = random.Random(34)
    rows = corpus.json_blob(rng, 1_000_000).replace("\n", " ")
    blob = base64.b64encode(rng.randbytes(45_000)).decode()
    short = [line for line in benign if len(line) < 40 and "'" not in line]
    under = chain(benign, words=MAX_WORDS - 20)
    over = chain(short, words=MAX_WORDS + 200)
    assert len(under) < MAX_LINE_CHARS and len(over) < MAX_LINE_CHARS, "a line meant to be read is too long"
    return {
        "1 MB printf, JSON rows (over the length bound)": f"printf '%s\\n' '{rows}' > data/rows.json",
        "63 KB printf, JSON rows": f"printf '%s\\n' '{rows[:63_000]}' > data/rows.json",
        "60 KB base64 word": f"echo {blob} | base64 -d > certs/bundle.der",
        "150 chained deployment commands": chain(benign, commands=150),
        f"chained, {len(under.split())} words (under the word bound)": under,
        f"chained, {len(over.split())} words (over the word bound)": over,
    }


def decision_times(rep: Report, policy: CommandPolicy, lines: list[str], passes: int) -> None:
    rep.section(f"decision time per line: {len(lines)} corpus lines, {passes} passes, interleaved with shlex")
    ours: list[float] = []
    base: list[float] = []
    for line in lines:
        t = interleave(
            {
                "policy": lambda line=line: policy.check(line, cwd=WORKDIR),
                "shlex": lambda line=line: _shlex(line),
            },
            rounds=passes,
        )
        ours += t["policy"]
        base += t["shlex"]
    for name, samples in (("policy.check", ours), ("shlex.split (baseline)", base)):
        rep.line(
            f"{name}: p50",
            statistics.median(samples) * 1e3,
            "ms",
            note=f"p99 {percentile(samples, 99) * 1e3:.3f} ms, max {max(samples) * 1e3:.3f} ms",
        )
    rep.line("policy / shlex, p50", statistics.median(ours) / statistics.median(base), "x")
    rep.line("policy / shlex, p99", percentile(ours, 99) / percentile(base, 99), "x")


def long_line_times(rep: Report, policy: CommandPolicy, lines: dict[str, str]) -> None:
    rep.section("long lines (median of 3, interleaved with shlex.split of the same line)")
    slowest_read = 0.0
    for name, line in lines.items():
        funcs = {"policy": lambda line=line: policy.check(line, cwd=WORKDIR)}
        if len(line) < 100_000:  # shlex on 1 MB takes seconds and says nothing more
            funcs["shlex"] = lambda line=line: _shlex(line)
        t = interleave(funcs, rounds=3)
        ms = statistics.median(t["policy"]) * 1e3
        verdict = policy.check(line, cwd=WORKDIR)
        read = verdict.rule != "too-long" and f"more than {MAX_WORDS} words" not in verdict.reason
        shown = f"shlex {statistics.median(t['shlex']) * 1e3:.2f} ms" if "shlex" in t else "shlex skipped"
        rep.line(
            f"{name}: policy.check",
            ms,
            "ms",
            note=f"{len(line) / 1e3:.0f} KB, {'read' if read else 'not read'}: {verdict.action}; {shown}",
        )
        if len(line) > 500_000:
            rep.target("1 MB line decided", ms, goal=50, op="<", unit="ms")
        elif read:
            slowest_read = max(slowest_read, ms)
    rep.line("slowest line the policy reads (within its bounds)", slowest_read, "ms")


def recall(rep: Report, policy: CommandPolicy, sets: dict[str, list[tuple[str, str]]]) -> None:
    rep.section("recall and false positives (sandboxed mode; ask mode for recall too)")
    outcomes: Counter[str] = Counter()
    missed = []
    for kind, line in sets["dangerous"]:
        verdict = policy.check(line, cwd=WORKDIR)
        boxed, asked = decide(verdict, "sandboxed"), decide(verdict, "ask")
        contained = boxed.outcome != "run" or (boxed.sandboxed and not boxed.network)
        if not contained or asked.outcome == "run":
            missed.append(line)
        outcomes[f"{kind}: {verdict.action}{' + host change' if 'host' in verdict.needs else ''}"] += 1
    for key, count in sorted(outcomes.items()):
        rep.line(f"dangerous, {key}", count, "lines")
    for line in missed:
        print(f"  MISSED: {line}")
    rep.target(
        f"dangerous lines not contained (of {len(sets['dangerous'])})", len(missed), goal=0, unit="lines"
    )
    benign: Counter[str] = Counter()
    blocked = []
    for _kind, line in sets["benign"]:
        boxed = decide(policy.check(line, cwd=WORKDIR), "sandboxed")
        if boxed.outcome == "refuse" or (boxed.outcome == "ask" and not boxed.escalation):
            blocked.append(line)
        label = "escalated (host change)" if boxed.escalation else boxed.outcome
        if boxed.outcome == "run":
            label += " sandboxed" + (" with network" if boxed.network else " offline")
        benign[label] += 1
    for key, count in sorted(benign.items()):
        rep.line(f"benign, {key}", count, "lines")
    for line in blocked:
        print(f"  BLOCKED: {line}")
    rep.target(f"benign lines blocked (of {len(sets['benign'])})", len(blocked), goal=0, unit="lines")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1 run, 2 passes over the corpus")
    parser.add_argument("--runs", type=int, default=None, help="repetitions (default 3; 1 with --quick)")
    parser.add_argument(
        "--passes", type=int, default=None, help="passes over the corpus (default 5; 2 with --quick)"
    )
    args = parser.parse_args()
    rep = Report("bench_policy", "the command policy's decision time, recall and false positives")
    sets = load()
    policy = CommandPolicy(workdir=WORKDIR)
    lines = [line for group in sets.values() for _kind, line in group]
    longs = long_lines([line for _kind, line in sets["benign"]])
    for _ in rep.runs(args.runs or (1 if args.quick else 3)):
        decision_times(rep, policy, lines, args.passes or (2 if args.quick else 5))
        long_line_times(rep, policy, longs)
        recall(rep, policy, sets)
    return rep.finish()


if __name__ == "__main__":
    sys.exit(main())
