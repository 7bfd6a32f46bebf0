"""Payload bytes: exact round trips, authenticated encryption, clear corruption errors."""

from __future__ import annotations

import datetime as dt
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tether.errors import CheckpointCorrupt, ConfigError, DecryptionError
from tether.state import Codec, generate_key


def payload(**extra):
    return {
        "v": 1,
        "kind": "full",
        "state": {"t": dt.datetime(2026, 3, 29, 1, 30, tzinfo=ZoneInfo("Europe/Paris")), **extra},
    }


def test_zone_aware_datetimes_keep_their_zone():
    out = Codec().decode(Codec().encode(payload()))
    assert out == payload()
    assert out["state"]["t"].tzinfo == ZoneInfo("Europe/Paris")


def test_encryption_hides_the_plaintext_and_detects_tampering():
    codec = Codec(encryption_key=generate_key())
    data = codec.encode(payload(secret="hunter2"))
    assert b"hunter2" not in data
    assert codec.decode(data) == payload(secret="hunter2")
    tampered = data[:-1] + bytes([data[-1] ^ 1])
    with pytest.raises(DecryptionError, match="altered"):
        codec.decode(tampered, run_id="r", version=3)


def test_compression_only_when_it_pays():
    codec = Codec(compress_min_bytes=100)
    text = codec.encode(payload(blob="abc" * 10_000))
    assert len(text) < 2_000
    blob = __import__("os").urandom(10_000)
    random_bytes = codec.encode(payload(blob=blob))
    assert random_bytes.startswith(b"TT\x02\x00")  # incompressible: stored uncompressed
    assert codec.decode(random_bytes) == payload(blob=blob)
    assert codec.decode(text) == payload(blob="abc" * 10_000)


def test_rows_carry_a_checksum_and_rows_of_earlier_formats_still_read():
    """Every row written has a CRC-32 frame; bare bodies and format-1 frames (how earlier
    versions wrote plain and compressed payloads) still load."""
    import ormsgpack

    codec = Codec()
    data = codec.encode(payload(n=1))
    assert data[:4] == b"TT\x02\x00" and data[8] in range(0x80, 0x90)
    assert codec.decode(data) == payload(n=1)
    bare = ormsgpack.packb(payload(n=1), option=ormsgpack.OPT_PASSTHROUGH_DATETIME, default=str)
    old = {"v": 1, "kind": "full", "state": {"a": 1}}
    assert codec.decode(ormsgpack.packb(old)) == old  # a bare body (before checksums)
    assert codec.decode(b"TT\x01\x00" + ormsgpack.packb(old)) == old  # an old frame
    assert bare[0] in range(0x80, 0x90)
    big = {"v": 1, **{f"k{i}": i for i in range(20)}}  # 16+ keys: a map16 (0xde) body
    assert ormsgpack.packb(big)[0] == 0xDE
    assert codec.decode(codec.encode(big)) == big
    assert codec.decode(ormsgpack.packb(big)) == big


def test_the_checksum_is_zlibs_crc32_whichever_library_computes_it():
    """Rows carry zlib's CRC-32 of their header and body, computed by ISA-L when installed:
    a row written with either library reads with the other, and the frame is the bytes any
    zlib can check."""
    import os
    import zlib

    from tether.state import serde

    try:
        from isal.isal_zlib import crc32 as isal_crc32
    except ImportError:  # (no wheel for this platform: zlib's own then)
        isal_crc32 = zlib.crc32
    assert serde._crc32 is isal_crc32
    for size in (0, 1, 100, 4096, 70_000, 5_000_000):  # both sides of the small/big body paths
        body = os.urandom(size)
        assert serde._crc32(body) == zlib.crc32(body)
        assert serde._crc32(body, 0x1234_5678) == zlib.crc32(body, 0x1234_5678)
    data = Codec().encode({"v": 1, "blob": os.urandom(100_000)})
    assert int.from_bytes(data[4:8], "little") == zlib.crc32(data[8:], zlib.crc32(data[:4]))
    assert serde.frame_crc(data) == zlib.crc32(data[8:], zlib.crc32(data[:4]))


@pytest.mark.parametrize("at", [2, 3, 5, 12, -1])
def test_a_changed_byte_is_corrupt_never_altered_state(at):
    """A byte flipped anywhere in a row (header, checksum, a stored string) is reported."""
    codec = Codec(compress_min_bytes=None)
    data = bytearray(codec.encode(payload(text="a stored string " * 20)))
    data[at] ^= 0x01
    with pytest.raises(CheckpointCorrupt, match="run 'r' version 4"):
        codec.decode(bytes(data), run_id="r", version=4)
    with pytest.raises(CheckpointCorrupt, match="run 'r' version 4"):
        codec.decode_many([codec.encode(payload(n=1)), bytes(data)], run_id="r", versions=[3, 4])


