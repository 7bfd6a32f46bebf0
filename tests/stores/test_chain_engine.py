"""The chain engine, with no store: plan commits, keep the rows as a backend would, replay.

Properties: replaying the rows of any planned sequence of commits gives the context's
state at every version; sealing (packing deltas into segments) never changes a loaded
state; a prune's cut replays to the same states as the rows it replaces.
"""

from __future__ import annotations

import gc
import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tether.errors import CheckpointCorrupt, RunNotFound, RunNotPaused, VersionConflict
from tether.state import ExecutionContext, RunStatus
from tether.state.model import NO_CHAIN, ChainStats, RunInfo
from tether.state.reducers import default_registry
from tether.state.serde import Codec, generate_key
from tether.stores._chain import ChainEngine, CompactionPolicy, Known, Plan, check_write, full_payload
from tether.stores.base import ExpiryPolicy

_REG = default_registry().register("cfg", "merge").register("n", "counter")

steps = st.lists(
    st.one_of(
        st.tuples(st.just("messages"), st.lists(st.text("abcxyz é", max_size=30), min_size=1, max_size=3)),
        st.tuples(
            st.just("cfg"), st.dictionaries(st.sampled_from("abc"), st.integers(-(2**40), 2**40), max_size=2)
        ),
        st.tuples(st.just("n"), st.integers(-5, 5)),
        st.tuples(st.just("x_output"), st.text("abcxyz", max_size=40)),
        st.tuples(st.just("restore"), st.none()),
        st.tuples(st.just("exec"), st.sampled_from(["a", "b", "c", "d"])),
    ),
    min_size=1,
    max_size=40,
)

policies = st.builds(
    CompactionPolicy,
    max_chain=st.integers(3, 30),
    min_waste_bytes=st.sampled_from([0, 64, 256 * 1024]),
    seal_versions=st.sampled_from([0, 2, 3, 8]),
    seal_tail_bytes=st.sampled_from([64, 64 * 1024]),
    seal_fanout=st.integers(2, 4),
    seal_bytes=st.sampled_from([300, 4096, 1024 * 1024]),
    seal_whole_bytes=st.sampled_from([0, 500, 256 * 1024]),
)


class Rows:
    """The rows a backend keeps for one run: what a segment write does to them included."""

    def __init__(self) -> None:
        self.payloads: dict[int, bytes] = {}
        self.full: set[int] = set()
        self.version = 0
        self.chain: ChainStats = NO_CHAIN

    def append(self, plan: Plan) -> int:
        w = plan.write
        assert not check_write(w, self.info())
        version = self.version + 1
        self.chain = w.chain_after(self.chain, version)
        if w.kind == "segment":
            self.payloads[w.seal_from] = w.payload
            for v in range(w.seal_from + 1, version + 1):
                self.payloads[v] = b""
        else:
            self.payloads[version] = w.payload
            if w.kind == "full":
                self.full.add(version)
        self.version = version
        return version

    def info(self) -> RunInfo | None:
        if not self.version:
            return None
        import datetime as dt

        now = dt.datetime.now(dt.UTC)
        return RunInfo(
            run_id="r",
            status=RunStatus.RUNNING,
            version=self.version,
            node_id=None,
            created_at=now,
            updated_at=now,
            expires_at=None,
            chain=self.chain,
        )

    def chain_to(self, version: int) -> list[tuple[int, bytes]]:
        base = max(v for v in self.full if v <= version)
        return [(v, self.payloads[v]) for v in range(base, version + 1)]


def _commit(engine: ChainEngine, ctx: ExecutionContext, rows: Rows, known: Known) -> Known:
    changes = ctx.take_changes()
    plan = engine.plan(
        changes,
        known,
        node=ctx.node_id,
        status=RunStatus.RUNNING,
        now=time.time(),
        meta={},
        meta_dated=False,
        expires_at=None,
        require_status=None,
        write_id="",
    )
    version = rows.append(plan)
    ctx.saved(version, datetimes=plan.walked)
    return engine.after(plan, version, rows.chain, known.tail)


def _apply(ctx: ExecutionContext, key: str, value: Any) -> None:
    if key == "restore":
        ctx.restore(ctx.snapshot())
    elif key == "exec":
        ctx.mark_executed(value)
    else:
        ctx.merge({key: value})


