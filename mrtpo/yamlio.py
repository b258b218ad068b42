"""The one YAML reader: `yaml.safe_load` with bounds, for every YAML mrtpo reads.

`yaml.safe_load` builds no Python objects from tags (`!!python/...` is refused) but keeps
aliases shared: `a: &a [x, x, ...]`, `b: &b [*a, *a, ...]`, ten levels deep, is a few hundred
bytes that stand for 10^9 values. Nothing in mrtpo walks such a value whole until an error
message formats it with `!r` (50-60 s and 3 GB, issue 40, item 3), or a check iterates it.
`load_yaml` composes the document first and counts the values it stands for with every alias
expanded (each node's count computed once, so the count itself is cheap), and refuses a
document over `MAX_VALUES`, or one whose aliases make it recursive, before building it. It also
refuses a mapping that repeats a key (item 18: the last one would silently win), naming the key
and its line. A value nested deeper than `MAX_DEPTH` is refused from the parser's events
before PyYAML's recursive composer meets it (thousands of brackets raised RecursionError), and
`read_yaml_file` checks a file's size before reading it (a run's config.yaml may be any file).
Its errors are `YAMLRefused` (a ValueError), one line, naming `source`.
"""
from __future__ import annotations

from typing import Any

#: values a document may stand for, aliases expanded: a config or an option holds dozens
MAX_VALUES = 100_000
#: characters of YAML text read at all (a config file is a few KB)
MAX_CHARS = 4 << 20
#: how deep lists and mappings may nest (a config nests three or four levels)
MAX_DEPTH = 100


class YAMLRefused(ValueError):
    """YAML text mrtpo will not read: too large expanded, recursive, or a repeated key."""


def load_yaml(text: str, source: str = "YAML") -> Any:
    """`text` read as `yaml.safe_load` reads it, within the bounds above. Raises YAMLRefused
    naming `source`, and yaml.YAMLError for text that is not YAML at all."""
    import yaml

    if len(text) > MAX_CHARS:
        raise YAMLRefused(f"{source}: {len(text)} characters of YAML; at most {MAX_CHARS} are read")
    _check_depth(text, source)
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check(node, source)
        return loader.construct_document(node)
    finally:
        loader.dispose()


def read_yaml_file(path, source: str | None = None) -> Any:
    """The YAML file `path` read by `load_yaml`, its size checked before a byte is read: a
    file over MAX_CHARS bytes (a sparse 100 GB config.yaml, a device) is YAMLRefused."""
    from pathlib import Path

    from mrtpo.textio import not_a_file

    p = Path(path)
    source = source or str(p)
    problem = not_a_file(p)
    if problem:
        raise YAMLRefused(f"{source}: {problem}")
    size = p.stat().st_size
    if size > MAX_CHARS:
        raise YAMLRefused(f"{source}: {size:,} bytes; a YAML config is a few KB, at most {MAX_CHARS:,} bytes are read")
    return load_yaml(p.read_text(encoding="utf-8", errors="replace"), source)


def _check_depth(text: str, source: str) -> None:
    """Refuse `text` when its lists and mappings nest deeper than MAX_DEPTH, from the parser's
    events (the parser keeps a stack of states and does not recurse; the composer does)."""
    import yaml

    depth = 0
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_DEPTH:
                raise YAMLRefused(f"{source}: lists or mappings nested more than {MAX_DEPTH} deep "
                                  f"(line {event.start_mark.line + 1}); write the value flatter")
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1


def _check(root, source: str) -> None:
    """Count `root`'s values with aliases expanded (memoised per node), refuse a cycle, an
    absurd count or a repeated mapping key."""
    import yaml

    counts: dict[int, int] = {}
    active: set[int] = set()
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            active.discard(key)
            children = _children(node)
            counts[key] = 1 + sum(counts[id(c)] for c in children)
            if counts[key] > MAX_VALUES:
                raise YAMLRefused(
                    f"{source}: the YAML stands for more than {MAX_VALUES} values once its aliases "
                    f"(*name) are expanded (line {node.start_mark.line + 1}); write the values out, or "
                    "use fewer aliases")
            continue
        if key in counts:
            continue
        if key in active:
            raise YAMLRefused(f"{source}: an alias at line {node.start_mark.line + 1} refers to a value "
                              "that contains it (a recursive YAML value); write the value out")
        active.add(key)
        if isinstance(node, yaml.MappingNode):
            _no_repeated_keys(node, source)
        stack.append((node, True))
        for child in _children(node):
            if id(child) not in counts:
                stack.append((child, False))


def _children(node) -> list:
    import yaml

    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def _no_repeated_keys(node, source: str) -> None:
    import yaml

    seen: dict[str, int] = {}
    for key, _ in node.value:
        if not isinstance(key, yaml.ScalarNode) or key.tag == "tag:yaml.org,2002:merge":
            continue
        line = key.start_mark.line + 1
        if key.value in seen:
            name = key.value if len(key.value) <= 80 else key.value[:80] + "..."
            raise YAMLRefused(f"{source}: the key {name!r} is given twice (lines {seen[key.value]} and {line}); "
                              "keep one")
        seen[key.value] = line
