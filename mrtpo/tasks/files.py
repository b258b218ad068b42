"""Reading dataset and responses files: UTF-8 text with the bad line named, JSON lines split
on line feeds only.

Every `--data` and `--responses` reader goes through here, so the same file gives the same
error whichever task or command reads it:
- a file that is not UTF-8 is refused naming the file, the line, the column and the byte, with
  the command that converts it (a UTF-8 byte-order mark is accepted and dropped);
- a directory where a file is expected, or a missing file, is named as such;
- a file over `MAX_FILE_BYTES`, or with a line over `MAX_LINE_BYTES`, is refused naming the file
  (and the line) before more of it is read, so that `/dev/zero` or a stray binary cannot
  exhaust memory;
- JSON Lines are split on "\\n" only (a trailing "\\r" is dropped), as the JSON Lines format
  defines them: `str.splitlines` would also split at U+2028, U+2029, U+0085, "\\x0b", "\\x0c",
  "\\x1c"-"\\x1e" and a lone "\\r", which JSON allows raw inside a string;
- `read_lines` streams a JSON Lines file (one line in memory at a time, the same refusals raised
  when the reader reaches them), so a reader built on it holds one row at a time and a command
  that looks at each example once (`mrtpo blocks lint`) needs the same memory for any row count;
  `read_json_array` streams the rows of a file that is one JSON array (Spider, BIRD, a .json
  of instructions) the same way, one row parsed and held at a time; `read_text` reads a whole
  document (a JSON object, which has no rows to stream);
- `UniqueIds` finds a repeated row id for a reader to refuse, naming both rows, holding an
  8-byte digest per id in a flat table rather than the id and its row (about 16 bytes a row);
- `read_records` reads a responses file (JSONL or one JSON array) for `mrtpo eval`
  (mrtpo.evaluation.responses) and `mrtpo blocks`/`credit` (mrtpo.blocks.samples) alike.
"""
from __future__ import annotations

import codecs
import hashlib
import json
from array import array
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

#: the most one data, responses or log file may hold, and one line of it (one JSON row)
MAX_FILE_BYTES = 1 << 30
MAX_LINE_BYTES = 64 << 20
_CHUNK = 1 << 20
_BOM = b"\xef\xbb\xbf"  # a UTF-8 byte-order mark, accepted at the start of a file and dropped

from mrtpo import textio


def read_text(path: str | Path, error: type[Exception] = ValueError, what: str = "file") -> str:
    """The text of `path`, decoded as UTF-8; `error(message)` on a missing file, a directory
    or bytes that are not UTF-8 (the message names the file, line and column)."""
    p = Path(path)
    with _open_bounded(p, error, what) as f:
        try:
            data = _read_bounded(p, f, error, what)
        except OSError as exc:
            raise error(f"{p}: cannot be read ({exc.strerror or exc})") from None
    _refuse_utf16(p, bytes(data[:4096]), error)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        start = exc.start + (3 if data.startswith(_BOM) else 0)
        line = data.count(b"\n", 0, start) + 1
        column = start - (data.rfind(b"\n", 0, start) + 1) + 1
        raise error(_not_utf8(p, line, column, data[start])) from None


def _open_bounded(p: Path, error: type[Exception], what: str):
    """`p` opened for reading bytes; `error` for a directory, a missing or unreadable file, and a
    file whose size is over `MAX_FILE_BYTES` (a device or pipe has no size to check here)."""
    if p.is_dir():
        raise error(f"{p}: is a directory; pass a {what} (a file), not a directory")
    try:
        f = p.open("rb")
    except FileNotFoundError:
        raise error(f"{p}: no such file") from None
    except OSError as exc:
        raise error(f"{p}: cannot be read ({exc.strerror or exc})") from None
    if p.is_file() and p.stat().st_size > MAX_FILE_BYTES:
        f.close()
        raise error(_too_big(p, what))
    return f


