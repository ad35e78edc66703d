"""A small TFRecord reader: the record framing plus ``tf.train.Example`` parsing, no TensorFlow.

Why hand-written: the ``tfrecord`` package on PyPI imports torch when imported (seconds
of start-up for a data import) and does not verify the record CRCs, so a corrupt file
would pass silently. The framing is four fields (TensorFlow's
``core/lib/io/record_writer.cc``)::

    uint64 length | uint32 masked_crc32c(length) | byte data[length] | uint32 masked_crc32c(data)

and ``tf.train.Example`` (``tensorflow/core/example/example.proto`` and
``feature.proto``) is declared below from its published field numbers with the
protobuf runtime, so no generated code is vendored. CRC32C comes from the
``crc32c`` package (a small C extension).
"""

from __future__ import annotations

import contextlib
import gzip
import struct
import zlib
from pathlib import Path
from typing import Any, BinaryIO, Iterator

import crc32c
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import DecodeError

__all__ = ["TFRecordError", "iter_records", "Example", "parse_example", "count_values", "MAX_MESSAGE_VALUES"]


class TFRecordError(ValueError):
    """A broken TFRecord file; the message names the record."""


#: the largest record read (one AndroidControl episode with its PNG screenshots is a few MiB; a GZIP
#: file can declare any size in a few bytes)
MAX_RECORD_BYTES = 256 << 20
_CHUNK = 16 << 20


def _read_upto(f: Any, length: int) -> bytes:
    """``length`` bytes of ``f`` (fewer at the end of the file), read a chunk at a time."""
    if length <= _CHUNK:
        return f.read(length)
    parts, left = [], length
    while left:
        part = f.read(min(left, _CHUNK))
        if not part:
            break
        parts.append(part)
        left -= len(part)
    return b"".join(parts)


def _masked_crc(data: bytes) -> int:
    c = crc32c.crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def iter_records(path: str | Path, f: BinaryIO | None = None) -> Iterator[bytes]:
    """The records of a TFRecord file (GZIP-compressed or plain: detected), CRCs checked. ``f``: the
    file already opened (by the import's gate, :func:`guiagent.datasets._common.open_inside`), else
    ``path`` is opened; either way it is closed at the end."""
    path = Path(path)
    raw = f if f is not None else open(path, "rb")
    n = 0
    try:
        with raw:
            gz = raw.read(2) == b"\x1f\x8b"
            raw.seek(0)
            with (gzip.GzipFile(fileobj=raw, mode="rb") if gz else contextlib.nullcontext(raw)) as f:
                while True:
                    head = f.read(12)
                    if not head:
                        return
                    if len(head) < 12:
                        raise TFRecordError(f"record {n}: truncated header ({len(head)} of 12 bytes)")
                    length, crc = struct.unpack("<QI", head)
                    if _masked_crc(head[:8]) != crc:
                        raise TFRecordError(f"record {n}: length CRC mismatch (not a TFRecord file, or corrupt)")
                    if length > MAX_RECORD_BYTES:
                        raise TFRecordError(f"record {n}: declares {length:,} bytes, more than the "
                                            f"{MAX_RECORD_BYTES // 2**20} MiB a record may have")
                    data = _read_upto(f, length)  # in chunks: a truncated file never allocates the declared length
                    tail = f.read(4)
                    if len(data) < length or len(tail) < 4:
                        raise TFRecordError(f"record {n}: truncated ({len(data)} of {length} bytes)")
                    if _masked_crc(data) != struct.unpack("<I", tail)[0]:
                        raise TFRecordError(f"record {n}: data CRC mismatch (corrupt)")
                    box = [data]
                    del data
                    yield box.pop()  # nothing here keeps the record while the caller parses it
                    n += 1
    except (OSError, EOFError, zlib.error) as e:  # gzip.BadGzipFile is an OSError
        raise TFRecordError(f"record {n}: {e}") from None


# -- a message's size before it is parsed ----------------------------------------------------------
# The protobuf runtime builds an object for every value of a message: a packed int64 list of one-byte
# zeros is 8 bytes per byte of record once parsed (and 36 once a Python list), a repeated empty
# sub-message ~100 bytes for 2 bytes of record. So a record is walked once by its wire format first
# (tags, lengths and varints only: nothing is copied), counting its values, and refused past a bound.

#: the most values (sub-messages, list entries, fields) a record may hold when parsed: ~100 bytes each
#: parsed, so at most ~100 MB of objects whatever the record. A tf.train.Example episode holds a few
#: hundred; a screen's accessibility forest tens of thousands.
MAX_MESSAGE_VALUES = 1_000_000

_PACKED_WIDTH = {  # bytes per value of a packed repeated scalar (0: varint, at least one byte)
    FieldDescriptor.TYPE_DOUBLE: 8, FieldDescriptor.TYPE_FIXED64: 8, FieldDescriptor.TYPE_SFIXED64: 8,
    FieldDescriptor.TYPE_FLOAT: 4, FieldDescriptor.TYPE_FIXED32: 4, FieldDescriptor.TYPE_SFIXED32: 4,
}


def _repeated(field: Any) -> bool:
    rep = getattr(field, "is_repeated", None)  # protobuf 6+; ``label`` before (and gone in 7)
    return bool(rep) if rep is not None else field.label == FieldDescriptor.LABEL_REPEATED


