"""benchmarks/speed/first_command.py: timing the README's first command in a fresh clone. Its
run takes minutes and a network install, so the tests check what it reads: the command from the
real README, the phases from a stamped output, the run directory and the reward's fifths."""
from __future__ import annotations

import json
from pathlib import Path

from benchmarks.speed import first_command as fc

README = Path(__file__).resolve().parents[2] / "README.md"


def test_the_first_command_is_the_first_line_of_the_readme_s_first_bash_block():
    command = fc.first_command(README.read_text())
    assert command.startswith("python3 -m venv .venv") and command.endswith("mrtpo train --lora")
    assert fc.first_command("intro\n```bash\nmrtpo train --lora\npytest\n```\n") == "mrtpo train --lora"


def test_phases_run_from_each_marker_to_the_next_present_one():
    lines = [(1.0, "Collecting torch"), (60.0, "settings: the built-in policy smollm2-135m's defaults ..."),
             (61.0, "train: loading model smollm2-135m"), (62.0, "building smollm2-135m: converting"),
             (100.0, "train: held-out before training: prompt 0/32"), (160.0, "train: step 0/20 sampling"),
             (700.0, "train: step 20/20"), (701.0, "train: held-out after training: prompt 0/32"),
             (780.0, "run directory: runs/mrtpo-text2sql-x")]
    assert fc.phase_seconds(lines, 790.0) == {"install": 60.0, "build and load": 40.0, "held-out before": 60.0,
                                              "training steps": 541.0, "held-out after": 89.0}
    # a run that stopped during the install has only the install, to its end
    assert fc.phase_seconds(lines[:1], 30.0) == {"install": 30.0}
    assert fc.run_directory(lines) == "runs/mrtpo-text2sql-x" and fc.run_directory(lines[:3]) is None


def test_the_reward_s_fifths_are_read_from_the_metrics(tmp_path):
    path = tmp_path / "metrics.jsonl"
    rows = [{"step": i + 1, "reward": float(i)} for i in range(10)] + [{"heldout": 1}]  # no step: not a step
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert fc.reward_fifths(path) == (0.5, 8.5)