def read_lines(path: str | Path, error: type[Exception] = ValueError,
               what: str = "file") -> Iterator[tuple[int, str]]:
    """(1-based line number, line) for each non-blank line of `path`, split on "\\n" only (a
    trailing "\\r" dropped), read as it goes: one line is in memory at a time, never the file.

    The refusals are `read_text`'s, in the same words: a directory, a missing file, a file over
    `MAX_FILE_BYTES` (checked before the first line when the file has a size), a line over
    `MAX_LINE_BYTES`, bytes that are not UTF-8 (naming the line and column). Those found inside
    the file are raised when the reader reaches them, after the lines before them were given."""
    p = Path(path)
    with _open_bounded(p, error, what) as f:
        line_no, read = 0, 0
        while True:
            try:
                raw = f.readline(MAX_LINE_BYTES + 1)  # "\\n" only: bytes, not text, are split
            except OSError as exc:
                raise error(f"{p}: cannot be read ({exc.strerror or exc})") from None
            if not raw:
                return
            line_no, read = line_no + 1, read + len(raw)
            body = raw[:-1] if raw.endswith(b"\n") else raw
            if len(body) > MAX_LINE_BYTES:
                raise error(_too_long(p, line_no))
            if read > MAX_FILE_BYTES:
                raise error(_too_big(p, what))
            if line_no == 1:
                _refuse_utf16(p, body[:4096], error)
            bom = 3 if line_no == 1 and body.startswith(_BOM) else 0
            try:
                line = body[bom:].decode("utf-8")
            except UnicodeDecodeError as exc:
                raise error(_not_utf8(p, line_no, bom + exc.start + 1, body[bom + exc.start])) from None
            line = line.removesuffix("\r")
            if line.strip():
                yield line_no, line


def read_json_array(path: str | Path, error: type[Exception] = ValueError,
                    what: str = "file") -> Iterator[tuple[int, Any]]:
    """(1-based position, value) for each element of `path`, a file holding one JSON array,
    parsed as it is read: one element's text and value are in memory at a time, never the file.

    The refusals are `read_lines`'s, in the same words (a directory, a missing file, a file over
    `MAX_FILE_BYTES`, bytes that are not UTF-8), an element over `MAX_LINE_BYTES` (the most one
    row may be), and JSON that is not one array: each names the file and the element."""
    p = Path(path)
    with _open_bounded(p, error, what) as f:
        yield from _ArrayReader(p, f, error, what).elements()


