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

import gzip
import struct
from pathlib import Path
from typing import Any, Iterator

import crc32c
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import DecodeError

__all__ = ["TFRecordError", "iter_records", "Example", "parse_example"]


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


def iter_records(path: str | Path) -> Iterator[bytes]:
    """The records of a TFRecord file (GZIP-compressed or plain: detected), CRCs checked."""
    path = Path(path)
    with open(path, "rb") as raw:
        gz = raw.read(2) == b"\x1f\x8b"
    opener = gzip.open if gz else open
    n = 0
    try:
        with opener(path, "rb") as f:
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
                yield data
                n += 1
    except (OSError, EOFError) as e:  # gzip.BadGzipFile is an OSError
        raise TFRecordError(f"record {n}: {e}") from None


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
    """A serialised ``tf.train.Example``; raises :class:`TFRecordError` when it is not one."""
    try:
        return Example().FromString(data)
    except DecodeError as e:
        raise TFRecordError(f"not a tf.train.Example ({e})") from None
