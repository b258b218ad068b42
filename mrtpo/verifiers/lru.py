"""A thread-safe LRU cache bounded by entries and by bytes, for verifier results.

Verifiers cache what they computed from a response (an executed query's rows, a parsed tool
call) because several rewards read the same response. A count bound alone lets a few huge
entries fill memory (40 distinct 10 MB responses, 15 results of a 64 MB `zeroblob` query), so
each entry also carries its size in bytes: the cache keeps at most `max_bytes` in total and
never stores one entry larger than `max_entry_bytes`.
"""
from __future__ import annotations

import threading
import time
from collections import OrderedDict
from typing import Any, Hashable


class BoundedCache:
    """LRU of key -> value with a byte budget; `ttl` (seconds) bounds an entry's age when given
    at `put` (None: no expiry)."""

    def __init__(self, max_entries: int = 4096, max_bytes: int = 64_000_000,
                 max_entry_bytes: int | None = None) -> None:
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.max_entry_bytes = max_bytes // 8 if max_entry_bytes is None else max_entry_bytes
        self._d: OrderedDict[Hashable, tuple[Any, int, float]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    @property
    def nbytes(self) -> int:
        """Bytes held now (the sum of the sizes given to `put`)."""
        return self._bytes

    def __len__(self) -> int:
        return len(self._d)

    def get(self, key: Hashable) -> Any:
        """The value for `key`, or None when absent or expired."""
        with self._lock:
            hit = self._d.get(key)
            if hit is None:
                return None
            if hit[2] < time.monotonic():
                self._drop(key)
                return None
            self._d.move_to_end(key)
            return hit[0]

    def put(self, key: Hashable, value: Any, nbytes: int, ttl: float | None = None) -> bool:
        """Keep `value` (of about `nbytes` bytes); False when it is too large to keep."""
        if nbytes > self.max_entry_bytes:
            return False
        expires = float("inf") if ttl is None else time.monotonic() + ttl
        with self._lock:
            if key in self._d:
                self._drop(key)
            self._d[key] = (value, nbytes, expires)
            self._bytes += nbytes
            while self._d and (len(self._d) > self.max_entries or self._bytes > self.max_bytes):
                self._drop(next(iter(self._d)))
        return True

    def _drop(self, key: Hashable) -> None:
        _, nbytes, _ = self._d.pop(key)
        self._bytes -= nbytes

    def clear(self) -> None:
        with self._lock:
            self._d.clear()
            self._bytes = 0