@settings(max_examples=150, deadline=None)
@given(steps, policies, st.booleans())
def test_replaying_any_planned_sequence_gives_the_state_at_every_version(script, policy, seals):
    engine = ChainEngine(Codec(), policy, seals=seals, splits_state=False)
    ctx = ExecutionContext("r", {"messages": []}, reducers=_REG)
    rows, known = Rows(), Known(0, NO_CHAIN, [])
    want: dict[int, tuple[dict[str, Any], list[str]]] = {}
    known = _commit(engine, ctx, rows, known)
    want[rows.version] = (ctx.snapshot(), ctx.executed_node_ids)
    for key, value in script:
        _apply(ctx, key, value)
        known = _commit(engine, ctx, rows, known)
        want[rows.version] = (ctx.snapshot(), ctx.executed_node_ids)
    for version, (state, executed) in want.items():
        chain = rows.chain_to(version)
        got, got_executed, _head, _tail = engine.replay("r", chain)
        assert (got, got_executed) == (state, executed), version
        cp = engine.checkpoint_of("r", chain)
        assert cp.version == version and cp.state == state
    if not seals:
        assert all(p for p in rows.payloads.values())


@settings(max_examples=100, deadline=None)
@given(steps, policies)
def test_sealing_never_changes_a_loaded_state(script, policy):
    """The same commits planned with and without sealing load the same states, and a
    store that loads the run midway (its tail from the replay) seals on as well."""
    sealing = ChainEngine(Codec(), policy, seals=True, splits_state=False)
    plain = ChainEngine(Codec(), policy, seals=False, splits_state=False)
    a = ExecutionContext("r", {"messages": []}, reducers=_REG)
    b = ExecutionContext("r", {"messages": []}, reducers=_REG)
    rows_a, rows_b = Rows(), Rows()
    known_a, known_b = (
        _commit(sealing, a, rows_a, Known(0, NO_CHAIN, [])),
        _commit(plain, b, rows_b, Known(0, NO_CHAIN, [])),
    )
    for i, (key, value) in enumerate(script):
        _apply(a, key, value)
        _apply(b, key, value)
        if i == len(script) // 2:  # reload: what a store knows after a load
            state, executed, _h, tail = sealing.replay("r", rows_a.chain_to(rows_a.version))
            info = rows_a.info()
            assert info is not None
            known_a = sealing.known_after_load(info, rows_a.version, tail)
            assert (state, executed) == (plain.replay("r", rows_b.chain_to(rows_b.version))[:2])
        known_a = _commit(sealing, a, rows_a, known_a)
        known_b = _commit(plain, b, rows_b, known_b)
    assert rows_a.version == rows_b.version
    for version in range(1, rows_a.version + 1):
        sealed = sealing.replay("r", rows_a.chain_to(version))[:2]
        assert sealed == plain.replay("r", rows_b.chain_to(version))[:2]


@settings(max_examples=60, deadline=None)
@given(steps, policies, st.data())
def test_a_recut_chain_replays_to_the_same_states(script, policy, data):
    """A prune at any version: the new full row plus the recut segment after it replay to
    every later state as before."""
    engine = ChainEngine(Codec(), policy, seals=True, splits_state=False)
    ctx = ExecutionContext("r", {"messages": []}, reducers=_REG)
    rows, known = Rows(), Known(0, NO_CHAIN, [])
    known = _commit(engine, ctx, rows, known)
    for key, value in script:
        _apply(ctx, key, value)
        known = _commit(engine, ctx, rows, known)
    cut = data.draw(st.integers(1, rows.version))
    chain = rows.chain_to(cut)
    cp = engine.checkpoint_of("r", chain)
    after = engine.recut("r", chain)
    pruned = Rows()
    pruned.payloads = {v: p for v, p in rows.payloads.items() if v >= cut}
    pruned.payloads[cut] = engine.codec.encode(full_payload(cp))
    if after:
        pruned.payloads[cut + 1] = after
    pruned.full = {v for v in rows.full if v >= cut} | {cut}
    for version in range(cut, rows.version + 1):
        assert (
            engine.replay("r", pruned.chain_to(version))[:2] == engine.replay("r", rows.chain_to(version))[:2]
        )


def test_the_write_checks_are_one_rule():
    engine = ChainEngine(Codec(), CompactionPolicy(), seals=False, splits_state=False)
    ctx = ExecutionContext("r", {"a": 1})
    rows = Rows()
    first = engine.plan(
        ctx.take_changes(), Known(0, NO_CHAIN, []), node=None, status=RunStatus.RUNNING, now=time.time(),
        meta={}, meta_dated=False, expires_at=None, require_status=None, write_id="w1",
    )  # fmt: skip
    rows.append(first)
    info = rows.info()
    assert check_write(first.write, info, write_id="w1")  # landed already: its version back
    with pytest.raises(VersionConflict):
        check_write(first.write, info, write_id="other")
    first.write.expected_version, first.write.require_status = 1, RunStatus.PAUSED
    with pytest.raises(RunNotPaused):
        check_write(first.write, info)
    first.write.kind, first.write.require_status = "delta", None
    with pytest.raises(RunNotFound):
        check_write(first.write, None)
    assert ExpiryPolicy().expires_at(RunStatus.COMPLETED, 0.0) == 24 * 3600


