"""A payload read in slices carries the CRC its reader computed as the slices came; the
codec trusts it only when it equals the frame's own, so damage is still caught."""

from __future__ import annotations

import random

import pytest

import tether.state.serde as serde
from tether.errors import CheckpointCorrupt, StoreError
from tether.state.serde import Codec, decode_plain, frame_crc
from tether.stores._pg_slices import SLICE, Slices


def _payload(size: int) -> tuple[dict[str, object], bytes]:
    rng = random.Random(size)
    state = {"v": 3, "kind": "full", "state": {"text": "".join(rng.choice("abcdef ") for _ in range(size))}}
    return state, Codec().encode(state)


def _rows(data: bytes, order: list[int] | None = None) -> list[tuple[object, ...]]:
    """The rows of a sliced chain read of one payload (version 1): ``(version, latest, n, at, part)``."""
    ats = list(range(1, len(data) + 1, SLICE))
    if order is not None:
        ats = [ats[i] for i in order]
    return [(1, 1, len(data), at, data[at - 1 : at - 1 + SLICE]) for at in ats]


def _read(rows: list[tuple[object, ...]]) -> bytes:
    into = Slices(1, 0)  # as sliced("SELECT c.version, c.payload, r.version FROM ...") puts them
    for row in rows:
        into.add(row)
    [(version, payload, _latest)] = into.result()
    assert version == 1
    return payload  # type: ignore[no-any-return]


def test_slices_in_order_carry_the_frame_crc_and_the_codec_computes_none(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    state, data = _payload(3 * SLICE + 17)
    row = _read(_rows(data))
    assert row == data
    assert row.crc == int.from_bytes(data[4:8], "little") == frame_crc(data)  # type: ignore[attr-defined]
    calls = []
    crc32 = serde._crc32  # the function serde computes its checks with

    def counting(*args: object) -> int:
        calls.append(len(args[0]))  # type: ignore[arg-type]
        return crc32(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(serde, "_crc32", counting)
    assert decode_plain(row) == state
    assert Codec().decode_many([row], versions=[1]) == [state]
    assert not any(n > SLICE for n in calls)  # no pass over the whole row
    assert decode_plain(bytes(data)) == state  # the same bytes read whole: one pass over them
    monkeypatch.undo()
    assert any(n > SLICE for n in calls)


def test_a_damaged_row_read_in_slices_still_fails_its_check() -> None:
    _state, data = _payload(2 * SLICE + 5)
    damaged = bytearray(data)
    damaged[SLICE + 3] ^= 0x20  # a letter's case: still valid MessagePack
    row = _read(_rows(bytes(damaged)))
    assert row.crc is not None and row.crc != int.from_bytes(data[4:8], "little")  # type: ignore[attr-defined]
    assert decode_plain(row) is None
    with pytest.raises(CheckpointCorrupt, match="checksum"):
        Codec().decode(row, run_id="r", version=1)
    with pytest.raises(CheckpointCorrupt, match="checksum"):
        Codec().decode_many([row], run_id="r", versions=[1])


def test_slices_out_of_order_leave_the_check_to_the_codec() -> None:
    state, data = _payload(3 * SLICE + 1)
    row = _read(_rows(data, order=[0, 2, 1, 3]))
    assert row == data and row.crc is None  # type: ignore[attr-defined]
    assert decode_plain(row) == state
    damaged = bytearray(data)
    damaged[2 * SLICE + 9] ^= 0x20
    bad = _read(_rows(bytes(damaged), order=[1, 0, 2, 3]))
    assert bad.crc is None and decode_plain(bad) is None  # type: ignore[attr-defined]


@pytest.mark.parametrize("order", [[3, 2, 1, 0], [2, 0, 3, 1], [0, 1, 3, 2]])
def test_slices_in_any_order_make_the_payload_whole(order: list[int]) -> None:
    state, data = _payload(3 * SLICE + 100)
    row = _read(_rows(data, order=order))
    assert bytes(row) == data and len(row) == len(data)
    assert row.crc is None and decode_plain(row) == state  # type: ignore[attr-defined]


def test_a_missing_slice_is_an_error_not_a_short_row() -> None:
    _state, data = _payload(3 * SLICE + 100)
    into = Slices(1, 0)
    for row in _rows(data, order=[0, 1, 3]):
        into.add(row)
    with pytest.raises(StoreError, match="incompletely"):
        into.result()


def test_views_of_the_drivers_buffer_are_copied_into_what_is_kept() -> None:
    """The sliced read's cursor hands ``bytea`` values as views of the driver's result,
    valid only until its next row: every one kept (a whole payload, another column) is
    copied, and a sliced payload is put together from the views."""
    state, data = _payload(2 * SLICE + 9)
    _small, whole = _payload(100)
    into = Slices(1, 0)
    for row in _rows(data):
        into.add((row[0], memoryview(b"note"), *row[1:-1], memoryview(row[-1])))  # type: ignore[arg-type]
    into.add((2, memoryview(b"note"), 2, len(whole), None, memoryview(whole)))
    rows = into.result()
    assert [(r[0], r[2]) for r in rows] == [(1, b"note"), (2, b"note")]
    assert all(type(c) is not memoryview for r in rows for c in r)
    assert rows[0][1] == data and decode_plain(rows[0][1]) == state
    assert type(rows[1][1]) is bytes and rows[1][1] == whole