class _ArrayReader:
    """The state of `read_json_array`: the undecoded text held (`buf`, from `pos` on), the bytes
    read so far, and whether the file has ended. `json.JSONDecoder.raw_decode` parses one
    element from the held text; when the text ends inside it, more is read and it is parsed
    again (the read doubles each time, so an element is parsed a logarithmic number of times)."""

    _decoder = json.JSONDecoder()
    _SPACE = " \t\n\r"

    def __init__(self, p: Path, f, error: type[Exception], what: str) -> None:
        self.p, self.f, self.error, self.what = p, f, error, what
        self.utf8 = codecs.getincrementaldecoder("utf-8")()
        self.buf, self.pos, self.read_bytes, self.eof, self.lines_before = "", 0, 0, False, 0

    def _more(self, n: int = _CHUNK) -> bool:
        """Read `n` more bytes onto the held text; False at the end of the file."""
        if self.eof:
            return False
        try:
            chunk = self.f.read(n)
        except OSError as exc:
            raise self.error(f"{self.p}: cannot be read ({exc.strerror or exc})") from None
        self.read_bytes += len(chunk)
        if self.read_bytes > MAX_FILE_BYTES:
            raise self.error(_too_big(self.p, self.what))
        try:
            text = self.utf8.decode(chunk, final=not chunk)
        except UnicodeDecodeError as exc:
            before = exc.object[:exc.start]  # the bytes of this read before the bad one
            line = self.lines_before + self.buf.count("\n") + before.count(b"\n") + 1
            if b"\n" in before:
                column = len(before) - before.rfind(b"\n")
            else:
                column = len(self.buf[self.buf.rfind("\n") + 1:].encode("utf-8")) + len(before) + 1
            raise self.error(_not_utf8(self.p, line, column, exc.object[exc.start])) from None
        if self.read_bytes == len(chunk):
            _refuse_utf16(self.p, chunk[:4096], self.error)
            text = text.removeprefix("\ufeff")  # a byte-order mark, dropped
        self.eof = not chunk
        if self.pos > _CHUNK:  # drop what was parsed: the held text stays about one element
            self.lines_before += self.buf.count("\n", 0, self.pos)
            self.buf, self.pos = self.buf[self.pos:], 0
        self.buf += text
        return not self.eof

    def _next_char(self) -> str:
        """The next character that is not JSON whitespace (moving past the whitespace), or ""."""
        while True:
            while self.pos < len(self.buf) and self.buf[self.pos] in self._SPACE:
                self.pos += 1
            if self.pos < len(self.buf) or not self._more():
                return self.buf[self.pos:self.pos + 1]

    def _bad(self, where: str, said: str) -> Exception:
        line = self.lines_before + self.buf.count("\n", 0, self.pos) + 1
        return self.error(f"{self.p}, {where} (line {line}): {said}; expected one JSON array of rows "
                          "(`[{...}, {...}]`)")

    def _too_long(self, n: int) -> Exception:
        return self.error(f"{self.p}, row {n}: longer than {_size(MAX_LINE_BYTES)}, the most mrtpo "
                          "reads as one row; check that this is the right file")

    def elements(self) -> Iterator[tuple[int, Any]]:
        first = self._next_char()
        if first != "[":
            said = "the file is empty" if not first else f"the file starts with {first!r}, not '['"
            raise self._bad("row 1", said)
        self.pos += 1
        n = 0
        if self._next_char() == "]":
            self.pos += 1
        else:
            while True:
                n += 1
                yield n, self._element(n)
                c = self._next_char()
                self.pos += 1
                if c == "]":
                    break
                if c != ",":
                    raise self._bad(f"after row {n}", f"expected ',' or ']', found {repr(c) if c else 'the end of the file'}")
        if (c := self._next_char()):
            raise self._bad(f"after row {n}", f"{c!r} after the array's closing ']'")

    def _element(self, n: int) -> Any:
        """Element `n`, parsed from the held text, reading more while the text ends inside it
        (or right after it: a number cut by a read would parse as a shorter one)."""
        want = _CHUNK
        while True:
            if self._next_char() in ("]", ""):
                raise self._bad(f"row {n}", "a value is missing (a ',' before ']' or the end of the file)")
            try:
                value, end = self._decoder.raw_decode(self.buf, self.pos)
                if end - self.pos > MAX_LINE_BYTES:
                    raise self._too_long(n)
                if end < len(self.buf) or self.eof:
                    self.pos = end
                    return value
            except json.JSONDecodeError as exc:
                cut = exc.pos >= len(self.buf) - 16 or exc.msg.startswith("Unterminated string")
                if self.eof or not cut:  # not text that a read ended inside: a mistake
                    self.pos = exc.pos
                    raise self._bad(f"row {n}", f"not valid JSON ({exc.msg})") from None
            except RecursionError:
                raise self._bad(f"row {n}", "not valid JSON (nested too deeply to read: brackets "
                                "inside brackets, thousands deep)") from None
            except ValueError as exc:
                if not textio.too_many_digits(exc):
                    raise
                raise self._bad(f"row {n}", f"not valid JSON ({textio.TOO_MANY_DIGITS})") from None
            if len(self.buf) - self.pos > MAX_LINE_BYTES:
                raise self._too_long(n)
            self._more(want)
            want *= 2


def _not_utf8(p: Path, line: int, column: int, byte: int) -> str:
    source = _encoding_guess(p)
    what = f" ({source.upper()} text, by its first bytes)" if source.startswith("utf-16") else ""
    return (f"{p}, line {line}: not UTF-8 text{what} (byte 0x{byte:02x} at column {column}); save the "
            f"file as UTF-8, e.g. `iconv -f {source} -t utf-8 {p} > {p.stem}.utf8{p.suffix}`")


def _refuse_utf16(p: Path, head: bytes, error: type[Exception]) -> None:
    """`error` for a file that starts as UTF-16 text without a byte-order mark: ASCII in UTF-16
    is valid UTF-8 (every other byte a NUL), so decoding alone does not catch it."""
    if b"\x00" in head and _utf16_guess(head):
        raise error(_not_utf8(p, 1, head.index(b"\x00") + 1, 0))


