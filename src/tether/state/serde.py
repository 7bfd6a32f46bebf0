"""Bytes on disk: one place that turns checkpoint payloads into bytes and back.

Layout of a stored payload::

    b"TT" | 2 | flags (1 byte) | crc32 (4, little-endian) | body      written by this tether
    b"TT" | 1 | flags | key id (4) | nonce (12) | body                encrypted (AES-GCM tag)
    body                                                              read only: older rows
    b"TT" | 1 | flags | body                                          read only: older rows

Every row written carries an integrity check: the CRC-32 of its frame header and body
(format 2), or, when encrypted, the AES-GCM tag, which authenticates it already. A row
whose bytes changed fails to load with :class:`CheckpointCorrupt` naming the run and
version, never as altered state. Rows written before the check (a bare MessagePack body,
or format 1 without a key) still load, unchecked. The check is :func:`_seal` and
:func:`_checked`; the encryption layer stays apart from it in :class:`Codec`.

``body`` is MessagePack (``ormsgpack``: it decodes big states much faster than JSON),
optionally zstd-compressed, then optionally AES-256-GCM-encrypted. ``datetime`` travels
as a MessagePack extension holding its ISO form (and zone key), so it comes back equal
and with the same kind of tzinfo. Decoding builds only dicts, lists and scalars: no
class is ever constructed from stored bytes. A compressed body is inflated only up to
the size its frame declares and never past ``Codec.max_payload_bytes``: a small row
claiming gigabytes fails at once instead of allocating them.

Payload dicts carry ``"v": SCHEMA_VERSION``; a payload from a newer tether fails fast.
"""

from __future__ import annotations

import base64
import datetime as dt
import functools
import gc
import hashlib
import os
import threading
from collections.abc import Callable, Sequence
from typing import Any
from zoneinfo import ZoneInfo

import ormsgpack

from tether.errors import CheckpointCorrupt, ConfigError, DecryptionError

try:  # the same CRC-32 as zlib's, by ISA-L's carry-less multiplies: far fewer instructions
    from isal.isal_zlib import crc32 as _crc32
except ImportError:  # (a platform with no isal wheel: the check is slower, not different)
    from zlib import crc32 as _crc32

__all__ = [
    "SCHEMA_CHANGES",
    "SCHEMA_VERSION",
    "CheckedRow",
    "Codec",
    "decode_plain",
    "frame_crc",
    "generate_key",
    "is_plain",
    "pack_plain",
    "pack_value",
    "state_offset",
]

SCHEMA_VERSION = 4
SCHEMA_CHANGES = {
    1: "first layout: full and delta payloads, ops (key, op, arg)",
    2: "segment payloads: the ops of several versions in one row (stores/_segment.py)",
    3: "patch ops: an overwrite stored as what changed in the value (stores/_patch.py)",
    4: "segment runs: a key's consecutive sets or merges as one op, the outcome decoded and "
    "each version's own argument kept as MessagePack bytes (stores/_segment.py)",
}

_MAGIC = b"TT"
_FORMAT = 1
"""Frames written before checksums, and encrypted frames (their GCM tag is the check)."""
_FORMAT_CRC = 2
"""Frames with a CRC-32 after the flags byte: every unencrypted row written now."""
_CRC_HEAD = 8
_CRC_PLAIN = b"TT\x02\x00"
"""The header of a checksummed row that is neither compressed nor encrypted."""
_CRC_PLAIN_SEED = _crc32(_CRC_PLAIN)
DEFAULT_MAX_PAYLOAD_BYTES = 256 * 1024 * 1024
"""The largest body a compressed row may inflate to, unless the codec is told otherwise."""
_F_ZSTD = 1
_F_AES = 2
_EXT_DATETIME = 1
_MAP_START = frozenset((*range(0x80, 0x90), 0xDE, 0xDF))
"""First byte of a MessagePack map: a plain body, stored without a frame."""
_PACK_OPTS = ormsgpack.OPT_PASSTHROUGH_DATETIME | ormsgpack.OPT_PASSTHROUGH_SUBCLASS


def _seal(body: bytes, flags: int) -> bytes:
    """``body`` in a format-2 frame: the CRC-32 covers the 4 header bytes and the body.

    The CRC-32 zlib computes (any zlib checks these rows), by ISA-L where its wheel is
    installed (see benchmarks/README.md, "checksums"): one pass over the bytes. One copy
    of the body, as any frame costs.
    """
    head = bytes((0x54, 0x54, _FORMAT_CRC, flags))
    crc = _crc32(body, _crc32(head))
    return b"".join((head, crc.to_bytes(4, "little"), body))


