"""Text that always encodes, and output files written whole.

Model output is data, and data may hold what UTF-8 cannot encode: a lone surrogate (the JSON
escape `\\ud800` in a tool call or SQL literal decodes to one). Scoring reads it as it is; only
where text leaves Python does it need care:
- `json_text` writes JSON that stays valid UTF-8: a lone surrogate becomes its `\\uXXXX` escape,
  so reading the JSON back gives the same string; `strict_json` also writes NaN and infinities
  as null (every `--json` output);
- `scrub` replaces lone surrogates with U+FFFD for what cannot carry them: a terminal, a
  tokenizer (Hugging Face tokenizers raise an opaque TypeError on them);
- `write_text_atomic` writes a command's output file (`eval --out`, `credit --html`) with
  `write_atomic` (a new temporary file beside it, never through a link, renamed into place), so
  an error never leaves a partial file; a path that cannot be written raises `OutputPathError`
  naming it and saying why (`unwritable`). `write_atomic`, `new_temp_dir` and `unwritable` also
  write a run directory's files (mrtpo.harness.run.files) and an export (mrtpo.harness.run.export).
"""
from __future__ import annotations

import dataclasses
import errno
import json
import os
import re
import secrets
from pathlib import Path
from typing import Any

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def scrub(text: str) -> str:
    """`text` with each lone surrogate replaced by U+FFFD (the replacement character)."""
    return _LONE_SURROGATE.sub("\ufffd", text) if isinstance(text, str) else text