def _utf16_guess(head: bytes) -> str | None:
    """'utf-16' (a byte-order mark), 'utf-16le' or 'utf-16be' (ASCII text with every other byte
    zero) when `head`, a file's first bytes, looks like UTF-16; else None."""
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):
        return "utf-16"
    even, odd = head[0::2], head[1::2]
    if len(head) >= 4 and odd.count(0) > 0.9 * len(odd) and even.count(0) < 0.1 * len(even):
        return "utf-16le"
    if len(head) >= 4 and even.count(0) > 0.9 * len(even) and odd.count(0) < 0.1 * len(odd):
        return "utf-16be"
    return None


def _encoding_guess(p: Path) -> str:
    """The encoding to name in the advice for a file that is not UTF-8: UTF-16 (little or big
    endian) when its first bytes are a UTF-16 byte-order mark or ASCII text with every other
    byte zero, else latin1 (which any bytes decode as)."""
    try:
        if not p.is_file():  # a pipe or device is not read again (opening a FIFO may wait)
            return "latin1"
        with open(p, "rb") as f:
            head = f.read(4096)
    except OSError:
        return "latin1"
    return _utf16_guess(head) or "latin1"


def _read_bounded(p: Path, f, error: type[Exception], what: str) -> bytearray:
    """The bytes of `f` (the file `p`, opened by `_open_bounded`), read in chunks; `error` as
    soon as they pass `MAX_FILE_BYTES` or a line passes `MAX_LINE_BYTES` (a device or pipe has
    no size to check first)."""
    data = bytearray()
    line_start, line_no = 0, 1  # where the current line starts, and its number
    while chunk := f.read(_CHUNK):
        at = len(data)
        data += chunk
        newline = chunk.find(b"\n")
        while newline >= 0:  # each line ending here: was it too long?
            if at + newline - line_start > MAX_LINE_BYTES:
                raise error(_too_long(p, line_no))
            line_no, line_start = line_no + 1, at + newline + 1
            if len(chunk) <= MAX_LINE_BYTES:  # no line wholly inside the chunk can be too long
                line_no += chunk.count(b"\n", newline + 1)
                line_start = at + chunk.rfind(b"\n") + 1
                break
            newline = chunk.find(b"\n", newline + 1)
        if len(data) - line_start > MAX_LINE_BYTES:
            raise error(_too_long(p, line_no))
        if len(data) > MAX_FILE_BYTES:
            raise error(_too_big(p, what))
    return data


def _size(n: int) -> str:
    """`n` bytes as the largest whole unit: "1 GiB", "64 MiB", "100 bytes"."""
    for shift, unit in ((30, "GiB"), (20, "MiB"), (10, "KiB")):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n:,} bytes"


def _too_big(p: Path, what: str) -> str:
    return (f"{p}: larger than {_size(MAX_FILE_BYTES)}, the most mrtpo reads from one {what}; "
            "check that this is the right file, or pass a smaller one (e.g. its first rows)")


def _too_long(p: Path, line_no: int) -> str:
    return (f"{p}, line {line_no}: longer than {_size(MAX_LINE_BYTES)}, the most mrtpo reads as "
            "one line (one JSON row); check that this is the right file (JSON Lines: one row per line)")


def lines(text: str) -> Iterator[tuple[int, str]]:
    """(1-based line number, line) for each non-blank line, split on "\\n" only."""
    for n, line in enumerate(text.split("\n"), 1):
        line = line.removesuffix("\r")
        if line.strip():
            yield n, line