def test_a_row_read_again_is_checked_against_the_bytes_kept_and_a_changed_one_is_caught():
    """A replayed chain's rows are kept to vouch for the same bytes read again; a row whose
    bytes differ (a flipped byte, as the disk would) is checked and reported all the same."""
    engine = ChainEngine(Codec(), CompactionPolicy(), seals=True, splits_state=False)
    ctx = ExecutionContext("r", {"messages": []}, reducers=_REG)
    rows, known = Rows(), Known(0, NO_CHAIN, [])
    for i in range(5):
        ctx.merge({"messages": [f"message {i} that will change"]})
        known = _commit(engine, ctx, rows, known)
    chain = rows.chain_to(rows.version)
    assert engine.checkpoint_of("r", chain).state == ctx.snapshot()
    again = [(v, bytes(bytearray(p))) for v, p in chain]  # equal bytes, other objects
    assert engine.checkpoint_of("r", again).state == ctx.snapshot()
    for at in range(1, len(chain)):
        version, payload = chain[at]
        if not payload:
            continue  # sealed: its segment holds it
        flipped = bytearray(payload)
        flipped[flipped.index(b"will change")] ^= 0x01
        damaged = [*chain[:at], (version, bytes(flipped)), *chain[at + 1 :]]
        with pytest.raises(CheckpointCorrupt, match="checksum mismatch") as err:
            engine.checkpoint_of("r", damaged)
        assert err.value.version == version
        assert engine.checkpoint_of("r", chain).state == ctx.snapshot()  # the kept rows still hold


def test_the_rows_kept_to_vouch_for_stay_under_their_budget():
    engine = ChainEngine(Codec(), CompactionPolicy(), seals=True, splits_state=False, vouch_bytes=10_000)
    for n in range(20):
        ctx = ExecutionContext(f"r{n}", {"messages": []}, reducers=_REG)
        rows, known = Rows(), Known(0, NO_CHAIN, [])
        for i in range(3):
            ctx.merge({"messages": ["x" * 1000 + str(i)]})
            known = _commit(engine, ctx, rows, known)
        assert engine.checkpoint_of(f"r{n}", rows.chain_to(rows.version)).state == ctx.snapshot()
        kept = engine.kept.sizes()
        assert engine.kept.nbytes == sum(kept.values()) <= 10_000
        assert f"r{n}" in kept  # the latest run read is kept, the oldest ones dropped
    keyed = ChainEngine(
        Codec(encryption_key=generate_key()), CompactionPolicy(), seals=True, splits_state=False
    )
    assert keyed.vouch_bytes == 0  # decrypting checks every row anyway


@settings(max_examples=60, deadline=None)
@given(steps, policies, st.booleans())
def test_a_seal_packs_the_delta_it_was_handed_as_it_would_its_bytes(script, policy, collecting):
    """A seal given the body a delta was encoded from writes the segment it writes from the
    delta's bytes, and leaves the cyclic collector as it found it (it pauses it meanwhile)."""
    engine = ChainEngine(Codec(), policy, seals=True, splits_state=False)
    seal = ChainEngine.seal

    def both(
        self: ChainEngine, run_id: str, version: int, tail: Any, payload: bytes, body: Any = None
    ) -> Any:
        handed = seal(self, run_id, version, tail, payload, body)
        assert gc.isenabled() is collecting
        assert handed == seal(self, run_id, version, tail, payload)
        return handed

    ctx = ExecutionContext("r", {"messages": []}, reducers=_REG)
    rows = Rows()
    was = gc.isenabled()
    (gc.enable if collecting else gc.disable)()
    ChainEngine.seal = both  # type: ignore[method-assign]
    try:
        known = _commit(engine, ctx, rows, Known(0, NO_CHAIN, []))
        for key, value in script:
            _apply(ctx, key, value)
            known = _commit(engine, ctx, rows, known)
    finally:
        ChainEngine.seal = seal  # type: ignore[method-assign]
        (gc.enable if was else gc.disable)()
    assert rows.version == len(script) + 1
