"""Bytes on disk: one place that turns checkpoint payloads into bytes and back.

Layout of a stored payload::

    body                                                    plain (no compression, no key)
    b"TT" | format (1 byte) | flags (1 byte) | [key id (4) | nonce (12)] | body

A plain body is stored as it is: prefixing a frame would copy a 10 MB body on every save
and slice it on every load. The two cannot be confused: a body is a MessagePack map, so
its first byte is 0x80-0x8f, 0xde or 0xdf, while a frame starts with ``T`` (0x54). Plain
payloads written framed (flags 0) by earlier versions still read.

``body`` is MessagePack (``ormsgpack``: at 10 MB it decodes ~2.5x faster than JSON),
optionally zstd-compressed, then optionally AES-256-GCM-encrypted. ``datetime`` travels
as a MessagePack extension holding its ISO form (and zone key), so it comes back equal
and with the same kind of tzinfo. Decoding builds only dicts, lists and scalars: no
class is ever constructed from stored bytes.

Payload dicts carry ``"v": SCHEMA_VERSION``; a payload from a newer tether fails fast.
"""

from __future__ import annotations

import base64
import datetime as dt
import functools
import gc
import hashlib
import os
from collections.abc import Callable
from typing import Any
from zoneinfo import ZoneInfo

import ormsgpack

from tether.errors import CheckpointCorrupt, ConfigError, DecryptionError

__all__ = [
    "SCHEMA_CHANGES",
    "SCHEMA_VERSION",
    "Codec",
    "decode_plain",
    "generate_key",
    "is_plain",
    "pack_plain",
    "state_offset",
]

SCHEMA_VERSION = 2
SCHEMA_CHANGES = {
    1: "first layout: full and delta payloads, ops (key, op, arg)",
    2: "segment payloads: the ops of several versions in one row (stores/_segment.py)",
}

_MAGIC = b"TT"
_FORMAT = 1
_F_ZSTD = 1
_F_AES = 2
_EXT_DATETIME = 1
_MAP_START = frozenset((*range(0x80, 0x90), 0xDE, 0xDF))
"""First byte of a MessagePack map: a plain body, stored without a frame."""
_PACK_OPTS = ormsgpack.OPT_PASSTHROUGH_DATETIME | ormsgpack.OPT_PASSTHROUGH_SUBCLASS


def _fast_pack(payload: Any) -> bytes:
    """The encoder for payloads known to hold no datetime (see :func:`pack_plain`)."""
    return _msgspec_encoder()(payload)