def read_records(path: Path, error: type[Exception] = ValueError, where: str = "line",
                 hint: str = "") -> Iterator[tuple[int, Any]]:
    """The JSON values of a JSONL (or JSON array) responses file, numbered from 1 (by line, or
    by position in the array), streamed: one row is parsed and held at a time, as `--data` is
    read (`read_lines`, `read_json_array`); this reader serves `mrtpo eval`
    (mrtpo.evaluation.responses) and `mrtpo blocks`/`credit` (mrtpo.blocks.samples), each with
    its own row fields. A named pipe or a device is refused before it is opened (opening a FIFO
    waits for a writer; /dev/urandom never ends). A bad line raises `error` naming the file and
    the line (`where`: the word before its number), then `hint`."""
    p = Path(path)
    problem = textio.not_a_file(p)
    if problem is not None and not p.is_dir() and p.exists():
        raise error(f"{p}: {problem}; pass a responses file (JSONL) saved on disk")
    if _starts_array(p, error):
        try:
            yield from read_json_array(p, error, "responses file (JSONL)")
        except json.JSONDecodeError as exc:
            raise error(f"{p}: not valid JSON ({exc}); write one JSON object per line") from exc
        return
    for n, line in read_lines(p, error, "responses file (JSONL)"):  # split on "\n" only
        try:
            yield n, textio.loads(line)
        except json.JSONDecodeError as exc:
            raise error(f"{p}, {where} {n}: not valid JSON ({exc}){hint}") from exc


def _starts_array(p: Path, error: type[Exception]) -> bool:
    """Whether the file's first non-blank character (after a byte-order mark) is "[": one JSON
    array rather than JSON Lines. Reads only up to that character."""
    with _open_bounded(p, error, "responses file (JSONL)") as f:
        head = f.read(3)
        if head != _BOM:
            f.seek(0)
        while True:
            chunk = f.read(4096)
            if not chunk:
                return False
            text = chunk.lstrip()
            if text:
                return text[:1] == b"["


def row_id(row: dict, keys: tuple[str, ...], default: str, where: str, error: type[Exception] = ValueError) -> str:
    """A data row's id: the first of `keys` it has, as text (a number is read as its digits),
    else `default`. Any other value (a list, a mapping, true) is `error` naming the row and
    the field, rather than an id like "['x']" that every later message would quote."""
    for key in keys:
        if key in row and row[key] is not None:
            value = row[key]
            if isinstance(value, bool) or not isinstance(value, (str, int)):
                from mrtpo.textio import brief

                raise error(f"{where}, field {key!r}: an id must be text or a whole number, got "
                            f"{type(value).__name__} {brief(value, 60)}")
            return str(value)
    return default


class UniqueIds:
    """The row ids a reader has given out, to find a repeat and name the row that had it first.

    Each id is held as an 8-byte digest in `_DigestTable` (about 16 bytes a row, whatever the
    length of the ids and of the rows' locations), not as its text and row: that is the one
    thing a streaming reader keeps per row. A digest seen before is confirmed by reading the
    rows again up to the current one (`rows_again()`: (id, location) of each row, in the
    reader's order), so that only an actual repeat costs a second read, and two ids sharing a
    digest are no repeat.
    """

    def __init__(self, rows_again: Callable[[], Iterable[tuple[str, str]]]) -> None:
        self._digests = _DigestTable()
        self._rows_again = rows_again

    def earlier(self, rid: str, where: str) -> str | None:
        """The location of an earlier row with the id `rid`, or None; `where` is this row's."""
        digest = int.from_bytes(hashlib.blake2b(rid.encode("utf-8", "surrogatepass"),
                                                digest_size=8).digest(), "little")
        if self._digests.add(digest):
            return None
        for other, at in self._rows_again():
            if at == where:  # back at this row: the digest was another id's
                return None
            if other == rid:
                return at
        return None


class _DigestTable:
    """A set of 64-bit digests in one flat array (open addressing, linear probing, at most half
    full): 8 to 32 bytes a digest where a Python set of ints takes about 100."""

    def __init__(self) -> None:
        self._slots = array("Q", bytes(8 * 1024))  # 0 marks an empty slot
        self._count = 0

    def add(self, digest: int) -> bool:
        """Add `digest`; False when it was already there."""
        digest = digest or 1  # 0 is the empty mark
        slots, mask = self._slots, len(self._slots) - 1
        i = digest & mask
        while slots[i]:
            if slots[i] == digest:
                return False
            i = (i + 1) & mask
        slots[i] = digest
        self._count += 1
        if 2 * self._count > len(slots):
            self._grow()
        return True

    def _grow(self) -> None:
        old, self._slots, self._count = self._slots, array("Q", bytes(16 * len(self._slots))), 0
        for digest in old:
            if digest:
                self.add(digest)
