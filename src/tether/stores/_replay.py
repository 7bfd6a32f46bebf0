"""Rows become a state again: the replay of a chain of ``(version, payload)`` rows (a full
state, then deltas and segments applied in place) and the checkpoint it ends at.

Every row is checked as it is decoded (its CRC-32, or its AES-GCM tag when keyed), unless
its bytes equal those the engine kept from an earlier read (``_kept``); a chain read again
whole starts from the replay kept with its rows. Pure: no I/O (the chain engine's part).
"""

from __future__ import annotations

import gc
from collections.abc import Sequence
from typing import Any

from tether.errors import CheckpointCorrupt
from tether.state.model import Checkpoint, RunStatus, make_checkpoint
from tether.state.serde import Codec, decode_plain
from tether.stores._kept import KeptRows, Replayed, keep_replayed
from tether.stores._segment import apply_ops, apply_segment, segment_length

__all__ = ["Carrier", "apply_delta", "checkpoint_from", "lone_full", "replay_rows"]

STATUS_OF: dict[Any, RunStatus] = {s.value: s for s in RunStatus}

Carrier = tuple[bytes, int, int]
"""A row after the chain's full one that holds a payload: the payload, how many versions
it holds, and its level (0 for a delta, see ``_segment``). What a store keeps of them for
a run (:class:`Known`) is what it may pack into that run's next segment."""


def replay_rows(
    codec: Codec,
    kept: KeptRows,
    run_id: str,
    chain: Sequence[tuple[int, bytes]],
    tail: bool,
    vouched: list[bool] | None = None,
    start: tuple[Replayed, int] | None = None,
) -> tuple[dict[str, Any], list[str], dict[str, Any], list[Carrier] | None]:
    """``ChainEngine.replay``, with the collector as it is; ``tail=False``: no carriers (None).
    ``start``: a kept replay of the chain's first rows and the index of the row after
    them (see ``KeptRows.replayed``; then the carriers are those after it)."""
    if vouched is None:
        vouched = kept.vouched(run_id, chain)
    if start is not None:
        done, first = start
        state, executed, node, status, ts, meta = done.unpack()
        head = {"node": node, "status": status, "ts": ts, "meta": meta}
        expect = done.version + 1
    else:
        first_version, first_payload = chain[0]
        head = codec.decode(first_payload, run_id=run_id, version=first_version, vouched=vouched[0])
        state = head.get("state")
        if type(state) is not dict or head.get("kind") != "full":
            raise CheckpointCorrupt(
                "chain does not start with a full state", run_id=run_id, version=first_version
            )
        executed = head.get("executed")
        if type(executed) is not list:
            executed = list(executed or ())
        if len(chain) == 1:
            kept.keep(run_id, chain, vouched)
            return state, executed, head, [] if tail else None
        first, expect = 1, first_version + 1
    target = chain[-1][0]
    rows = [row for row in chain[first:] if row[1]]
    versions = [v for v, _ in rows]
    bodies = codec.decode_many(
        [p for _, p in rows],
        run_id=run_id,
        versions=versions,
        vouched=[flag for flag, row in zip(vouched[first:], chain[first:], strict=True) if row[1]],
    )
    last = head
    carriers: list[Carrier] | None = [] if tail else None
    for at, (number, body) in enumerate(zip(versions, bodies, strict=True)):
        if number != expect:
            why = "overlaps the segment before it" if number < expect else f"follows {expect - 1}"
            raise CheckpointCorrupt(
                f"version {min(number, expect)} is missing from the chain (row {number} {why})",
                run_id=run_id,
                version=min(number, expect),
            )
        try:
            if body.get("kind") == "segment":
                held = segment_length(body, run_id=run_id, version=number)
                count = min(held, target - number + 1)
                last = apply_segment(state, executed, body, count)
                expect = number + count
                if carriers is not None:
                    level = body.get("lv")
                    carriers.append((rows[at][1], held, level if type(level) is int and level > 0 else 1))
                    if count < held:
                        carriers = None
            else:
                apply_delta(state, executed, body)
                last, expect = body, expect + 1
                if carriers is not None:
                    carriers.append((rows[at][1], 1, 0))
        except CheckpointCorrupt:
            raise
        except Exception as exc:
            raise CheckpointCorrupt(f"cannot apply delta ({exc})", run_id=run_id, version=number) from exc
    if expect != target + 1:
        raise CheckpointCorrupt(f"version {expect} is missing from the chain", run_id=run_id, version=expect)
    if start is None:
        kept.keep(run_id, chain, vouched)
    return state, executed, last, carriers


