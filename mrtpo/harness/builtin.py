"""What the trainer knows of the built-in policies: their names, the settings each trains with,
how a built one is recognised, and the name an adapter trained on one records.

Data and lookups only. Building a policy is `mrtpo.models.default`'s, and the trainer never
imports it: `mrtpo.harness.loop.train` is given the function that turns a `--model` value into a
path (`model_path`), and asks it once. `mrtpo.harness.train` (the public entry) and `mrtpo train`
give it `mrtpo.models.default.resolve_model`, which builds a built-in policy on first use.
`mrtpo.models.default` re-exports these names and fills `RECIPES` in (name -> recipe).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

DEFAULT_MODEL = "mrtpo-tiny"
SMOLLM2_NAME = "smollm2-135m"
MANIFEST = "mrtpo_build.json"  # written last inside a build: its presence marks it complete

#: `mrtpo train` settings used with a built-in policy for every setting the user does not give
#: (a LoRA on a few-million-parameter model wants a far larger learning rate than the
#: trainer's default, which suits pretrained models; with the previous recipe 40 steps took
#: 6.3 minutes on 2 cores and raised the total reward in each of 12 benchmark runs; see the
#: learning tables in docs/results.md for the current figures)
TRAIN_DEFAULTS: dict[str, dict] = {
    DEFAULT_MODEL: {"task": "toolcall", "steps": 40, "batch_prompts": 4, "num_generations": 8,
                    "max_new_tokens": 160, "lr": 2e-3},
    # SmolLM2-135M-Instruct writes tool calls only after a worked example (`demo`: a made-up
    # tool, the format only); its calls take 40-55 tokens; a LoRA on a pretrained model wants a
    # small learning rate; 2 prompts x 4 completions is what 2 CPU cores step in about 1-2 minutes
    SMOLLM2_NAME: {"task": "toolcall", "task_args": {"demo": True}, "steps": 20, "batch_prompts": 2,
                   "num_generations": 4, "max_new_tokens": 64, "temperature": 0.7, "lr": 5e-5},
}
#: every built-in policy by the name `--model` accepts, -> its recipe. The names are here, so
#: the trainer knows them without the factory; `mrtpo.models.default` (where this same dict is
#: `RECIPES`) puts each recipe in when it is imported, and a test may add a policy to it.
RECIPES: dict[str, Any] = dict.fromkeys(TRAIN_DEFAULTS)


def builtin_name(model: str | Path | None) -> str | None:
    """The built-in policy `model` is, by name or by its built directory (any cached build,
    found by its manifest), else None."""
    if model is None:
        return None
    if str(model) in RECIPES and not Path(str(model)).exists():
        return str(model)
    manifest = Path(str(model)).expanduser() / MANIFEST
    if manifest.is_file():
        try:
            name = json.loads(manifest.read_text()).get("name")
        except (OSError, ValueError):
            return None
        return name if name in RECIPES else None
    return None


def with_train_defaults(values: dict) -> dict:
    """`mrtpo train` settings with the built-in policy filled in: no model given means
    `mrtpo-tiny`, and a built-in policy, named or given as its cached directory, brings its
    `TRAIN_DEFAULTS` for every setting not given (so `mrtpo train --lora` alone is a
    complete, few-minute run, and the same directory passed as --model trains the same)."""
    out = dict(values)
    if not out.get("model"):
        out["model"] = DEFAULT_MODEL
    for key, value in TRAIN_DEFAULTS.get(builtin_name(out["model"]) or "", {}).items():
        out.setdefault(key, value)
    return out


def portable_name(given: str, resolved: str | Path) -> str:
    """The base model's name as another machine can load it: a built-in policy's name when
    `resolved` is its cached build (however it was given), the hub id as given, or a local
    directory's absolute path."""
    name = builtin_name(resolved) or builtin_name(given)
    if name is not None:
        return name
    if Path(given).expanduser().exists():
        return str(Path(given).expanduser().resolve())
    return given
