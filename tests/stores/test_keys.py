"""A keyed store cannot be downgraded: plaintext rows are refused; keys rotate by id."""

from __future__ import annotations

import pytest

from tests.stores.conftest import new_id, raw_write
from tether.errors import DecryptionError
from tether.state import ExecutionContext, RunStatus
from tether.state.serde import SCHEMA_VERSION, Codec, generate_key, is_encrypted, key_id


async def _commit(store, run_id: str, *values: int) -> ExecutionContext:
    ctx = ExecutionContext(run_id)
    for i, value in enumerate(values):
        ctx.merge({"n": value, "messages": [f"m{value}"]})
        ctx.mark_executed(f"n{i}")
        await store.commit(ctx, node_id=f"n{i}")
    return ctx


async def test_a_keyless_writer_is_refused_by_a_keyed_store(make_store):
    """Rows appended without the key: the keyed store names the run and version and reads no further."""
    key = generate_key()
    run_id = new_id()
    async with make_store(codec=Codec(encryption_key=key)) as keyed:
        await _commit(keyed, run_id, 1)
    async with make_store() as keyless:  # a process that never got the key appends a plain row
        await raw_write(keyless, run_id, _plain_full(666), kind="full", expected=1)
        assert (await keyless.load(run_id)).state["n"] == 666  # a valid row: only the key refuses it
    async with make_store(codec=Codec(encryption_key=key)) as keyed:
        with pytest.raises(DecryptionError, match="plaintext row") as refused:
            await keyed.load(run_id)
        assert refused.value.run_id == run_id and refused.value.version == 2


async def test_a_plaintext_row_substituted_for_an_encrypted_one_is_refused(make_store):
    """A forged plaintext full row as the latest version: refused, never loaded as trusted state."""
    key = generate_key()
    run_id = new_id()
    async with make_store(codec=Codec(encryption_key=key)) as keyed:
        await _commit(keyed, run_id, 1, 2)
        await raw_write(keyed, run_id, _plain_full(666), kind="full", expected=2)
        with pytest.raises(DecryptionError, match="plaintext row"):
            await keyed.load(run_id)
    async with make_store(codec=Codec(encryption_key=key, allow_plaintext=True)) as migrating:
        assert (await migrating.load(run_id, version=2)).state["n"] == 2


async def test_keys_rotate_newest_writes_all_read(make_store):
    """Keys "new,old": old rows read by their key id, new rows written with the new key."""
    old, new = generate_key(), generate_key()
    run_id = new_id()
    async with make_store(codec=Codec(encryption_key=old)) as s:
        ctx = await _commit(s, run_id, 1, 2)
    rotated = Codec(encryption_key=f"{new}, {old}")
    assert rotated.key_ids[0] == key_id(__import__("base64").urlsafe_b64decode(new)).hex()
    async with make_store(codec=rotated) as s:
        assert (await s.load(run_id)).state["n"] == 2
        ctx.merge({"n": 3})
        await s.commit(ctx, node_id="n2")
        assert (await s.load(run_id)).state["n"] == 3
    payload = rotated.encode({"v": 1, "probe": True})
    assert is_encrypted(payload) and payload[4:8].hex() == rotated.key_ids[0]
    async with make_store(codec=Codec(encryption_key=new)) as only_new:
        with pytest.raises(DecryptionError, match="add that key"):
            await only_new.load(run_id, version=2)


def _plain_full(n: int) -> bytes:
    """A well-formed plaintext full row, as a keyless tether writes it."""
    head = {
        "v": SCHEMA_VERSION,
        "kind": "full",
        "executed": [],
        "ts": 0.0,
        "status": str(RunStatus.RUNNING),
        "node": "x",
    }
    return Codec().encode({**head, "state": {"n": n}})
