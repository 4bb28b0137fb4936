"""Counting a batch request's items in its bytes, before the request is decoded.

Invariant 9 (``docs/architecture.md``): a batch call over its item cap is refused before
any work, and decoding is work — a 4 MB SubmitReportBatch of 2 M empty reports costs
protobuf ~170 MB and 0.2 s to decode. :func:`count_items` walks the top-level fields of the
serialized message and counts the entries of one repeated field, stopping as soon as the
count is over the cap, so an oversized request costs at most ``cap + 1`` steps and no
allocation. The wire format is protobuf's (tag varint, then a varint, 8 bytes, a
length-prefixed run or 4 bytes by wire type); anything else is left to the decoder.

The HTTP port also takes the request as JSON (Connect): :func:`count_json_items` counts
the entries of the top-level array of one field in the JSON text the same way — tokens
read by one regular expression, the walk stopped at ``cap + 1`` — since protobuf's JSON
parser is slower still (a 4 MB EnrollBatch: 4.1 s of CPU).
"""

from __future__ import annotations

import json
import re

__all__ = ["count_items", "count_json_items"]


def count_items(data: bytes, field: int, cap: int) -> int | None:
    """Entries of the length-delimited top-level field number ``field`` in the serialized
    message ``data``, counted up to ``cap + 1`` (the walk stops there: an answer of
    ``cap + 1`` means "more than ``cap``"); None when the bytes are not a well-formed
    message at the top level (the decoder then says so). About 1 µs per item: the
    varints are read inline (this runs before every batch call is decoded)."""
    i, end, count = 0, len(data), 0
    want = (field << 3) | 2
    while i < end:
        tag = data[i]
        i += 1
        if tag >= 0x80:  # a tag of more than one byte
            tag, i = _rest_of_varint(data, i, end, tag)
            if tag < 0:
                return None
        wire = tag & 7
        if wire == 2:  # length-delimited: skip the run
            if i >= end:
                return None
            n = data[i]
            i += 1
            if n >= 0x80:
                n, i = _rest_of_varint(data, i, end, n)
                if n < 0:
                    return None
            i += n
            if tag == want:
                count += 1
                if count > cap:
                    return count
        elif wire == 0:  # varint
            while i < end and data[i] >= 0x80:
                i += 1
            i += 1
        elif wire == 1:  # 64-bit
            i += 8
        elif wire == 5:  # 32-bit
            i += 4
        else:  # groups (deprecated) or invalid
            return None
    return count if i == end else None


def _rest_of_varint(data: bytes, i: int, end: int, first: int) -> tuple[int, int]:
    """(value, next index) of a varint whose first byte ``first`` (≥ 0x80) was read and
    whose next byte is ``data[i]``; (-1, end) when it runs off or exceeds 64 bits."""
    value, shift = first & 0x7F, 7
    while i < end and shift < 64:
        b = data[i]
        i += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, i
        shift += 7
    return -1, end


#: a JSON string (escapes included) or a bracket; everything else (numbers, literals,
#: commas, colons, white space) is skipped over by the regular expression's search, in C
_JSON_TOKEN = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]', re.DOTALL)
_SPACE = b" \t\r\n"


def count_json_items(data: bytes, names: frozenset[str], cap: int) -> int | None:
    """Entries of the array under the top-level key(s) ``names`` (a field's JSON name and
    its proto name) of the JSON object ``data``, counted up to ``cap + 1`` as
    :func:`count_items` does. The entries of a batch are messages, so JSON objects: the
    walk counts the objects opened directly inside that array (anything else there is
    refused by the decoder at its first entry). None when ``data`` is not a JSON object as
    far as this walk can tell (the decoder then says what is wrong)."""
    depth, count, key, target = 0, 0, None, -1
    end = len(data)
    for m in _JSON_TOKEN.finditer(data):
        c = data[m.start()]
        if c == 0x22:  # a string: a key of the top-level object if a colon follows
            if depth == 1:
                j = m.end()
                while j < end and data[j] in _SPACE:
                    j += 1
                if j < end and data[j] == 0x3A:
                    try:
                        key = json.loads(m.group())
                    except ValueError:
                        return None
        elif c == 0x7B or c == 0x5B:  # { [
            if depth == 0 and c != 0x7B:
                return None
            if depth == target and c == 0x7B:
                count += 1
                if count > cap:
                    return count
            depth += 1
            if depth == 2 and c == 0x5B and key in names:
                target = 2
        else:  # } ]
            depth -= 1
            if depth < 0:
                return None
            if depth == 1:
                target = -1
    return count if depth == 0 else None
