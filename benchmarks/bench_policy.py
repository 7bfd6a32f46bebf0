"""The command policy's decision time, recall and false positives over the corpus.

    .venv/bin/python benchmarks/bench_policy.py [--repeat 5]

Over tests/tools/data/policy_corpus.txt (obfuscated destructive and exfiltrating lines,
and lines from real deployments) it prints:

* decision time per line, p50 and p99, beside ``shlex.split`` of the same lines (the
  baseline: a plain tokenizer, measured in the same run);
* decision time on a 1 MB line (not read: over the length bound), a 60 KB line of one
  word (read), 450 chained commands (read) and 5,000 chained commands (over the word
  bound: not read), beside ``shlex.split`` of the same lines;
* recall: the share of dangerous lines refused, asked or confined to the sandbox without
  network in ``sandboxed`` mode, and never run unasked in ``ask`` mode;
* false positives: benign lines refused or needing a risk approval in ``sandboxed`` mode
  (host changes that escalate by design are counted apart).

Targets (issue 20): 1 MB line in < 50 ms; recall 100%; 0 benign lines blocked.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.tools.corpus import WORKDIR, load
from tether.tools import CommandPolicy
from tether.tools.guard import decide


def _timed(fn, *args, **kwargs) -> float:  # type: ignore[no-untyped-def]
    started = time.perf_counter()
    fn(*args, **kwargs)
    return time.perf_counter() - started


def _pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _shlex(line: str) -> None:
    try:
        shlex.split(line)
    except ValueError:
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5, help="passes over the corpus")
    args = parser.parse_args()
    sets = load()
    policy = CommandPolicy(workdir=WORKDIR)
    lines = [line for group in sets.values() for _kind, line in group]
    ours: list[float] = []
    base: list[float] = []
    for _ in range(args.repeat):
        for line in lines:
            ours.append(_timed(policy.check, line, cwd=WORKDIR))
            base.append(_timed(_shlex, line))
    print(
        f"corpus: {len(sets['dangerous'])} dangerous, {len(sets['benign'])} benign lines, {args.repeat} passes"
    )
    print("decision time per line   p50        p99        max")
    for name, samples in (("policy.check", ours), ("shlex.split (baseline)", base)):
        print(
            f"  {name:23s} {_pct(samples, 0.5) * 1e3:7.3f} ms {_pct(samples, 0.99) * 1e3:7.3f} ms"
            f" {max(samples) * 1e3:7.3f} ms"
        )
    print(
        f"  ratio p50 {_pct(ours, 0.5) / _pct(base, 0.5):.1f}x, p99 {_pct(ours, 0.99) / _pct(base, 0.99):.1f}x"
    )

    huge = "echo " + "a" * 1_000_000
    word = "echo " + "a" * 60_000
    chain = "echo hi && " * 450 + "true"
    print("long lines                policy.check   shlex.split")
    for name, line in (
        ("1 MB, one word", huge),
        ("60 KB, one word", word),
        ("5 KB, 450 commands", chain),
        ("55 KB, 5000 commands", "echo hi && " * 5_000),
    ):
        t = min(_timed(policy.check, line) for _ in range(3))
        shown = (
            f"{min(_timed(_shlex, line) for _ in range(3)) * 1e3:9.2f} ms"
            if len(line) < 100_000
            else "  (skipped)"
        )
        print(f"  {name:23s} {t * 1e3:9.2f} ms  {shown}   ({policy.check(line).action})")

    outcomes: Counter[str] = Counter()
    missed = []
    for kind, line in sets["dangerous"]:
        verdict = policy.check(line, cwd=WORKDIR)
        boxed, asked = decide(verdict, "sandboxed"), decide(verdict, "ask")
        contained = boxed.outcome != "run" or (boxed.sandboxed and not boxed.network)
        if not contained or asked.outcome == "run":
            missed.append(line)
        outcomes[f"{kind}:{verdict.action}{'+host' if 'host' in verdict.needs else ''}"] += 1
    n = len(sets["dangerous"])
    print(
        f"recall: {n - len(missed)}/{n} = {100 * (n - len(missed)) / n:.1f}% (refused, asked or sandboxed offline)"
    )
    for key, count in sorted(outcomes.items()):
        print(f"  {key:28s} {count}")
    for line in missed:
        print(f"  MISSED: {line}")
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
    print(f"false positives (benign refused or asked for a risk): {len(blocked)}/{len(sets['benign'])}")
    for key, count in sorted(benign.items()):
        print(f"  {key:28s} {count}")
    for line in blocked:
        print(f"  BLOCKED: {line}")


if __name__ == "__main__":
    main()
