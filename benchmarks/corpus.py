"""Seeded, realistic data for every benchmark: varied prose, tool calls, tool results, JSON
rows and log lines.

Why not a repeated character: compressors, tokenisers and delta encoders all treat
``"x" * 1000`` as almost free, so figures measured on it do not hold for real chats. Every
generator here takes a ``random.Random`` (or a seed), so the same arguments give the same
bytes on any machine and any Python, and a rerun measures the same data.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

__all__ = [
    "json_blob",
    "log_lines",
    "message",
    "messages",
    "packed_message",
    "packed_messages",
    "packed_size",
    "prose",
    "tool_output",
    "words",
]

_WORD_TEXT = (
    "the a to of and in for is on that with this it be as are was by an at from or can "
    "will not have we you our your if but all they more when which their there has been "
    "deploy build cluster service request response latency error retry timeout config "
    "database index query table migration schema cache token prompt model agent tool "
    "result summary context window message user assistant function argument value list "
    "file path line test failure pass check review branch commit merge release version "
    "customer invoice order payment refund account balance report quarter revenue growth "
    "search document page section paragraph source citation answer question reason step "
    "plan execute verify observe update state checkpoint resume pause approve reject "
    "nginx postgres redis worker queue broker lease heartbeat replica primary failover "
    "container image volume network port listen socket certificate secret rotate expire "
    "latency throughput p95 budget compress layer decision constraint artefact rollback "
    "monday tuesday morning evening weekly daily hourly minute second quickly slowly "
    "because although however therefore meanwhile instead otherwise probably certainly"
)
_WORDS = tuple(_WORD_TEXT.split())
_TOOLS = ("search_docs", "run_sql", "read_file", "http_get", "list_orders", "run_tests", "grep", "shell")
_LEVELS = ("INFO", "INFO", "INFO", "DEBUG", "WARN", "ERROR")
_HOSTS = ("api-1", "api-2", "db-primary", "worker-3", "cache-0", "edge-7")

Message = dict[str, Any]


def words(rng: random.Random, k: int) -> str:
    return " ".join(rng.choices(_WORDS, k=k))


def prose(rng: random.Random, n_chars: int) -> str:
    """Sentences of varied length with the odd number, reference and paragraph break."""
    out: list[str] = []
    size = 0
    while size < n_chars:
        sentence = words(rng, rng.randint(6, 22)).capitalize() + rng.choice((".", ".", ".", "?", "!"))
        r = rng.random()
        if r < 0.12:
            sentence += f" (see #{rng.randint(10, 9999)})"
        elif r < 0.2:
            sentence += f" It took {rng.randint(2, 900)} ms on {rng.choice(_HOSTS)}."
        if rng.random() < 0.1:
            sentence += "\n\n"
        out.append(sentence)
        size += len(sentence) + 1
    return " ".join(out)[:n_chars]


def log_lines(rng: random.Random, n: int) -> str:
    """``n`` log lines: timestamps, levels, hosts, the odd error with a path or a port."""
    lines = []
    for _ in range(n):
        level = rng.choice(_LEVELS)
        text = words(rng, rng.randint(5, 14))
        if level == "ERROR" and rng.random() < 0.5:
            text += f": {rng.choice(('connection refused', 'timeout', 'permission denied'))} "
            text += (
                f"on port {rng.randint(1024, 65535)} (/var/lib/{rng.choice(_WORDS)}/{rng.randint(1, 99)}.db)"
            )
        lines.append(
            f"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}T{rng.randint(0, 23):02d}:"
            f"{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}Z {level} "
            f"{rng.choice(_HOSTS)} worker[{rng.randint(1, 8)}] {text}"
        )
    return "\n".join(lines)


def json_blob(rng: random.Random, n_chars: int) -> str:
    """JSON rows (one per line) of about ``n_chars`` characters."""
    rows: list[str] = []
    size = 0
    while size < n_chars:
        row = json.dumps(
            {
                "id": rng.randint(1, 10**6),
                "name": words(rng, 3),
                "score": round(rng.random(), 4),
                "tags": rng.sample(_WORDS, 3),
                "ok": rng.random() < 0.9,
            }
        )
        rows.append(row)
        size += len(row) + 1
    return "\n".join(rows)[:n_chars]


def tool_output(rng: random.Random, n_chars: int) -> str:
    """What a tool returns: JSON rows, log lines or code, about ``n_chars`` characters."""
    kind = rng.randrange(3)
    if kind == 0:
        return json_blob(rng, n_chars)
    if kind == 1:
        text = log_lines(rng, max(1, n_chars // 90))
        while len(text) < n_chars:
            text += "\n" + log_lines(rng, max(1, (n_chars - len(text)) // 90 + 1))
        return text[:n_chars]
    parts: list[str] = []
    size = 0
    i = 0
    while size < n_chars:
        part = (
            f"def {rng.choice(_WORDS)}_{i}(x, y={rng.randint(0, 9)}):\n"
            f"    # {words(rng, 6)}\n"
            f"    return x * {rng.randint(2, 99)} + y\n"
        )
        parts.append(part)
        size += len(part) + 1
        i += 1
    return "\n".join(parts)[:n_chars]


def message(rng: random.Random, idx: int) -> Message:
    """Message ``idx`` of a chat in the OpenAI format: user prose, an assistant tool call,
    the tool's result, an assistant answer (in that rotation, sizes varied like real chats)."""
    kind = idx % 4
    if kind == 0:
        return {"role": "user", "content": prose(rng, rng.randint(80, 1200))}
    if kind == 1:
        args = {"query": words(rng, rng.randint(3, 9)), "limit": rng.randint(5, 50)}
        return {
            "role": "assistant",
            "content": prose(rng, rng.randint(40, 400)),
            "tool_calls": [
                {
                    "id": f"call_{idx:06d}",
                    "type": "function",
                    "function": {"name": rng.choice(_TOOLS), "arguments": json.dumps(args)},
                }
            ],
        }
    if kind == 2:
        return {
            "role": "tool",
            "tool_call_id": f"call_{idx - 1:06d}",
            "name": rng.choice(_TOOLS),
            "content": tool_output(rng, rng.randint(400, 6000)),
        }
    return {"role": "assistant", "content": prose(rng, rng.randint(150, 2500))}