def test_a_compression_bomb_fails_fast_without_allocating():
    """A ~45 KB zstd row declaring 1.5 GB is refused from its declared size."""
    import time
    import tracemalloc

    import zstandard

    comp = zstandard.ZstdCompressor(level=19)
    chunk = comp.compress(b"\0" * (1 << 20))  # 1 MiB of zeros, no size written below
    body = comp.compress(b"\0" * (64 << 20))  # a real 64 MiB frame, its size declared
    frame = zstandard.ZstdCompressor(level=1, write_content_size=True)
    declared = frame.compress(b"")  # header template only
    assert chunk and body and declared
    bomb_src = b"\0" * (1536 * 1000 * 1000)  # never stored: only the compressed form is kept
    bomb = comp.compress(bomb_src)
    del bomb_src
    assert len(bomb) < 100_000 and zstandard.frame_content_size(bomb) == 1_536_000_000
    row = b"TT\x01\x01" + bomb  # how a compressed row is framed (format 1, zstd)
    codec = Codec()  # a store that never compresses still reads compressed rows
    tracemalloc.start()
    started = time.perf_counter()
    with pytest.raises(CheckpointCorrupt, match=r"declares 1536000000 bytes.*max_payload_bytes"):
        codec.decode(row, run_id="r", version=2)
    _size, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 50 << 20 and time.perf_counter() - started < 1.0


def test_a_compressed_row_without_a_declared_size_is_inflated_only_to_the_limit():
    import zstandard

    raw = b"x" * (3 << 20)
    stream = zstandard.ZstdCompressor().compressobj()
    body = stream.compress(raw) + stream.flush()  # streaming: no content size in the frame
    assert zstandard.frame_content_size(body) == -1
    codec = Codec(max_payload_bytes=1 << 20)
    with pytest.raises(CheckpointCorrupt, match="inflates past"):
        codec.decode(b"TT\x01\x01" + body, run_id="r", version=1)


@pytest.mark.parametrize(
    "data",
    [b"", b"TT", b"XX\x01\x00abc", b"TT\x09\x00abc", b"TT\x01\x00\xc1", b"\x85garbage", b"\x81\xa1v"],
)
def test_garbage_is_reported_as_corrupt(data):
    with pytest.raises(CheckpointCorrupt, match="run 'r' version 9"):
        Codec().decode(data, run_id="r", version=9)


def test_bad_keys_are_config_errors():
    with pytest.raises(ConfigError, match="32 bytes"):
        Codec(encryption_key="c2hvcnQ=")


def test_a_chain_decodes_in_one_call_and_damage_still_names_the_version():
    codec = Codec()
    payloads = [codec.encode({"v": 1, "kind": "delta", "ops": [["m", "append", [i]]]}) for i in range(5)]
    assert [p["ops"][0][2] for p in codec.decode_many(payloads)] == [[0], [1], [2], [3], [4]]
    broken = [*payloads[:3], payloads[3][:-3], payloads[4]]
    with pytest.raises(CheckpointCorrupt, match="version 13"):
        codec.decode_many(broken, run_id="r", versions=[10, 11, 12, 13, 14])
    future = [*payloads[:2], codec.encode({"v": 9, "kind": "delta", "ops": []})]
    with pytest.raises(CheckpointCorrupt, match="upgrade tether"):
        codec.decode_many(future, run_id="r", versions=[1, 2, 3])


@pytest.mark.parametrize("at", [4, 8, 1_000, 2_500_000, -1])
def test_a_changed_byte_in_a_row_checked_while_it_decodes_is_corrupt(at):
    """A row of several megabytes is checked in another thread while it decodes: a byte
    changed anywhere in it is still reported as a checksum mismatch (the slow path names
    it), never handed out as state, and an intact one decodes whole."""
    codec = Codec(compress_min_bytes=None)
    rows = [{"i": i, "text": f"message {i} " * 20} for i in range(25_000)]
    data = codec.encode({"v": 1, "kind": "full", "state": {"rows": rows}})
    assert len(data) > 5 * 1024 * 1024
    assert codec.decode(data)["state"]["rows"] == rows
    damaged = bytearray(data)
    damaged[at] ^= 0x01
    with pytest.raises(CheckpointCorrupt, match="run 'r' version 4: checksum mismatch"):
        codec.decode(bytes(damaged), run_id="r", version=4)
    with pytest.raises(CheckpointCorrupt, match="run 'r' version 4: checksum mismatch"):
        codec.decode_many([codec.encode(payload(n=1)), bytes(damaged)], run_id="r", versions=[3, 4])


