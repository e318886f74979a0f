#!/usr/bin/python3
"""Reference decoder of the "sparse" codec, written from docs/protocol.md
section 7 alone (not from the C++ sources), to check that the text is exact.

    sparse_reference.py LAYOUT.json MESSAGE UPDATE THETA.f32 OUT_MESSAGE.f32 OUT_THETA.f32

LAYOUT.json: {"chunk": C, "k": k, "update_bits": 8 or 4, "tensor_elements": [N_0, N_1, ...]}.
Writes the decoded message (P float32 LE) and theta + update (P float32 LE).
Exits 1 with the protocol's error code on a malformed payload.
"""
import json
import sys

import numpy as np


class Refused(Exception):
    pass


def field(buf, pos, count, bits):
    """count values of `bits` bits, LSB first, padded to a whole byte."""
    size = (count * bits + 7) // 8
    if pos + size > len(buf):
        raise Refused("bad_size")
    raw = np.frombuffer(buf, np.uint8, size, pos)
    flat = np.unpackbits(raw, bitorder="little")[: count * bits].reshape(count, bits)
    values = (flat.astype(np.int64) << np.arange(bits, dtype=np.int64)).sum(axis=1)
    return values, pos + size


def indices(buf, pos, count, length):
    """An index field (Elias-Fano): count low parts of r bits, then the high bits."""
    r = max(0, (length // count).bit_length() - 1)
    low, pos = field(buf, pos, count, r) if r else (np.zeros(count, np.int64), pos)
    high, pos = field(buf, pos, count + ((length - 1) >> r), 1)
    ones = np.flatnonzero(high)
    size = (count + ((length - 1) >> r) + 7) // 8
    padding = np.unpackbits(np.frombuffer(buf, np.uint8, size, pos - size), bitorder="little")
    if len(ones) != count or padding.sum() != count:
        raise Refused("bad_index")
    index = ((ones - np.arange(count)) << r) + low
    check_indices(index, length)
    return index, pos


def floats(buf, pos, count):
    if pos + 4 * count > len(buf):
        raise Refused("bad_size")
    return np.frombuffer(buf, "<f4", count, pos), pos + 4 * count


def check_indices(index, length):
    if np.any(index >= length) or np.any(np.diff(index) <= 0):
        raise Refused("bad_index")


def chunks(layout):
    """(first element in the flat vector, chunk length) of every chunk."""
    chunk, offset = layout["chunk"], 0
    for n in layout["tensor_elements"]:
        yield offset, None  # a tensor starts
        for first in range(0, n, chunk):
            yield offset + first, min(chunk, n - first)
        offset += n


def decode_message(layout, buf):
    chunk, k = layout["chunk"], layout["k"]
    out = np.zeros(sum(layout["tensor_elements"]), np.float32)
    pos, table = 0, None
    for first, length in chunks(layout):
        if length is None:
            table, pos = floats(buf, pos, 4)
            if not np.all(np.isfinite(table)):
                raise Refused("non_finite")
            continue
        kept = -(-k * length // chunk)
        index, pos = indices(buf, pos, kept, length)
        codes, pos = field(buf, pos, kept, 2)
        out[first + index] = table[codes]
    if pos != len(buf):
        raise Refused("bad_size")
    return out


def apply_update(layout, buf, theta):
    theta = theta.copy()
    bits = layout.get("update_bits", 8)
    pos = 0
    for first, length in chunks(layout):
        if length is None:
            continue
        if pos + 2 > len(buf):
            raise Refused("bad_size")
        count = int.from_bytes(buf[pos : pos + 2], "little")
        pos += 2
        if count == 0:
            continue
        if count > length:
            raise Refused("bad_index")
        scale, pos = floats(buf, pos, 1)
        index, pos = indices(buf, pos, count, length)
        q, pos = field(buf, pos, count, bits)  # two's complement, `bits` wide
        q = np.where(q >= 1 << (bits - 1), q - (1 << bits), q)
        with np.errstate(over="ignore"):
            x = q.astype(np.float32) * scale[0]  # one float32 multiplication
        if not np.all(np.isfinite(x)):
            raise Refused("non_finite")
        theta[first + index] = theta[first + index] + x  # one float32 addition
    if pos != len(buf):
        raise Refused("bad_size")
    return theta


def main():
    layout_path, message_path, update_path, theta_path, out_message, out_theta = sys.argv[1:7]
    with open(layout_path) as f:
        layout = json.load(f)
    read = lambda path: open(path, "rb").read()
    try:
        decode_message(layout, read(message_path)).astype("<f4").tofile(out_message)
        theta = np.frombuffer(read(theta_path), "<f4").astype(np.float32)
        apply_update(layout, read(update_path), theta).astype("<f4").tofile(out_theta)
    except Refused as refused:
        print(refused.args[0], file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