_SMALL_BODY = 64 * 1024
"""Below this a checked body is sliced out as bytes (ormsgpack reads those fastest), from it
on as a view (no copy of a 10 MB body)."""


def _body(data: bytes) -> bytes | memoryview:
    """The body of a format-2 frame, unchecked."""
    return data[_CRC_HEAD:] if len(data) < _SMALL_BODY else memoryview(data)[_CRC_HEAD:]


def _checked(data: bytes) -> bytes | memoryview | None:
    """The body of a format-2 frame whose CRC matches, else None."""
    body = _body(data)
    if _crc32(body, _crc32(data[:4])) != int.from_bytes(data[4:8], "little"):
        return None
    return body


class CheckedRow(bytearray):
    """A stored payload in a buffer its reader filled piece by piece, in order, with the
    CRC-32 of its frame computed meanwhile (:func:`frame_crc`): ``crc``, or None when the
    pieces did not come in order (the codec then computes it, as for any row).

    A backend reading a big row in slices waits for each one; computing the check on the
    slices as they come costs nothing then, where the codec would run one more pass over
    the whole row once it is there. The codec still compares ``crc`` with the one the frame
    carries, so a row whose bytes were altered fails exactly as when it computes the CRC
    itself. Never changed once filled (a changed buffer would no longer match ``crc``)."""

    __slots__ = ("crc",)

    def __init__(self, size: int = 0) -> None:
        super().__init__(size)
        self.crc: int | None = None


def frame_crc(part: bytes | memoryview, crc: int | None = None) -> int:
    """The CRC-32 a format-2 frame carries, computed over its bytes piece by piece: ``part``
    the frame's first bytes (``crc`` None; at least its 8-byte header), or the bytes that
    follow the pieces given before (``crc``: what this returned for those)."""
    if crc is None:
        view = memoryview(part)
        return _crc32(view[_CRC_HEAD:], _crc32(view[:4]))
    return _crc32(part, crc)


def _prechecked(data: bytes) -> bool:
    """Whether ``data`` is a :class:`CheckedRow` whose reader's CRC equals its frame's."""
    crc = getattr(data, "crc", None)
    return crc is not None and crc == int.from_bytes(data[4:8], "little")


def _fast_pack(payload: Any) -> bytes:
    """The encoder for payloads known to hold no datetime (see :func:`pack_plain`)."""
    return _msgspec_encoder()(payload)


@functools.cache
def _msgspec_encoder() -> Callable[[Any], bytes]:
    import msgspec  # on first use: its import (typing_extensions, inspect…) is not light

    return msgspec.msgpack.Encoder().encode


def _default(obj: Any) -> Any:
    if type(obj) is dt.datetime:
        text = obj.isoformat()
        if isinstance(obj.tzinfo, ZoneInfo):
            text += "|" + obj.tzinfo.key
        return ormsgpack.Ext(_EXT_DATETIME, text.encode())
    raise TypeError(f"cannot store {type(obj).__name__}")


def _ext_hook(tag: int, data: bytes) -> Any:
    if tag == _EXT_DATETIME:
        text, _, zone = data.decode().partition("|")
        value = dt.datetime.fromisoformat(text)
        return value.replace(tzinfo=ZoneInfo(zone)) if zone else value
    raise ValueError(f"unknown extension type {tag}")


_BULK_BYTES = 256 * 1024
"""From this many bytes a decode runs with the cyclic GC paused (see :func:`_unpack`)."""


def _unpack(body: bytes | memoryview) -> Any:
    """``unpackb``, with the cyclic collector paused for big bodies.

    A 10 MB state decodes into ~100k containers, and every 700 new ones trigger a collection
    that scans them, now and then an older generation's that scans the whole heap: pure
    waste, since decoded MessagePack cannot form a cycle. Paused, the decoded containers are
    walked once by the young collection that follows, and later by the collections that
    promote them, as any new objects are (``benchmarks/bench_decode_gc.py``; figures in its
    README). Filing them straight into the oldest generation (``gc.freeze`` then
    ``unfreeze``) would skip that walk too, but it resets the collector's counts, so a
    process loading big rows often would never run a full collection again and other
    code's garbage cycles would pile up: not done. The pause is process-wide and lasts only
    the decode; a collector someone else disabled stays disabled.
    """
    if len(body) < _BULK_BYTES or not gc.isenabled():
        return ormsgpack.unpackb(body, ext_hook=_ext_hook)
    gc.disable()
    try:
        return ormsgpack.unpackb(body, ext_hook=_ext_hook)
    finally:
        gc.enable()