def scrub_all(obj: Any) -> Any:
    """`obj` with `scrub` applied to every string in it (dict keys and values, list and tuple
    items, dataclass fields); anything else is returned as it is."""
    if isinstance(obj, str):
        return scrub(obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.replace(obj, **{f.name: scrub_all(getattr(obj, f.name))
                                           for f in dataclasses.fields(obj) if f.init})
    if isinstance(obj, dict):
        return {scrub_all(k): scrub_all(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [scrub_all(v) for v in obj]
    if isinstance(obj, tuple):
        return tuple(scrub_all(v) for v in obj)
    return obj


def brief(value: Any, limit: int = 200) -> str:
    """`repr(value)` for an error message, at most about `limit` characters, in bounded time and
    memory whatever `value` is: a YAML alias bomb (a list that shares itself a billion times over)
    has a repr of gigabytes, so containers are walked to a budget of `limit` characters and cut
    with "...", never formatted whole."""
    out: list[str] = []
    budget = [limit]

    def put(text: str) -> bool:
        if budget[0] <= 0:
            return False
        out.append(text[:budget[0]])
        budget[0] -= len(text)
        return budget[0] > 0

    def walk(v: Any, depth: int) -> bool:
        if isinstance(v, (list, tuple, dict, set, frozenset)):
            if depth > 20:
                return put("...")
            opens, closes = {list: "[]", tuple: "()", dict: "{}"}.get(type(v), "{}")
            if not put(opens):
                return False
            for i, item in enumerate(v.items() if isinstance(v, dict) else v):
                if i and not put(", "):
                    return False
                if isinstance(v, dict):
                    if not (walk(item[0], depth + 1) and put(": ") and walk(item[1], depth + 1)):
                        return False
                elif not walk(item, depth + 1):
                    return False
            return put(closes)
        if isinstance(v, (str, bytes)):
            return put(repr(v[:limit + 1]))
        return put(repr(v)[:limit + 1])

    if not walk(value, 0) or budget[0] < 0:
        return "".join(out)[:limit] + "..."
    return "".join(out)


def one_line(exc: BaseException, limit: int = 300) -> str:
    """`exc` as one line of at most about `limit` characters: its type and its message's first
    line (transformers' and jinja's messages run over many lines), and the one after it when
    the first is only a heading that ends in ":" (torch's state-dict errors)."""
    text = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    first = text[0] if text else ""
    if first.endswith(":") and len(text) > 1:  # a heading ("Error(s) in loading state_dict for
        first += " " + text[1]                 # X:"): the line after it says what is wrong
        limit += 200
    first = first if len(first) <= limit else first[:limit] + "..."
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


def escape_surrogates(json_str: str) -> str:
    """A JSON document (from `json.dumps(..., ensure_ascii=False)`) with each lone surrogate,
    which can only stand inside a string literal there, written as its `\\uXXXX` escape."""
    return _LONE_SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", json_str)


def json_text(obj: Any, **kwargs) -> str:
    """`json.dumps(obj, ensure_ascii=False, **kwargs)`, encodable as UTF-8 whatever `obj` holds."""
    return escape_surrogates(json.dumps(obj, ensure_ascii=False, **kwargs))


def finite(x: Any) -> Any:
    """`x` with NaN / inf floats (nested in dicts and lists) replaced by None."""
    if isinstance(x, float):
        return x if x == x and x not in (float("inf"), float("-inf")) else None
    if isinstance(x, dict):
        return {k: finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [finite(v) for v in x]
    return x


def strict_json(doc: Any, indent: int | None = None) -> str:
    """`doc` as strict JSON (NaN and infinities as null, `finite`); a lone surrogate (model
    output may hold one) is written escaped. Every command's `--json` output (mrtpo.commands.jsonout)."""
    return json_text(finite(doc), allow_nan=False, indent=indent, default=str)


class OutputPathError(ValueError):
    """An output path that cannot be written: names it, says why and what to do."""


def check_writable(path: str | Path, what: str = "output file") -> Path:
    """Raise `OutputPathError` now where `write_text_atomic(path, ...)` would fail on the path
    (a directory, a path under a file, a directory that refuses new files, e.g. /proc), so a long
    command (`eval --model`) stops before its work, not after. Creates missing parent
    directories and tries a temporary file there, which it removes."""
    path = Path(path)
    if path.is_dir():
        example = path / ("results.jsonl" if "JSONL" in what else "out.html")
        raise OutputPathError(f"{path}: is a directory; give the {what} a file name, e.g. {example}")
    if _written_in_place(path):
        return path
    probe = path.parent / f".{path.name}.mrtpo-write-check"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(probe, "")
        probe.unlink()
    except OSError as exc:
        raise _unwritable(path, what, exc) from None
    return path


def _written_in_place(path: Path) -> bool:
    """True for a link or an existing non-regular file (/dev/stdout, /dev/null, a pipe): written
    through, as `open(path, "w")` does, since renaming a file over it would replace the link or
    the device itself."""
    return path.is_symlink() or (path.exists() and not path.is_file())


def _unwritable(path: Path, what: str, exc: OSError) -> OutputPathError:
    return OutputPathError(f"{path}: cannot write the {what} there ({unwritable(path, exc)}); "
                           "choose a path in a writable directory")


def write_text_atomic(path: str | Path, text: str, what: str = "output file") -> Path:
    """Write `text` (UTF-8) to `path` whole or not at all (`write_atomic`:
    a new temporary file beside it, then a rename), creating missing parent directories; a link
    or a device (`--out /dev/stdout`) is written through instead. Raises `OutputPathError` as
    `check_writable` does, naming the path and why."""
    path = Path(path)
    data = text.encode("utf-8")  # a lone surrogate raises here, before anything is written
    check_writable(path, what)
    try:
        if _written_in_place(path):
            with open(path, "wb") as f:
                f.write(data)
        else:
            write_atomic(path, text)
    except OSError as exc:
        raise _unwritable(path, what, exc) from None
    return path


def write_atomic(path: Path, text: str) -> None:
    """Replace `path` with `text` atomically: written to a new temporary file next to it
    (created exclusively, never through a link), flushed to disk, then renamed over `path`.
    A crash leaves the old file or the new one, never a partial one."""
    path = Path(path)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    for _ in range(100):
        tmp = path.parent / f".{path.name}-{secrets.token_hex(4)}"
        try:
            fd = os.open(tmp, flags, 0o666)
            break
        except FileExistsError:
            continue
    else:  # pragma: no cover (100 random names taken)
        raise FileExistsError(errno.EEXIST, "no free temporary name", str(path))
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def new_temp_dir(parent: Path, prefix: str) -> Path:
    """A new empty directory `parent/<prefix><random>`, created exclusively with the usual
    permissions (0777 less the umask); OSError as mkdir raises it."""
    for _ in range(100):
        path = Path(parent) / f"{prefix}{secrets.token_hex(4)}"
        try:
            path.mkdir()
            return path
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no free temporary name", str(parent))  # pragma: no cover


def unwritable(path: Path, exc: OSError, directory: bool = False) -> str:
    """Why `path` (a `directory` to create, else a file) cannot be written, in words: the
    nearest existing ancestor (or `path` itself, for a directory) that is a file, or the
    existing directory that does not let it be created, with the OS's reason."""
    path = Path(path)
    reason = exc.strerror or str(exc)
    for entry in [path, *path.parents]:
        if entry.is_symlink() and not entry.exists():
            return f"{entry} is a symbolic link to {os.readlink(entry)}, which does not exist"
        if entry.exists():
            if not entry.is_dir() and (entry != path or directory):
                return f"{entry} is a file, not a directory"
            if entry != path:
                return f"nothing can be created in {entry} ({reason})"
            break
    return reason


#: errors of a write that found no room: a full disk, a quota, a file-size limit
_NO_ROOM = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}
#: what torch's and safetensors' wrappers of such a failed write say (they carry no errno)
_WRITE_FAILED = ("unexpected pos", "file write failed", "no space left", "os error 28", "os error 27",
                 "os error 122", "file too large", "disk quota")


def no_room(exc: BaseException, directory: str | Path) -> str | None:
    """Why a write into `directory` failed, in words, when `exc` is a write that found no room
    (a full disk, a quota, a file-size limit): "no space left on device" or the OS's reason;
    None for any other error. torch's "unexpected pos" and safetensors' wrappers carry no errno,
    so for them a 1 MiB probe write into `directory` asks the file system why."""
    if isinstance(exc, OSError) and exc.errno is not None:
        return (exc.strerror or str(exc)).lower() if exc.errno in _NO_ROOM else None
    if not any(words in str(exc).lower() for words in _WRITE_FAILED):
        return None
    probe = Path(directory) / f".mrtpo-space-check-{secrets.token_hex(4)}"
    try:
        with open(probe, "wb") as f:
            f.write(b"\0" * (1 << 20))
            f.flush()
            os.fsync(f.fileno())
    except OSError as why:
        return (why.strerror or str(why)).lower()
    finally:
        try:
            probe.unlink()
        except OSError:
            pass
    return "a write failed (" + " ".join(str(exc).split())[:160] + ")"


def not_a_file(path: str | Path) -> str | None:
    """Why `path` is not a regular file to read, in words ("no such file", "is a directory",
    "is a named pipe (FIFO)", "is a device"...), or None when it is one. Checked without opening
    it: opening a FIFO waits for a writer, and /dev/zero never ends."""
    import stat

    p = Path(path)
    try:
        mode = p.stat().st_mode
    except FileNotFoundError:
        return "no such file" + (f" ({p} is a link to {os.readlink(p)}, which does not exist)" if p.is_symlink() else "")
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "is a directory, not a file"
    if stat.S_ISFIFO(mode):
        return "is a named pipe (FIFO), not a file"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "is a device, not a file"
    if stat.S_ISSOCK(mode):
        return "is a socket, not a file"
    return "is not a regular file"


def loads(text: str | bytes) -> Any:
    """`json.loads(text)`, with a value nested too deeply for Python's parser (100,000 brackets
    raise RecursionError) reported as the json.JSONDecodeError every reader already names the
    file and line of."""
    try:
        return json.loads(text)
    except RecursionError:
        doc = text if isinstance(text, str) else text.decode("utf-8", "replace")
        raise json.JSONDecodeError("nested too deeply to read (brackets inside brackets, thousands "
                                   "deep)", doc[:1000], 0) from None
    except ValueError as exc:
        if isinstance(exc, json.JSONDecodeError) or not too_many_digits(exc):
            raise
        doc = text if isinstance(text, str) else text.decode("utf-8", "replace")
        raise json.JSONDecodeError(TOO_MANY_DIGITS, doc[:1000], 0) from None


#: what a reader says of a whole number longer than Python converts (4,300 digits by default)
TOO_MANY_DIGITS = "a number with thousands of digits, more than mrtpo reads; write it as a string"


def too_many_digits(exc: BaseException) -> bool:
    """Whether `exc` is Python's refusal to convert a whole number of more than
    `sys.get_int_max_str_digits()` digits (json.loads raises it as a bare ValueError)."""
    return isinstance(exc, ValueError) and "integer string conversion" in str(exc)

