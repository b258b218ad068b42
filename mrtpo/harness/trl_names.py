"""TRL's setting names as aliases of `mrtpo train`'s, on the command line and in YAML.

A TRL user can write `--learning_rate 1e-5 --max_steps 200` or `max_completion_length: 256`
and get `lr`, `steps`, `max_new_tokens`. Every flag is also accepted with underscores
(`--num_generations`, TRL's spelling), since TRL's flags are the dataclass field names. The
aliases stay out of `--help` (one line there names them), which keeps it short.

Meanings match TRL's where the name is TRL's: `max_steps` = optimizer steps of the run,
`max_completion_length` = longest completion, `save_steps` = checkpoint every N steps,
`gradient_accumulation_steps` = micro-batches per optimizer step (here the step's B x G
completions are split into that many; TRL also multiplies the generation batch by it).
`reward_weights` takes reward names here (`{format: 1, correct: 2}`, `--reward_weights
format=1`): TRL's positional list would be ambiguous when K varies per example.

mrtpo's own older flags are aliases the same way: `--heldout-every` is `--eval-every`,
`--eval-size` is `--heldout` (OLDER_FLAGS).
"""
from __future__ import annotations

from typing import Any

#: TRL name -> TrainConfig field
TRL_ALIASES = {
    "learning_rate": "lr",
    "max_completion_length": "max_new_tokens",
    "max_steps": "steps",
    "gradient_accumulation_steps": "grad_accum",
    "save_steps": "save_every",
    "vllm_importance_sampling_correction": "importance_sampling_correction",
    "vllm_importance_sampling_mode": "importance_sampling_mode",
    "vllm_importance_sampling_clip_max": "importance_sampling_clip_max",
    "reward_weights": "reward_weights",  # the field's own name; the flag is --reward-weight
}

#: mrtpo's own older flags -> today's (mrtpo.harness.config.OLDER_NAMES says why; a config
#: file or a TrainConfig call reads the older names with config.older_names)
OLDER_FLAGS = {"heldout-every": "eval-every", "eval-size": "heldout"}

#: flag spellings (after '_' -> '-') -> the flag `mrtpo train` declares
_FLAG_ALIASES = {**{k.replace("_", "-"): v.replace("_", "-") for k, v in TRL_ALIASES.items()},
                 "reward-weights": "reward-weight", **OLDER_FLAGS}


def normalize_flag(name: str) -> str:
    """click's token_normalize_func for `mrtpo train`: `max_steps` -> `steps`, `num_generations`
    -> `num-generations` (applied to the declared names and to what the user typed)."""
    name = name.replace("_", "-")
    return _FLAG_ALIASES.get(name, name)


def apply_aliases(values: dict[str, Any], where: str) -> dict[str, Any]:
    """YAML keys (already '_'-spelt) with TRL's names mapped to the fields; both names of one
    setting given at once is an error, as is TRL's positional reward_weights list."""
    from mrtpo.harness.errors import ConfigError

    out: dict[str, Any] = {}
    given: dict[str, str] = {}  # field -> the key that set it
    for key, value in values.items():
        field = TRL_ALIASES.get(key, key)
        if field in out:
            first, second = sorted((given[field], key))
            raise ConfigError(f"{where}: {first!r} and {second!r} name the same setting; keep one")
        out[field], given[field] = value, key
    if isinstance(out.get("reward_weights"), list):
        raise ConfigError(f"{where}: reward_weights: give each weight by its reward's name, e.g. "
                          "{format: 1.0, correct: 2.0} (`mrtpo tasks ls` lists a task's rewards); TRL's "
                          "positional list is ambiguous when the rewards differ per example")
    return out