def _varint(buf: memoryview, i: int, end: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if i >= end:
            raise TFRecordError("a truncated varint")
        b = buf[i]
        i += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, i
        shift += 7
        if shift > 63:
            raise TFRecordError("a varint longer than 10 bytes")


def count_values(data: bytes | memoryview, descriptor: Any, limit: int = MAX_MESSAGE_VALUES) -> int:
    """How many values ``data`` (a serialised message of type ``descriptor``) holds once parsed: every
    field occurrence, every element of a packed list (a varint list counted as its byte length, an
    upper bound), sub-messages walked alike. :class:`TFRecordError` past ``limit`` (counting stops there)
    or for bytes that are not a message's wire format."""
    buf = memoryview(data)
    count = 0
    stack = [(0, len(buf), descriptor)]
    while stack:
        i, end, desc = stack.pop()
        while i < end:
            key, i = _varint(buf, i, end)
            number, wire = key >> 3, key & 7
            field = desc.fields_by_number.get(number) if desc is not None else None
            count += 1
            if count > limit:
                raise TFRecordError(f"holds more than {limit:,} values; a record may hold at most that many")
            if wire == 0:
                _, i = _varint(buf, i, end)
            elif wire == 1:
                i += 8
            elif wire == 5:
                i += 4
            elif wire == 2:
                length, i = _varint(buf, i, end)
                if i + length > end:
                    raise TFRecordError("a field runs past the end of its message")
                if field is not None and field.type == FieldDescriptor.TYPE_MESSAGE:
                    stack.append((i, i + length, field.message_type))
                elif field is not None and _repeated(field) and field.type not in (
                        FieldDescriptor.TYPE_STRING, FieldDescriptor.TYPE_BYTES):  # a packed list
                    width = _PACKED_WIDTH.get(field.type, 0)
                    count += length // width if width else length
                    if count > limit:
                        raise TFRecordError(f"holds more than {limit:,} values (a packed list of {length:,} bytes); "
                                            f"a record may hold at most that many")
                i += length
            else:  # groups (3, 4): none in these messages
                raise TFRecordError(f"an unsupported field encoding (wire type {wire})")
            if i > end:
                raise TFRecordError("a field runs past the end of its message")
    return count


def _example_class() -> Any:
    F = descriptor_pb2.FieldDescriptorProto
    fd = descriptor_pb2.FileDescriptorProto(
        name="guiagent_tf_example.proto", package="guiagent_tf", syntax="proto3"
    )

    def msg(name: str, fields: list[tuple[str, int, int, int, str | None]], oneof: str | None = None) -> Any:
        m = fd.message_type.add(name=name)
        if oneof:
            m.oneof_decl.add(name=oneof)
        for fname, num, ftype, label, tname in fields:
            f = m.field.add(name=fname, number=num, type=ftype, label=label)
            if tname:
                f.type_name = tname
            if oneof:
                f.oneof_index = 0
        return m

    rep, opt = F.LABEL_REPEATED, F.LABEL_OPTIONAL
    msg("BytesList", [("value", 1, F.TYPE_BYTES, rep, None)])
    fl = msg("FloatList", [("value", 1, F.TYPE_FLOAT, rep, None)])
    il = msg("Int64List", [("value", 1, F.TYPE_INT64, rep, None)])
    fl.field[0].options.packed = True
    il.field[0].options.packed = True
    msg(
        "Feature",
        [
            ("bytes_list", 1, F.TYPE_MESSAGE, opt, ".guiagent_tf.BytesList"),
            ("float_list", 2, F.TYPE_MESSAGE, opt, ".guiagent_tf.FloatList"),
            ("int64_list", 3, F.TYPE_MESSAGE, opt, ".guiagent_tf.Int64List"),
        ],
        oneof="kind",
    )
    feats = msg("Features", [("feature", 1, F.TYPE_MESSAGE, rep, ".guiagent_tf.Features.FeatureEntry")])
    entry = feats.nested_type.add(name="FeatureEntry")
    entry.field.add(name="key", number=1, type=F.TYPE_STRING, label=opt)
    entry.field.add(name="value", number=2, type=F.TYPE_MESSAGE, label=opt, type_name=".guiagent_tf.Feature")
    entry.options.map_entry = True
    msg("Example", [("features", 1, F.TYPE_MESSAGE, opt, ".guiagent_tf.Features")])
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fd)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("guiagent_tf.Example"))


_EXAMPLE: Any = None


def Example() -> Any:  # noqa: N802 - reads like the proto class it returns
    """The ``tf.train.Example`` message class (built once)."""
    global _EXAMPLE
    if _EXAMPLE is None:
        _EXAMPLE = _example_class()
    return _EXAMPLE


def parse_example(data: bytes) -> Any:
    """A serialised ``tf.train.Example``; raises :class:`TFRecordError` when it is not one, or when it
    would hold more than :data:`MAX_MESSAGE_VALUES` values parsed (:func:`count_values`, before parsing)."""
    try:
        count_values(data, Example().DESCRIPTOR)
    except TFRecordError as e:
        raise TFRecordError(f"not a tf.train.Example we read: it {e}" if str(e).startswith("holds") else
                            f"not a tf.train.Example ({e})") from None
    try:
        return Example().FromString(data)
    except DecodeError as e:
        raise TFRecordError(f"not a tf.train.Example ({e})") from None