def plain_decoder(nbytes: int, *, datetimes: bool) -> Callable[[bytes | memoryview], Any]:
    """The decoder for a plain MessagePack body of ``nbytes`` known to hold a datetime or
    not: without one a small body needs no ``ext_hook`` (a keyword less to parse)."""
    if nbytes >= _BULK_BYTES:
        return _unpack
    return unpack_dated if datetimes else ormsgpack.unpackb


def unpack_dated(body: bytes | memoryview) -> Any:
    """A small plain body that may hold a datetime: its extension needs the hook."""
    return ormsgpack.unpackb(body, ext_hook=_ext_hook)


def is_plain(data: bytes) -> bool:
    """Whether a stored payload is neither encrypted nor compressed (readable by any codec,
    key or not): a checksummed frame of a bare body, or an older bare body."""
    return bool(data) and (data[0] in _MAP_START or data[:4] == _CRC_PLAIN)


def state_offset(payload: bytes, head: dict[str, Any], *, datetimes: bool = True) -> int:
    """Where the state's own MessagePack starts in a plain body ``head`` plus a last pair
    ``"state": ...``, so that a reader can decode the state alone (0: not such a body).

    Packing the head again costs a few microseconds; finding the offset by walking the
    body would cost a parse. Checked against the body's bytes, so a layout change reads
    as 0, never as a wrong offset.
    """
    skip = _CRC_HEAD if payload[:4] == _CRC_PLAIN else 0
    if len(head) > 14 or len(payload) <= skip or payload[skip] != 0x81 + len(head):
        return 0  # compressed or encrypted, or a map too big for a one-byte header
    at = skip + len(pack_plain(head, datetimes=datetimes)) + len(_STATE_KEY)
    return at if payload[at - len(_STATE_KEY) : at] == _STATE_KEY else 0


_STATE_KEY = b"\xa5state"  # MessagePack of the str "state"


def pack_plain(payload: dict[str, Any], *, datetimes: bool = True) -> bytes:
    """A payload as a plain body: what :meth:`Codec.encode` writes with no key or compression.

    ``datetimes=False`` promises the payload holds no ``datetime`` (``check_value`` says
    so as it checks values in): it is then packed by msgspec, whose MessagePack is the same
    bytes for everything else tether stores. Its encoding work is about ormsgpack's on
    chat-like state; what differs is the output buffer. ormsgpack grows
    its own by doubling, and glibc serves a block that big with fresh ``mmap``'ed pages, a
    page fault per 4 KB, until the process has freed a bigger block (which raises glibc's
    mmap threshold); msgspec grows its buffer in place on the heap, whose pages stay. So in
    a process that has not freed a bigger block, msgspec is much faster from 100 KB up; in
    one that has, about as fast; a whole :meth:`Codec.encode` (CRC and frame included) is
    never slower (``benchmarks/bench_encode.py`` measures the three; figures in
    ``benchmarks/README.md``). msgspec cannot be told how to write a
    datetime (it writes its own timestamp form and loses the zone, or a bare string for a
    naive one), so a payload that may hold one goes to ormsgpack and our extension type.
    """
    if not datetimes:
        try:
            return _fast_pack(payload)
        except (TypeError, OverflowError):
            pass  # not state check_value passed: ormsgpack says what is wrong
    body: bytes = ormsgpack.packb(payload, default=_default, option=_PACK_OPTS)
    return body


def pack_value(value: Any) -> bytes:
    """One value as its own MessagePack, as a payload packed by ormsgpack holds it, so that
    a payload can carry a value it may never need decoded as bytes (a segment's overwritten
    arguments, see ``stores/_segment.py``); :func:`unpack_dated` reads it back."""
    body: bytes = ormsgpack.packb(value, default=_default, option=_PACK_OPTS)
    return body


_OVERLAP_BYTES = 4 * 1024 * 1024
"""From this size a plain row's CRC runs in a thread of its own while the row decodes (a
thread costs about what zlib's CRC of a megabyte does on a busy host, ISA-L's of a few)."""


