"""One default policy for every command that takes a model: `mrtpo train`, `eval`, `credit
TASK`, `probe` and `model build` with no model use `mrtpo.models.builtin.DEFAULT_MODEL`, built
on first use (here a tiny packaged policy, built in a second, stands in for it)."""
from __future__ import annotations

import pytest
from typer.testing import CliRunner

from mrtpo.cli import app
from mrtpo.models import builtin
from mrtpo.models import builds as dm
from tiny_gguf import packaged_default

ENV = {"COLUMNS": "200", "NO_COLOR": "1", "MRTPO_PROGRESS_SECONDS": "0"}
pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def default_policy(tmp_path_factory, tiny_gguf_file):
    """A tiny packaged policy as the default policy, built once into its own cache."""
    cache = tmp_path_factory.mktemp("cache")
    with pytest.MonkeyPatch.context() as mp:
        recipe = packaged_default(tiny_gguf_file, tmp_path_factory.mktemp("site"), "test-default", mp)
        mp.setattr(builtin, "DEFAULT_MODEL", recipe.name)
        mp.setenv("MRTPO_CACHE_DIR", str(cache))
        r = CliRunner().invoke(app, ["model", "build"], env=ENV)
        assert r.exit_code == 0, r.output
        path = dm.model_dir(recipe)
        assert r.stdout.strip().splitlines()[-1] == str(path) and dm.intact(path) is None
        yield recipe.name, path, mp


def test_eval_without_model_or_responses_generates_with_the_default_policy(default_policy):
    name, _, _ = default_policy
    r = CliRunner().invoke(app, ["eval", "toolcall", "--limit", "1", "--max-new-tokens", "4"], env=ENV)
    assert r.exit_code == 0, r.output
    assert f"eval: no --model or --responses: generating with the built-in default policy {name}" in r.stderr
    assert "ast_accuracy" in r.stdout


def test_eval_refuses_both_a_model_and_responses(default_policy, tmp_path):
    responses = tmp_path / "r.jsonl"
    responses.write_text('{"id": "x", "response": "y"}\n')
    r = CliRunner().invoke(app, ["eval", "toolcall", "--model", default_policy[0], "--responses", str(responses)],
                           env=ENV)
    assert r.exit_code == 2 and "give one of --responses FILE and --model PATH, not both" in r.stderr


def test_credit_of_a_task_without_model_replays_with_the_default_policy(default_policy):
    name, _, _ = default_policy
    r = CliRunner().invoke(app, ["credit", "toolcall", "--limit", "1", "--plain"], env=ENV)
    assert r.exit_code == 0, r.output
    assert f"credit: no --model: replaying with the built-in default policy {name}" in r.stderr


def test_probe_without_model_probes_the_default_policy(default_policy):
    name, path, _ = default_policy
    r = CliRunner().invoke(app, ["probe", "toolcall", "--limit", "1", "--no-control"], env=ENV)
    assert r.exit_code == 0, r.output
    assert f"probing toolcall with {name}" in r.stderr
