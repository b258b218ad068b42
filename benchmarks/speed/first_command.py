"""The README's first command, timed in a fresh clone: install, build, held-out before, steps, after.

A newcomer runs the first line of the README's first code block on a fresh machine; it must
finish within 15 minutes on 2 idle cores, install included, and show a held-out rise. This
script measures that as a newcomer meets it: for each run it clones the repository's committed
tree (`git clone --no-local`, then `--commit`) into a new directory, and runs that line
verbatim with bash there, with an empty mrtpo cache (`MRTPO_CACHE_DIR` in the run's own
directory, so the built-in policy is built from nothing; pip's cache stays the machine's, as a
second clone on one machine would find it). Every output line is stamped as it arrives; the
phases are the intervals between the first lines that mark them (`PHASES`). From the run
directory it reads the held-out before/after (`heldout.json`) and the training reward's first
and last fifth (`metrics.jsonl`, as `mrtpo train`'s summary prints them).

    python -m benchmarks.speed.first_command --runs 3 --json benchmarks/results/quickstart-smollm2-135m.json

Nothing is asserted: the figures are measured and written whichever way they come out. Run it
on idle cores, alone (the issue's budget is for 2 idle cores). The results file is a
`mrtpo.table/1` (section quickstart): a row per run, added to the rows that file already holds
for the same commit, so three runs may be made one at a time.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.lib.results import command, write_result

#: (phase, the text that starts it: a line beginning with it, or with it after `mrtpo train`'s
#: "train: " label); a phase ends where the next present one starts, the last at the command's
#: end. The install is everything before mrtpo train's first line (its settings line).
PHASES = (("install", None), ("build and load", "settings:"), ("held-out before", "held-out before training"),
          ("training steps", "train: step"), ("held-out after", "held-out after training"))
LIMIT_S = 15 * 60  # the budget for the whole first command on 2 idle cores


def first_command(readme: str) -> str:
    """The first line of the README's first ```bash block: what a newcomer runs first."""
    m = re.search(r"^```bash\n(.*?)$", readme, flags=re.M)
    if m is None or not m.group(1).strip():
        raise SystemExit("README.md: no ```bash block with a command on its first line")
    return m.group(1).strip()


def phase_seconds(lines: list[tuple[float, str]], end: float) -> dict[str, float]:
    """Seconds per phase from (seconds since start, line) pairs: each phase from the first line
    that starts with its marker (the install from 0) to the next present phase's start."""
    starts = []
    for name, marker in PHASES:
        if marker is None:
            starts.append((name, 0.0))
            continue
        t = next((t for t, text in lines if text.startswith((marker, "train: " + marker))), None)
        if t is not None:
            starts.append((name, t))
    out = {}
    for (name, t), nxt in zip(starts, starts[1:] + [(None, end)]):
        out[name] = max(0.0, nxt[1] - t)
    return out


def run_directory(lines: list[tuple[float, str]]) -> str | None:
    """The run directory `mrtpo train`'s summary names ("run directory: X"), else None."""
    for _, text in reversed(lines):
        if text.startswith("run directory: "):
            return text[len("run directory: "):].strip()
    return None


def reward_fifths(metrics_jsonl: Path) -> tuple[float | None, float | None]:
    """The training reward's mean over the first and the last fifth of the steps."""
    from mrtpo.commands.train import fifth_means

    rows = [json.loads(line) for line in metrics_jsonl.read_text().splitlines() if line.strip()]
    return fifth_means([r.get("reward") for r in rows if "step" in r])