def checkpoint_from(
    codec: Codec, kept: KeptRows, run_id: str, chain: Sequence[tuple[int, bytes]]
) -> Checkpoint:
    """The checkpoint a non-empty ``(version, payload)`` chain ends at.

    A chain whose rows were all kept (read before, compared equal now) is kept with
    what it replays to, and a next read of it copies that instead of replaying its rows."""
    number = chain[-1][0]
    vouched, start = kept.again(run_id, chain)
    if len(chain) == 1 and not codec.encrypted:  # keyed: plaintext is refused, not read
        cp = lone_full(run_id, number, chain[0][1], vouched=vouched[0])
        if cp is not None:
            kept.keep(run_id, chain, vouched)
            return cp
    again = len(chain) > 1 and all(vouched)  # (all False when the run has no rows kept)
    pause = gc.isenabled()  # (see replay)
    if pause:
        gc.disable()
    try:
        if start is not None and start[0].version == number:  # the same chain again
            state, executed, node, status_text, ts, meta = start[0].unpack()
        else:  # decrypts; says what is wrong
            state, executed, last, tail = replay_rows(codec, kept, run_id, chain, again, vouched, start)
            node, status_text, ts, meta = (
                last.get("node"),
                last.get("status"),
                last.get("ts"),
                last.get("meta"),
            )
            if again and tail is not None:  # (None: it ends inside a segment)
                fields = [state, executed, node, status_text, ts, meta]
                kept.keep(run_id, chain, vouched, keep_replayed(chain, fields))
            elif start is not None:  # (else the replay kept its rows)
                kept.keep(run_id, chain, vouched)
    finally:
        if pause:
            gc.enable()
    status = STATUS_OF.get(status_text)  # every payload carries its own head
    if status is None or (type(ts) is not float and type(ts) is not int):
        raise CheckpointCorrupt("payload head is damaged", run_id=run_id, version=number)
    return make_checkpoint(run_id, node, state, executed, float(ts), number, status, meta or {})


def lone_full(run_id: str, number: int, payload: bytes, *, vouched: bool = False) -> Checkpoint | None:
    """A plain full row as its checkpoint in one step (the common load: one row, no key), or
    None when it is anything else, for the general path to read or to report. ``vouched``:
    as ``serde.decode_plain`` takes it."""
    last = decode_plain(payload, vouched=vouched)
    if last is None:
        return None
    state, executed, ts = last.get("state"), last.get("executed"), last.get("ts")
    status = STATUS_OF.get(last.get("status"))
    if type(state) is not dict or type(executed) is not list or last.get("kind") != "full" or status is None:
        return None
    if type(ts) is not float:
        if type(ts) is not int:
            return None
        ts = float(ts)
    meta = last.get("meta") or None  # {} for no metadata, made when read
    return make_checkpoint(run_id, last.get("node"), state, executed, ts, number, status, meta)


def apply_delta(state: dict[str, Any], executed: list[str], body: dict[str, Any]) -> None:
    """Apply one delta in place."""
    if body.get("kind") != "delta":
        raise CheckpointCorrupt("expected a delta row")
    apply_ops(state, body["ops"])
    executed.extend(body.get("executed") or ())