def test_big_decodes_pause_the_collector_and_always_give_it_back():
    """Big bodies decode with the cyclic GC paused (decoded data has no cycles); it must be
    running again afterwards, after damage too, and stay off if someone else turned it off."""
    import gc

    codec = Codec()
    big = codec.encode(payload(blob="x" * 300_000, items=[{"i": i} for i in range(2000)]))
    seen: list[bool] = []
    real_unpackb = __import__("ormsgpack").unpackb

    def spy(*args, **kwargs):
        seen.append(gc.isenabled())
        return real_unpackb(*args, **kwargs)

    import tether.state.serde as serde

    mp = pytest.MonkeyPatch()
    mp.setattr(serde.ormsgpack, "unpackb", spy)
    try:
        assert gc.isenabled()
        assert codec.decode(big)["state"]["items"][1999] == {"i": 1999}
        assert codec.decode(codec.encode(payload()))["kind"] == "full"
        assert seen == [False, True]  # paused for the big body only
        assert gc.isenabled()
        with pytest.raises(CheckpointCorrupt):
            codec.decode(big[:-10], run_id="r", version=1)
        assert gc.isenabled()
        chain = [codec.encode({"v": 1, "kind": "delta", "ops": [["m", "append", ["y" * 100_000]]]})] * 3
        seen.clear()
        assert len(codec.decode_many(chain)) == 3
        assert seen == [False] * 3 and gc.isenabled()  # 300 KB in all: one pause for the chain
        gc.disable()
        try:
            codec.decode(big)
            assert not gc.isenabled()
        finally:
            gc.enable()
    finally:
        mp.undo()


def test_the_state_of_a_plain_full_body_decodes_alone():
    """``state_offset``: the memory store decodes a cached state without the payload's
    head, so the offset must be exact or 0, never near."""
    import ormsgpack

    from tether.state.serde import _ext_hook, state_offset

    when = dt.datetime(2026, 3, 29, 1, 30, tzinfo=ZoneInfo("Europe/Paris"))
    head = {"v": 1, "kind": "full", "meta": {"at": when, "n": [1, 2]}, "executed": ["a", "b"]}
    state = {"t": when, "b": b"\x00\xff", "messages": [{"role": "user", "content": "hi"}] * 3}
    body = Codec().encode({**head, "state": state})
    at = state_offset(body, head)
    assert at > 0 and bytes(body[at - 6 : at]) == b"\xa5state"
    # what precedes the state is exactly the head (its map header one pair short), after
    # the 8-byte checksum frame
    head_bytes = bytes((body[8] - 1,)) + body[9 : at - 6]
    assert ormsgpack.unpackb(head_bytes, ext_hook=_ext_hook) == head
    assert ormsgpack.unpackb(memoryview(body)[at:], ext_hook=_ext_hook) == state
    # not such a body: 0, so nothing reads a state from the wrong place
    assert state_offset(body, {**head, "x": 1}) == 0  # another head than the body's
    assert state_offset(Codec().encode({"state": state, **head}), head) == 0  # the state not last
    assert state_offset(Codec(encryption_key=generate_key()).encode({**head, "state": state}), head) == 0
    big_head = {"v": 1, **{f"k{i}": i for i in range(14)}}  # 16 pairs with the state: a map16
    assert state_offset(Codec().encode({**big_head, "state": state}), big_head) == 0


_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**64 - 1),
    st.floats(allow_nan=False),
    st.text(max_size=40),
    st.binary(max_size=300),
)
_value = st.recursive(
    _leaf,
    lambda inner: st.lists(inner, max_size=20) | st.dictionaries(st.text(max_size=8), inner, max_size=20),
    max_leaves=30,
)


@settings(max_examples=100, deadline=None)
@given(st.dictionaries(st.text(max_size=8), _value, max_size=6))
def test_the_fast_encoder_writes_the_same_bytes(state):
    """Payloads without datetimes go to msgspec: the bytes must be ormsgpack's, so that
    every reader, and the offsets ``state_offset`` computes, stay what they were."""
    import ormsgpack

    from tether.state.serde import pack_plain

    payload = {"v": 1, "kind": "full", "state": state}
    assert pack_plain(payload, datetimes=False) == ormsgpack.packb(payload)
    assert Codec().decode(Codec().encode(payload, datetimes=False)) == payload


def test_a_value_the_fast_encoder_cannot_write_gets_the_usual_error():
    from tether.state.serde import pack_plain

    class Odd:
        pass

    with pytest.raises(TypeError, match="Odd"):
        pack_plain({"v": 1, "state": {"x": Odd()}}, datetimes=False)