def _unpack_checked(data: bytes) -> Any:
    """The body of a plain format-2 frame decoded, its CRC computed meanwhile in another
    thread (zlib and ISA-L release the GIL on big buffers); None when the CRC does not
    match or the body does not decode. Nothing decoded is returned before the check has
    passed."""
    body = memoryview(data)[_CRC_HEAD:]
    crc: list[int] = []
    check = threading.Thread(target=lambda: crc.append(_crc32(body, _CRC_PLAIN_SEED)), daemon=True)
    try:
        check.start()
        started = True
    except RuntimeError:  # no new threads (interpreter shutdown): one after the other
        started = False
        crc.append(_crc32(body, _CRC_PLAIN_SEED))
    try:
        payload = _unpack(body)
    except Exception:
        payload = None
    finally:
        if started:
            check.join()
    if not crc or crc[0] != int.from_bytes(data[4:8], "little"):
        return None
    return payload


def decode_plain(data: bytes, *, vouched: bool = False) -> dict[str, Any] | None:
    """The payload of a plain row this tether reads, else None (compressed, encrypted,
    damaged, a newer schema: :meth:`Codec.decode` then says which). The common case, kept
    short: a small load is mostly overhead. Needs no codec: a plain row reads the same with
    any key. ``Codec._decode_all`` inlines these checks for a chain's rows: change both.

    ``vouched``: the caller compared ``data`` byte for byte with bytes that passed this
    check before (see ``ChainEngine``), so its CRC is not computed again; nor is that of a
    :class:`CheckedRow` whose reader computed it as the bytes came (compared all the same)."""
    body: bytes | memoryview | None
    if data[:4] == _CRC_PLAIN:
        vouched = vouched or _prechecked(data)
        if not vouched and len(data) >= _OVERLAP_BYTES:
            payload = _unpack_checked(data)
            if type(payload) is dict:
                schema = payload.get("v")
                if type(schema) is int and schema <= SCHEMA_VERSION:
                    return payload
            return None  # (the slow path names what is wrong)
        body = _body(data) if vouched else _checked(data)
        if body is None:
            return None  # the slow path names the mismatch
    elif data and data[0] in _MAP_START:
        body = data  # a row from before checksums
    else:
        return None
    try:  # a small body without _unpack's extra call
        small = len(body) < _BULK_BYTES
        payload = ormsgpack.unpackb(body, ext_hook=_ext_hook) if small else _unpack(body)
    except Exception:
        return None
    if type(payload) is dict:
        schema = payload.get("v")
        if type(schema) is int and schema <= SCHEMA_VERSION:
            return payload
    return None


def generate_key() -> str:
    """A new random encryption key, in the form ``TETHER_ENCRYPTION_KEY`` expects."""
    return base64.urlsafe_b64encode(os.urandom(32)).decode()