def messages(seed: int | random.Random, total_bytes: int) -> list[Message]:
    """A chat whose messages' JSON is about ``total_bytes`` long (seeded: same bytes each run)."""
    rng = seed if isinstance(seed, random.Random) else random.Random(seed)
    out: list[Message] = []
    size = 0
    while size < total_bytes:
        msg = message(rng, len(out))
        out.append(msg)
        size += len(json.dumps(msg))
    return out


def packed_size(obj: Any) -> int:
    """Bytes of ``obj`` in MessagePack, the encoding tether stores (what a store's sizes mean)."""
    import ormsgpack  # tether's own dependency; imported here so the JSON helpers need nothing

    return len(ormsgpack.packb(obj))


def packed_message(rng: random.Random, idx: int, nbytes: int) -> Message:
    """A message whose MessagePack encoding is ``nbytes`` long (within a few bytes): user prose
    for an even ``idx``, a tool result (JSON rows, log lines or code) for an odd one. For a
    step of a fixed size, so that the bytes a commit adds are known."""
    if idx % 2 == 0:
        msg: Message = {"role": "user", "content": prose(rng, max(1, nbytes))}
    else:
        msg = {
            "role": "tool",
            "tool_call_id": f"call_{idx - 1:06d}",
            "name": rng.choice(_TOOLS),
            "content": tool_output(rng, max(1, nbytes)),
        }
    for _ in range(3):
        over = packed_size(msg) - nbytes
        if over == 0:
            break
        content: str = msg["content"]
        if over > 0:
            msg["content"] = content[: max(1, len(content) - over)]
        else:
            msg["content"] = content + prose(rng, -over + 8)[:-over]
    return msg


def packed_messages(seed: int | random.Random, total_bytes: int) -> list[Message]:
    """A chat (:func:`message`'s rotation) whose state ``{"messages": [...]}`` packs to about
    ``total_bytes`` in MessagePack: the sizes a store benchmark names (1 KB, 1 MB, ...) are
    the stored state's, not its JSON's. The last message is cut to fit."""
    rng = seed if isinstance(seed, random.Random) else random.Random(seed)
    out: list[Message] = []
    size = packed_size({"messages": []}) + 4  # map, key, list header (array32 at worst)
    while size < total_bytes:
        remaining = total_bytes - size
        msg = message(rng, len(out))
        n = packed_size(msg)
        if n + 64 >= remaining:
            msg = packed_message(rng, len(out), max(24, remaining))
            n = packed_size(msg)
        out.append(msg)
        size += n
    return out


def reading_agent(rng: random.Random, out_dir: Path, iterations: int, done: str) -> list[dict[str, Any]]:
    """A scripted agent's replies that read ``iterations - 1`` seeded tool outputs written to
    ``out_dir`` one by one (``cat outputs/K.txt``, with corpus reasoning), then finish with
    ``done``. Each iteration reads a new file: re-reading one would be a stuck run."""
    out_dir.mkdir()
    for k in range(iterations):
        (out_dir / f"{k}.txt").write_text(tool_output(rng, rng.randint(300, 3000)))
    replies: list[dict[str, Any]] = [
        {"action": "execute", "command": f"cat {out_dir.name}/{k}.txt", "reasoning": prose(rng, 120)}
        for k in range(iterations - 1)
    ]
    replies.append({"action": "done", "message": done})
    return replies