def measure_once(repo: Path, commit: str, workdir: Path, log: Path) -> dict:
    """Clone, run the first command verbatim, and return what it took and showed."""
    clone = workdir / "clone"
    subprocess.run(["git", "clone", "--quiet", "--no-local", str(repo), str(clone)], check=True)
    subprocess.run(["git", "-C", str(clone), "checkout", "--quiet", commit], check=True)
    command = first_command((clone / "README.md").read_text())
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if ".venv" not in p)
    env["MRTPO_CACHE_DIR"] = str(workdir / "cache")  # empty: the policy is built from nothing
    load = os.getloadavg()[0]
    lines: list[tuple[float, str]] = []
    t0 = time.perf_counter()
    with open(log, "w", buffering=1) as out:  # line-buffered: the log can be followed
        proc = subprocess.Popen(["bash", "-c", command], cwd=clone, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, bufsize=1)
        for text in proc.stdout:
            t = time.perf_counter() - t0
            lines.append((t, text.rstrip("\n")))
            out.write(f"{t:8.1f} {text}")
        rc = proc.wait()
    total = time.perf_counter() - t0
    found = run_directory(lines)
    run_dir = (clone / found) if found else None
    heldout = json.loads((run_dir / "heldout.json").read_text()) if run_dir and (run_dir / "heldout.json").is_file() else {}
    first, last = reward_fifths(run_dir / "metrics.jsonl") if run_dir and (run_dir / "metrics.jsonl").is_file() else (None, None)
    return {"command": command, "rc": rc, "load_average": load, "total_s": total,
            "phases": phase_seconds(lines, total), "last_line": lines[-1][1] if lines else "",
            "heldout": {k: v for k, v in heldout.items() if not k.startswith("_")},
            "reward_first_fifth": first, "reward_last_fifth": last}


def row(index: int, m: dict) -> list[str]:
    """One table row: the run, its time against the budget, each phase, what it showed."""
    p = m["phases"]
    sec = lambda name: f"{p[name]:.0f}" if name in p else "-"  # noqa: E731
    held = ", ".join(f"{k} {v['before']:.2f} -> {v['after']:.2f}" for k, v in m["heldout"].items()
                     if isinstance(v, dict) and v.get("before") is not None and v.get("after") is not None)
    first, last = m["reward_first_fifth"], m["reward_last_fifth"]
    reward = "-" if first is None else f"{first:.2f} -> {last:.2f}"
    total = f"{m['total_s'] / 60:.1f} min" + ("" if m["rc"] == 0 else f" (exit {m['rc']})")
    return [str(index), f"{m['load_average']:.1f}", total, *(sec(name) for name, _ in PHASES), held or "-", reward]


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repo", default=str(Path(__file__).resolve().parents[2]), help="the repository to clone")
    ap.add_argument("--commit", default="HEAD", help="the commit to check out in the clone")
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--json", default="benchmarks/results/quickstart-smollm2-135m.json")
    ap.add_argument("--keep", action="store_true", help="keep each run's clone, venv and cache")
    args = ap.parse_args(argv)
    repo = Path(args.repo)
    commit = subprocess.run(["git", "-C", str(repo), "rev-parse", "--short", args.commit], check=True,
                            capture_output=True, text=True).stdout.strip()
    results = Path(args.json)
    doc = json.loads(results.read_text()) if results.is_file() else {}
    rows = doc.get("rows", []) if doc.get("commit") == commit else []
    for _ in range(args.runs):
        workdir = Path(tempfile.mkdtemp(prefix="mrtpo-first-command-"))
        log = workdir / "output.log"
        print(f"run {len(rows) + 1}: cloning {repo} at {commit} into {workdir}; output in {log}", flush=True)
        m = measure_once(repo, commit, workdir, log)
        rows.append(row(len(rows) + 1, m))
        print(f"  {m['total_s'] / 60:.1f} min (budget {LIMIT_S / 60:.0f}), exit {m['rc']}; phases "
              + ", ".join(f"{k} {v:.0f} s" for k, v in m["phases"].items()) + f"; last line: {m['last_line']}",
              flush=True)
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
        doc = {
            "section": "quickstart",
            "model": "smollm2-135m (built from nothing in each run)",
            "title": "the README's first command in a fresh clone with an empty cache, 2 CPU cores",
            "command": command("benchmarks.speed.first_command", ["--runs", "3"]),
            "columns": ["run", "load at start", "total", *(f"{name} s" for name, _ in PHASES),
                        "held-out before -> after", "training reward, first -> last fifth"],
            "rows": rows,
            "notes": [f"the first command, verbatim: `{m['command']}`",
                      "pip's cache is the machine's (a second clone on one machine finds it so); the mrtpo cache is empty",
                      f"the budget is {LIMIT_S // 60} minutes on 2 idle cores; `load at start` is the 1-minute load average"],
            "commit": commit,
        }
        doc = write_result(results, "table", doc)
    print(f"results: {results}")
    return doc


if __name__ == "__main__":
    sys.exit(main() and 0)