class Codec:
    """Encodes payload dicts to bytes and back, with optional compression and encryption.

    Args:
        encryption_key: url-safe base64 of 32 bytes (see :func:`generate_key`). When set,
            every payload written is encrypted; payloads are authenticated, so a wrong key
            or altered bytes raise :class:`DecryptionError`, never garbage. Several keys
            (a list, or one string of keys separated by commas, newest first) rotate
            them: the first encrypts, all decrypt, each row naming its key by id. A keyed
            codec refuses plaintext rows (:class:`DecryptionError` naming run and
            version): a row written by a keyless process or substituted for an encrypted
            one would otherwise be read as if it were trusted.
        allow_plaintext: read plaintext rows even with a key (to migrate a store that
            held plaintext before the key was set; writes are still encrypted).
        compress_min_bytes: zstd-compress bodies at least this big (``None``: never).
            Off by default: at 10 MB decompression costs more than it saves on a local
            disk or loopback, but it pays on remote databases and for text-heavy state.
        max_payload_bytes: the most a compressed row may inflate to (256 MiB by default).
            A row declaring more fails with :class:`CheckpointCorrupt` before anything is
            allocated; raise it only if your states really are that big.
    """

    __slots__ = (
        "_aes", "_key_id", "_keys", "_zc", "_zd", "allow_plaintext", "compress_min_bytes",
        "max_payload_bytes",
    )  # fmt: skip

    def __init__(
        self,
        *,
        encryption_key: str | bytes | Sequence[str | bytes] | None = None,
        compress_min_bytes: int | None = None,
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
        allow_plaintext: bool = False,
    ) -> None:
        if max_payload_bytes < 1:
            raise ConfigError("max_payload_bytes must be a positive number of bytes")
        self.max_payload_bytes = max_payload_bytes
        self.allow_plaintext = allow_plaintext
        self._aes: Any = None
        self._key_id = b""
        self._keys: dict[bytes, Any] = {}
        keys = _key_list(encryption_key)
        if keys:
            try:
                from cryptography.hazmat.primitives.ciphers.aead import AESGCM
            except ImportError:  # pragma: no cover - depends on the environment
                raise ConfigError("encryption needs cryptography: pip install 'tether[crypto]'") from None
            for raw in keys:
                self._keys.setdefault(key_id(raw), AESGCM(raw))
            self._key_id = key_id(keys[0])
            self._aes = self._keys[self._key_id]
        self.compress_min_bytes = compress_min_bytes
        self._zc: Any = None
        self._zd: Any = None
        if compress_min_bytes is not None:
            try:
                import zstandard
            except ImportError:
                raise ConfigError("compression needs zstandard: pip install 'tether[zstd]'") from None
            self._zc = zstandard.ZstdCompressor(level=3)
            self._zd = zstandard.ZstdDecompressor()

    @property
    def encrypted(self) -> bool:
        return self._aes is not None

    def encode(self, payload: dict[str, Any], *, datetimes: bool = True) -> bytes:
        """``datetimes=False``: the payload holds none (see :func:`pack_plain`)."""
        body = pack_plain(payload, datetimes=datetimes)
        flags = 0
        if self._zc is not None and len(body) >= (self.compress_min_bytes or 0):
            packed = self._zc.compress(body)
            if len(packed) < len(body) * 0.9:  # keep it only when it pays
                body, flags = packed, flags | _F_ZSTD
        if self._aes is None:
            return _seal(body, flags)  # the integrity check of every unencrypted row
        # encrypted: the GCM tag authenticates header and body, so no CRC is added
        nonce = os.urandom(12)
        header = _MAGIC + bytes((_FORMAT, flags | _F_AES)) + self._key_id + nonce
        sealed: bytes = self._aes.encrypt(nonce, body, header)
        return header + sealed

    @property
    def key_ids(self) -> list[str]:
        """The configured keys' ids (hex), the writing key first."""
        return [k.hex() for k in self._keys]

    def reencrypt(self, data: bytes, *, run_id: str = "", version: int | None = None) -> bytes | None:
        """``data`` (one stored row) encrypted under the writing key, or None when it already
        is or holds nothing (a sealed row): what a key rotation writes back.

        Only the frame changes (key id, nonce, tag) around the same body, compression
        included, so the row keeps its size and its meaning; a row under no configured key,
        a plaintext row or an altered one raises :class:`DecryptionError` naming it.
        """
        if self._aes is None:
            raise ConfigError("re-encrypting needs an encryption key")
        if not data:
            return None
        if not is_encrypted(data):
            raise DecryptionError(
                "a plaintext row in a store configured with an encryption key: it was written "
                "without the key or substituted for an encrypted row, so it is not re-encrypted",
                run_id=run_id,
                version=version,
            )
        if data[4:8] == self._key_id:
            return None  # (not authenticated here: every load of it does that)
        body = self._decrypt(data, run_id=run_id, version=version)  # authenticates it
        nonce = os.urandom(12)
        header = data[:4] + self._key_id + nonce
        sealed: bytes = self._aes.encrypt(nonce, body, header)
        return header + sealed

    def decode(
        self, data: bytes, *, run_id: str = "", version: int | None = None, vouched: bool = False
    ) -> dict[str, Any]:
        """The payload dict; :class:`CheckpointCorrupt` naming the run and version on damage.
        ``vouched``: as :func:`decode_plain` takes it (a plain row only)."""
        if self._aes is not None and not self.allow_plaintext:
            if not is_encrypted(data):
                raise DecryptionError(
                    "a plaintext row in a store configured with an encryption key: it was written "
                    "without the key or substituted for an encrypted row, so it is refused (to migrate "
                    "a store that held plaintext before the key, read it with allow_plaintext=True)",
                    run_id=run_id,
                    version=version,
                )
            return self._decode_slow(data, run_id=run_id, version=version)
        payload = decode_plain(data, vouched=vouched)
        return payload if payload is not None else self._decode_slow(data, run_id=run_id, version=version)

    def _decode_slow(self, data: bytes, *, run_id: str, version: int | None) -> dict[str, Any]:
        def corrupt(why: str) -> CheckpointCorrupt:
            return CheckpointCorrupt(why, run_id=run_id, version=version)

        if data and data[0] in _MAP_START:
            body: bytes | memoryview = data  # a plain body the fast path could not read
            flags = 0
        elif len(data) < 4 or bytes(data[:2]) != _MAGIC:
            raise corrupt("not a tether payload (bad header; truncated or overwritten row)")
        elif data[2] == _FORMAT_CRC:
            flags = data[3]
            checked = _checked(data) if len(data) >= _CRC_HEAD else None
            if checked is None:
                raise corrupt("checksum mismatch: the stored row was altered or truncated")
            if flags & _F_AES:
                raise corrupt("checksummed payload claims encryption (damaged header)")
            body = checked
        else:
            fmt, flags = data[2], data[3]
            if fmt != _FORMAT:
                raise corrupt(f"payload format {fmt} is not supported by this tether (formats 1, 2)")
            body = memoryview(data)[4:]  # no copy of a 10 MB body
        if flags & _F_AES:
            body = self._decrypt(bytes(data), run_id=run_id, version=version)
        if flags & _F_ZSTD:
            if self._zd is None:
                try:
                    import zstandard
                except ImportError:
                    raise ConfigError(
                        "this checkpoint is zstd-compressed: pip install 'tether[zstd]'"
                    ) from None
                self._zd = zstandard.ZstdDecompressor()
            body = self._inflate(body, corrupt)
        try:
            payload = _unpack(body)
        except Exception as exc:
            raise corrupt(f"payload is truncated or corrupt ({exc})") from exc
        if type(payload) is not dict:
            raise corrupt("payload is not a mapping")
        schema = payload.get("v")
        if type(schema) is not int or schema > SCHEMA_VERSION:
            raise corrupt(
                f"written with schema version {schema}, this tether reads up to "
                f"{SCHEMA_VERSION}: upgrade tether"
            )
        return payload

    def _inflate(self, body: bytes | memoryview, corrupt: Callable[[str], CheckpointCorrupt]) -> bytes:
        """A zstd body decompressed, never past its declared size nor ``max_payload_bytes``
        (checked before allocating: a 45 KB bomb declaring 1.5 GB fails at once)."""
        import zstandard

        limit = self.max_payload_bytes
        try:
            declared = zstandard.frame_content_size(body)
        except Exception as exc:
            raise corrupt(f"compressed body is damaged ({exc})") from exc
        if declared > limit:
            raise corrupt(
                f"compressed body declares {declared} bytes, over the codec's limit of {limit} "
                "(a damaged or hostile row; if states really are this big, raise "
                "Codec(max_payload_bytes=...))"
            )
        try:
            if declared >= 0:
                return self._zd.decompress(body)  # type: ignore[no-any-return]
            parts, total = [], 0  # no size declared: inflate by chunks, up to the limit
            with self._zd.stream_reader(body) as reader:
                while chunk := reader.read(1 << 20):
                    total += len(chunk)
                    if total > limit:
                        raise corrupt(f"compressed body inflates past the codec's limit of {limit} bytes")
                    parts.append(chunk)
            return b"".join(parts)
        except CheckpointCorrupt:
            raise
        except Exception as exc:
            raise corrupt(f"compressed body is damaged ({exc})") from exc

    def decode_many(
        self,
        payloads: list[bytes],
        *,
        run_id: str = "",
        versions: list[int] | None = None,
        vouched: list[bool] | None = None,
    ) -> list[dict[str, Any]]:
        """Decode a chain of payloads, naming the version at fault on damage. ``vouched``:
        one flag per payload, as :func:`decode_plain` takes it.

        (Joining plain bodies into one MessagePack array was measured slower than
        decoding them one by one, so each payload is decoded alone.)
        """
        vs: list[int | None] = list(versions) if versions is not None else [None] * len(payloads)
        known = vouched if vouched is not None else [False] * len(payloads)
        pause = gc.isenabled() and sum(map(len, payloads)) >= _BULK_BYTES  # as _unpack, chain-wide
        if pause:
            gc.disable()
        try:
            return self._decode_all(payloads, vs, known, run_id)
        finally:
            if pause:
                gc.enable()

    def _decode_all(
        self, payloads: list[bytes], vs: list[int | None], vouched: list[bool], run_id: str
    ) -> list[dict[str, Any]]:
        """:func:`decode_plain`'s fast path inlined in the loop: a chain is mostly small
        plain deltas, and two Python calls a row are a large part of replaying them.
        Anything else goes to
        :meth:`decode`, which says what is wrong."""
        out: list[dict[str, Any]] = []
        if self._aes is not None:  # keyed: every row must prove itself (see decode)
            return [self.decode(d, run_id=run_id, version=v) for d, v in zip(payloads, vs, strict=True)]
        unpackb, hook, starts, newest = ormsgpack.unpackb, _ext_hook, _MAP_START, SCHEMA_VERSION
        crc32, crc_plain = _crc32, _CRC_PLAIN_SEED
        for data, version, known in zip(payloads, vs, vouched, strict=True):
            if data[:4] == _CRC_PLAIN and len(data) < _BULK_BYTES:
                body = data[_CRC_HEAD:]
                stored = int.from_bytes(data[4:8], "little")
                if known or getattr(data, "crc", None) == stored or crc32(body, crc_plain) == stored:
                    try:
                        payload = unpackb(body, ext_hook=hook)
                    except Exception:
                        payload = None
                    if type(payload) is dict:
                        schema = payload.get("v")
                        if type(schema) is int and schema <= newest:
                            out.append(payload)
                            continue
            elif data and data[0] in starts and len(data) < _BULK_BYTES:  # before checksums
                try:
                    payload = unpackb(data, ext_hook=hook)
                except Exception:
                    payload = None
                if type(payload) is dict:
                    schema = payload.get("v")
                    if type(schema) is int and schema <= newest:
                        out.append(payload)
                        continue
            out.append(self.decode(data, run_id=run_id, version=version, vouched=known))
        return out

    def _decrypt(self, data: bytes, *, run_id: str, version: int | None) -> bytes:
        if len(data) < 20:
            raise DecryptionError("encrypted payload is truncated", run_id=run_id, version=version)
        key_id, nonce, header = data[4:8], data[8:20], data[:20]
        if self._aes is None:
            raise DecryptionError(
                "payload is encrypted but no key is configured: set TETHER_ENCRYPTION_KEY "
                "or pass encryption_key=",
                run_id=run_id,
                version=version,
            )
        aes = self._keys.get(key_id)
        if aes is None:
            raise DecryptionError(
                f"payload was encrypted with another key (key id {key_id.hex()}, "
                f"configured key ids {', '.join(self.key_ids)}): add that key to the list",
                run_id=run_id,
                version=version,
            )
        from cryptography.exceptions import InvalidTag

        try:
            return aes.decrypt(nonce, data[20:], header)  # type: ignore[no-any-return]
        except InvalidTag:
            raise DecryptionError(
                "payload failed authentication: it was altered or truncated",
                run_id=run_id,
                version=version,
            ) from None