@functools.cache
def _msgspec_encoder() -> Callable[[Any], bytes]:
    import msgspec  # on first use: its import (typing_extensions, inspect…) costs ~17 ms

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
    waste, since decoded MessagePack cannot form a cycle. Paused, one young collection runs
    later instead. ``benchmarks/bench_decode_gc.py`` (decode + a little work per iteration,
    10 MB payload): 0.92x the time beside 40 MB of other live state, 0.60x beside 200 MB;
    no difference at 1 MB. (The pause is process-wide and lasts only the decode; a
    collector someone else disabled stays disabled.)
    """
    if len(body) < _BULK_BYTES or not gc.isenabled():
        return ormsgpack.unpackb(body, ext_hook=_ext_hook)
    gc.disable()
    try:
        return ormsgpack.unpackb(body, ext_hook=_ext_hook)
    finally:
        gc.enable()


def is_plain(data: bytes) -> bool:
    """Whether a stored payload is a bare body (readable by any codec, key or not)."""
    return bool(data) and data[0] in _MAP_START


def state_offset(payload: bytes, head: dict[str, Any], *, datetimes: bool = True) -> int:
    """Where the state's own MessagePack starts in a plain body ``head`` plus a last pair
    ``"state": ...``, so that a reader can decode the state alone (0: not such a body).

    Packing the head again costs a few microseconds; finding the offset by walking the
    body would cost a parse. Checked against the body's bytes, so a layout change reads
    as 0, never as a wrong offset.
    """
    if len(head) > 14 or not payload or payload[0] != 0x81 + len(head):
        return 0  # a framed body, or a map too big for a one-byte header
    at = len(pack_plain(head, datetimes=datetimes)) + len(_STATE_KEY)
    return at if payload[at - len(_STATE_KEY) : at] == _STATE_KEY else 0


_STATE_KEY = b"\xa5state"  # MessagePack of the str "state"


def pack_plain(payload: dict[str, Any], *, datetimes: bool = True) -> bytes:
    """A payload as a plain body: what :meth:`Codec.encode` writes with no key or compression.

    ``datetimes=False`` promises the payload holds no ``datetime`` (``check_value`` says
    so as it checks values in): it is then packed by msgspec, whose MessagePack is the same
    bytes for everything else tether stores, in about a third of ormsgpack's time from
    100 KB up on chat-like state (``benchmarks/bench_encode.py``; the same at 1 KB).
    msgspec cannot be told how to write a datetime (it writes its own timestamp form and
    loses the zone, or a bare string for a naive one), so a payload that may hold one goes
    to ormsgpack and our extension type.
    """
    if not datetimes:
        try:
            return _fast_pack(payload)
        except (TypeError, OverflowError):
            pass  # not state check_value passed: ormsgpack says what is wrong
    body: bytes = ormsgpack.packb(payload, default=_default, option=_PACK_OPTS)
    return body


def decode_plain(data: bytes) -> dict[str, Any] | None:
    """The payload of a plain body this tether reads, else None (framed, damaged, a newer
    schema: :meth:`Codec.decode` then says which). The common case, kept short: a small
    load is mostly overhead. Needs no codec: a plain body reads the same with any key.
    ``Codec._decode_all`` inlines these checks for a chain's rows: change both together."""
    if data and data[0] in _MAP_START:
        try:
            if len(data) < _BULK_BYTES:  # without _unpack's extra call
                payload = ormsgpack.unpackb(data, ext_hook=_ext_hook)
            else:
                payload = _unpack(data)
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
            or altered bytes raise :class:`DecryptionError`, never garbage.
        compress_min_bytes: zstd-compress bodies at least this big (``None``: never).
            Off by default: at 10 MB decompression costs more than it saves on a local
            disk or loopback, but it pays on remote databases and for text-heavy state.
    """

    __slots__ = ("_aes", "_key_id", "_zc", "_zd", "compress_min_bytes")

    def __init__(
        self, *, encryption_key: str | bytes | None = None, compress_min_bytes: int | None = None
    ) -> None:
        self._aes: Any = None
        self._key_id = b""
        if encryption_key:
            raw = _decode_key(encryption_key)
            try:
                from cryptography.hazmat.primitives.ciphers.aead import AESGCM
            except ImportError:  # pragma: no cover - depends on the environment
                raise ConfigError("encryption needs cryptography: pip install 'tether[crypto]'") from None
            self._aes = AESGCM(raw)
            self._key_id = hashlib.sha256(b"tether-key-id" + raw).digest()[:4]
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
            return body if not flags else _MAGIC + bytes((_FORMAT, flags)) + body
        nonce = os.urandom(12)
        header = _MAGIC + bytes((_FORMAT, flags | _F_AES)) + self._key_id + nonce
        sealed: bytes = self._aes.encrypt(nonce, body, header)
        return header + sealed

    def decode(self, data: bytes, *, run_id: str = "", version: int | None = None) -> dict[str, Any]:
        """The payload dict; :class:`CheckpointCorrupt` naming the run and version on damage."""
        payload = decode_plain(data)
        return payload if payload is not None else self._decode_slow(data, run_id=run_id, version=version)

    def _decode_slow(self, data: bytes, *, run_id: str, version: int | None) -> dict[str, Any]:
        def corrupt(why: str) -> CheckpointCorrupt:
            return CheckpointCorrupt(why, run_id=run_id, version=version)

        if data and data[0] in _MAP_START:
            body: bytes | memoryview = data  # a plain body the fast path could not read
            flags = 0
        elif len(data) < 4 or bytes(data[:2]) != _MAGIC:
            raise corrupt("not a tether payload (bad header; truncated or overwritten row)")
        else:
            fmt, flags = data[2], data[3]
            if fmt != _FORMAT:
                raise corrupt(f"payload format {fmt} is not supported by this tether (format 1)")
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
            try:
                body = self._zd.decompress(body)
            except Exception as exc:
                raise corrupt(f"compressed body is damaged ({exc})") from exc
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

    def decode_many(
        self, payloads: list[bytes], *, run_id: str = "", versions: list[int] | None = None
    ) -> list[dict[str, Any]]:
        """Decode a chain of payloads, naming the version at fault on damage.

        (Joining plain bodies into one MessagePack array was measured 3x slower than
        decoding them one by one at 1,000 x 10 KB, so each payload is decoded alone.)
        """
        vs: list[int | None] = list(versions) if versions is not None else [None] * len(payloads)
        pause = gc.isenabled() and sum(map(len, payloads)) >= _BULK_BYTES  # as _unpack, chain-wide
        if pause:
            gc.disable()
        try:
            return self._decode_all(payloads, vs, run_id)
        finally:
            if pause:
                gc.enable()

    def _decode_all(self, payloads: list[bytes], vs: list[int | None], run_id: str) -> list[dict[str, Any]]:
        """:func:`decode_plain`'s fast path inlined in the loop: a chain is mostly small
        plain deltas, and the two Python calls a row cost a quarter of replaying 1,000
        deltas of 200 B (1.63 vs 1.17-1.26 ms, a throwaway script). Anything else goes to
        :meth:`decode`, which says what is wrong."""
        out: list[dict[str, Any]] = []
        unpackb, hook, starts, newest = ormsgpack.unpackb, _ext_hook, _MAP_START, SCHEMA_VERSION
        for data, version in zip(payloads, vs, strict=True):
            if data and data[0] in starts and len(data) < _BULK_BYTES:
                try:
                    payload = unpackb(data, ext_hook=hook)
                except Exception:
                    payload = None
                if type(payload) is dict:
                    schema = payload.get("v")
                    if type(schema) is int and schema <= newest:
                        out.append(payload)
                        continue
            out.append(self.decode(data, run_id=run_id, version=version))
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
        if key_id != self._key_id:
            raise DecryptionError(
                f"payload was encrypted with another key (key id {key_id.hex()}, "
                f"configured key id {self._key_id.hex()})",
                run_id=run_id,
                version=version,
            )
        from cryptography.exceptions import InvalidTag

        try:
            return self._aes.decrypt(nonce, data[20:], header)  # type: ignore[no-any-return]
        except InvalidTag:
            raise DecryptionError(
                "payload failed authentication: it was altered or truncated",
                run_id=run_id,
                version=version,
            ) from None


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
