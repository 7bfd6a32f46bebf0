"""A big row equal to one whose checksum matched lately is compared, not checksummed again:
altered copies of it, of any byte, still fail as corrupt."""

from __future__ import annotations

import pytest

from tether.errors import CheckpointCorrupt
from tether.state import Codec
from tether.state.serde import decode_plain


def _big_row() -> bytes:
    return Codec().encode({"v": 1, "kind": "full", "state": {"m": ["x" * 1000 + str(i) for i in range(400)]}})


@pytest.mark.parametrize("at", [9, 200_000, -1])
def test_an_altered_copy_of_a_verified_big_row_is_corrupt(at: int) -> None:
    codec = Codec()
    row = _big_row()
    assert len(row) > 256 * 1024
    assert codec.decode(row)["state"]["m"][5].endswith("5")
    assert codec.decode(bytes(bytearray(row)))["state"]["m"][399].endswith("399")  # an equal copy
    altered = bytearray(row)
    altered[at] ^= 0x01
    with pytest.raises(CheckpointCorrupt, match="checksum"):
        codec.decode(bytes(altered))
    assert decode_plain(bytes(altered)) is None
    assert codec.decode_many([row, bytes(row)]) == [codec.decode(row)] * 2
    with pytest.raises(CheckpointCorrupt):
        codec.decode_many([row, bytes(altered)], versions=[1, 2])


def test_a_row_read_into_a_mutable_buffer_is_checked_every_time() -> None:
    codec = Codec()
    buffer = bytearray(_big_row())
    assert codec.decode(buffer)["kind"] == "full"  # type: ignore[arg-type]
    buffer[-1] ^= 0x01
    with pytest.raises(CheckpointCorrupt):
        codec.decode(buffer)  # type: ignore[arg-type]
