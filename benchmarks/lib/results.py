"""Writing a results file, and where a result was measured.

Every results file declares its kind in its `schema` field, `mrtpo.KIND/VERSION` (e.g.
`mrtpo.speed-step/1`); benchmarks/results_page.py renders a file by that kind alone, never by
its name. `write_result` stamps it, so a rerun of the script that made a file writes a file
of the same kind. The kinds and what each holds: benchmarks/results_page.py's docstring.
"""
from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path


def declared(kind: str, doc: dict, version: int = 1) -> dict:
    """`doc` with its kind declared first: {"schema": "mrtpo.KIND/VERSION", **doc}."""
    return {"schema": f"mrtpo.{kind}/{version}", **{k: v for k, v in doc.items() if k != "schema"}}


def write_result(path: str | Path | None, kind: str, doc: dict, *, strict: bool = False) -> dict:
    """Write `doc` as a results file of `kind` to `path` (its folder made, written whole or not
    at all; `strict`: strict JSON, NaN and infinities written as null, mrtpo.textio.strict_json);
    None: nothing written. Returns the document (NaN kept: what was written is the file's)."""
    out = declared(kind, doc)
    if path:
        from mrtpo.textio import strict_json, write_atomic

        Path(path).parent.mkdir(parents=True, exist_ok=True)
        write_atomic(Path(path), (strict_json(out, indent=1) if strict else json.dumps(out, indent=1)) + "\n")
    return out


def print_table(doc: dict) -> None:
    """A `table` result on stdout as a speed script prints it: its title, each row (the first
    column as text, the rest as numbers with two decimals) and its notes."""
    print(doc["title"])
    for first, *rest in doc["rows"]:
        print(f"{first:<40}" + "".join(f" {v:>8.2f}" for v in rest))
    for n in doc.get("notes", []):
        print("- " + n)


def command(module: str, argv: list[str], quoted: bool = False) -> str:
    """The command line that ran a script, as a results file records it:
    `python -m benchmarks.PURPOSE.NAME ARGS` (`quoted`: each argument shell-quoted)."""
    words = ["python", "-m", module, *argv]
    return shlex.join(words) if quoted else " ".join(words)


def current_commit() -> str | None:
    """The short hash of the checkout's HEAD (the code a result was measured on), None outside git."""
    return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                          cwd=Path(__file__).parent).stdout.strip() or None


def _cpuinfo() -> dict[str, str]:
    """The first processor's `model name`, `cpu family`, `model` and `flags` from /proc/cpuinfo
    ({} without it)."""
    info: dict[str, str] = {}
    try:
        for line in open("/proc/cpuinfo", encoding="utf-8"):
            key, _, value = line.partition(":")
            if key.strip() in ("model name", "cpu family", "model", "flags") and key.strip() not in info:
                info[key.strip()] = value.strip()
    except OSError:
        pass
    return info


#: the vector instructions that set a CPU's product rates here, widest first (/proc/cpuinfo flag, name)
VECTOR_ISAS = (("amx_bf16", "AMX"), ("avx512_bf16", "AVX512-BF16"), ("avx512f", "AVX-512"), ("avx2", "AVX2"))


def cpu_name(family: bool = False) -> str:
    """The processor's model name and its widest vector instructions (`VECTOR_ISAS`), for speed
    results: machines lent to this project differ by 4x in float32 rate, and two of them both
    call themselves "AMD EPYC" (one with AVX2 only, one with AVX512-BF16), so every table names
    the CPU it was measured on. `family`: with its family and model numbers (float rounding,
    hence greedy near-ties, follow them)."""
    info = _cpuinfo()
    if "model name" not in info:
        import platform

        return platform.processor() or ("unknown CPU" if family else "unknown")
    name = info["model name"]
    flags = set(info.get("flags", "").split())
    isa = next((label for flag, label in VECTOR_ISAS if flag in flags), None)
    if isa:
        name += f" with {isa}"
    if family and "cpu family" in info:
        name += f" (family {info['cpu family']}, model {info.get('model', '?')})"
    return name