def key_id(raw: bytes) -> bytes:
    """The 4-byte id an encrypted row carries to name its key (not secret: a hash prefix)."""
    return hashlib.sha256(b"tether-key-id" + raw).digest()[:4]


def is_encrypted(data: bytes) -> bool:
    """Whether a stored row is an encrypted frame (format 1 with the AES flag)."""
    return len(data) >= 4 and data[:2] == _MAGIC and data[2] == _FORMAT and bool(data[3] & _F_AES)


def _key_list(spec: str | bytes | Sequence[str | bytes] | None) -> list[bytes]:
    if not spec:
        return []
    if isinstance(spec, bytes):
        return [_decode_key(spec)]
    if isinstance(spec, str):
        return [_decode_key(part.strip()) for part in spec.split(",") if part.strip()]
    return [k for item in spec for k in _key_list(item)]


def _decode_key(key: str | bytes) -> bytes:
    if isinstance(key, bytes) and len(key) == 32:
        return key
    try:
        raw = base64.urlsafe_b64decode(key if isinstance(key, bytes) else key.encode())
    except Exception:
        raw = b""
    if len(raw) != 32:
        raise ConfigError(
            "encryption key must be url-safe base64 of 32 bytes; make one with "
            "`tether keygen` (tether.state.serde.generate_key())"
        )
    return raw
