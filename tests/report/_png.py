"""Read a PNG's pixels with the standard library (zlib, struct) and numpy: enough to tell
whether a screenshot is blank. 8-bit RGB and RGBA, not interlaced: what Chromium writes."""

from __future__ import annotations

import struct
import zlib

import numpy as np
import numpy.typing as npt

_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def read_png(data: bytes) -> npt.NDArray[np.uint8]:
    """The image as an array of shape (height, width, channels)."""
    assert data.startswith(_SIGNATURE), "not a PNG"
    pos = len(_SIGNATURE)
    idat = []
    width = height = channels = 0
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind = data[pos + 4 : pos + 8]
        body = data[pos + 8 : pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8, f"{depth}-bit PNGs are not read here"
            assert interlace == 0, "interlaced PNGs are not read here"
            channels = {2: 3, 6: 4}[colour]
        elif kind == b"IDAT":
            idat.append(body)
        elif kind == b"IEND":
            break
    raw = zlib.decompress(b"".join(idat))
    stride = width * channels
    out = np.zeros((height, stride), dtype=np.uint8)
    previous = bytearray(stride)
    for y in range(height):
        line = raw[y * (stride + 1) : (y + 1) * (stride + 1)]
        row = _unfilter(line[0], bytearray(line[1:]), previous, channels)
        out[y] = np.frombuffer(bytes(row), dtype=np.uint8)
        previous = row
    return out.reshape(height, width, channels)


def _unfilter(kind: int, row: bytearray, up: bytearray, bpp: int) -> bytearray:
    if kind == 0:
        return row
    if kind == 2:
        return bytearray((a + b) & 0xFF for a, b in zip(row, up, strict=True))
    for i in range(len(row)):
        left = row[i - bpp] if i >= bpp else 0
        if kind == 1:
            row[i] = (row[i] + left) & 0xFF
        elif kind == 3:
            row[i] = (row[i] + (left + up[i]) // 2) & 0xFF
        else:  # 4: Paeth
            corner = up[i - bpp] if i >= bpp else 0
            p = left + up[i] - corner
            pa, pb, pc = abs(p - left), abs(p - up[i]), abs(p - corner)
            pred = left if pa <= pb and pa <= pc else (up[i] if pb <= pc else corner)
            row[i] = (row[i] + pred) & 0xFF
    return row
