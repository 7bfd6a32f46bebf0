"""Trimming oversized tool outputs: a head-and-tail preview in the prompt, the rest kept.

A 2 MB build log is worth its first and last lines to the model; the middle goes to an
artefact whose id the marker names, so the agent can read it back on purpose instead of
paying for it on every call.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass

from tether.context.artifacts import ArtifactStore
from tether.context.facts import fact_lines
from tether.context.items import ContextItem
from tether.context.tokens import Tokenizer

logger = logging.getLogger(__name__)

__all__ = ["TrimmedOutput", "trim_item", "trim_output"]

_KEPT = "[lines kept from the cut part: errors, files written, ports, versions, configuration]\n"
_FACT_SHARE = 0.35
"""At most this share of the preview goes to the fact lines of the cut middle."""
_MARKER = (
    "\n[… {cut} tokens ({lines} lines) cut from the middle; the full output is artifact "
    "{aid}: read it back with read_artifact('{aid}') …]\n"
)


@dataclass(frozen=True, slots=True, kw_only=True)
class TrimmedOutput:
    text: str
    """What goes into the prompt: the whole output, or head + marker + tail."""
    trimmed: bool
    original_tokens: int
    tokens: int
    artifact_id: str | None = None


def _prefix_within(text: str, budget: int, tokenizer: Tokenizer, per_token: float) -> str:
    """The longest line-aligned prefix (roughly) of ``text`` within ``budget`` tokens."""
    if budget <= 0:
        return ""
    end = min(len(text), int(budget * per_token))
    while end > 0 and tokenizer.count(text[:end]) > budget:
        end = int(end * 0.9)
    cut = text.rfind("\n", 0, end)
    return text[: cut + 1] if cut > end * 0.8 else text[:end]


def trim_output(
    text: str,
    *,
    max_tokens: int,
    tokenizer: Tokenizer,
    store: ArtifactStore,
    head_share: float = 0.6,
    kind: str = "tool-output",
) -> TrimmedOutput:
    """Keep ``text`` whole if it fits ``max_tokens``, else store it and preview its ends.

    The preview (head, marker and tail together) stays within ``max_tokens``; the head
    gets ``head_share`` of the room because commands usually say what they do first and
    how they ended last.
    """
    total = tokenizer.count(text)
    if total <= max_tokens:
        return TrimmedOutput(text=text, trimmed=False, original_tokens=total, tokens=total)
    aid = store.put(text, kind=kind)
    marker_cost = tokenizer.count(_MARKER.format(cut=total, lines=text.count("\n"), aid=aid))
    room = max(max_tokens - marker_cost - 2, 0)
    block = _fact_block(text, int(room * _FACT_SHARE), tokenizer)
    room -= tokenizer.count(block) + 1 if block else 0
    per_token = len(text) / total
    head = _prefix_within(text, int(room * head_share), tokenizer, per_token)
    head_tokens = tokenizer.count(head)
    tail_budget = room - head_tokens
    reversed_tail = _prefix_within(text[len(head) :][::-1], tail_budget, tokenizer, per_token)
    tail = reversed_tail[::-1]
    tail_tokens = tokenizer.count(tail)
    while tail and tail_tokens > tail_budget:  # reversal can change the split
        tail = tail[len(tail) // 10 + 1 :]
        tail_tokens = tokenizer.count(tail)
    middle = text[len(head) : len(text) - len(tail)]
    if block:  # only the fact lines the head and tail do not already show
        shown = [ln for ln in block.splitlines()[1:] if ln in middle]
        block = _KEPT + "\n".join(shown) + "\n" if shown else ""
    cut_tokens = max(total - head_tokens - tail_tokens, 0)
    marker = _MARKER.format(cut=cut_tokens, lines=middle.count("\n"), aid=aid)
    preview = head + marker + block + tail
    kept = tokenizer.count(preview)
    logger.info("tool output trimmed: %d -> %d tokens, full text in %s", total, kept, aid)
    return TrimmedOutput(text=preview, trimmed=True, original_tokens=total, tokens=kept, artifact_id=aid)


def _fact_block(text: str, budget: int, tokenizer: Tokenizer) -> str:
    """The lines of ``text`` the fact miner recognises, within ``budget`` tokens.

    Errors come first, then the rest in order; a run of identical facts keeps its last.
    """
    if budget <= 0:
        return ""
    lines = text.splitlines()
    picked = fact_lines(text)
    if not picked:
        return ""
    errors = [
        k
        for k in picked
        if any(w in lines[k].lower() for w in ("error", "fail", "fatal", "denied", "exception"))
    ]
    first = set(errors)
    order = errors + [k for k in picked if k not in first]
    chosen: list[int] = []
    used = tokenizer.count(_KEPT)
    for k in order:
        line = lines[k] if len(lines[k]) <= 300 else lines[k][:300] + "…"
        cost = tokenizer.count(line) + 1
        if used + cost > budget:
            continue
        chosen.append(k)
        used += cost
    if not chosen:
        return ""
    return (
        _KEPT
        + "\n".join(lines[k] if len(lines[k]) <= 300 else lines[k][:300] + "…" for k in sorted(chosen))
        + "\n"
    )


def trim_item(
    item: ContextItem, *, max_tokens: int, tokenizer: Tokenizer, store: ArtifactStore
) -> ContextItem:
    """``item`` with its content trimmed; ``metadata["artifact_id"]`` names the full text."""
    out = trim_output(item.content, max_tokens=max_tokens, tokenizer=tokenizer, store=store)
    if not out.trimmed:
        return item
    metadata = {
        **item.metadata,
        "artifact_id": out.artifact_id,
        "trimmed_from": out.original_tokens,
    }
    return dataclasses.replace(item, content=out.text, tokens=-1, metadata=metadata)
