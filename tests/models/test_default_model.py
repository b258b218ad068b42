"""The built-in policy's recipe at a tiny size: injected errors, supervised data, the cached
build (atomic, reused, rebuilt when asked), `resolve_model` and `mrtpo model build`.

The full default (about 6M parameters, minutes to build) is never built here: the same
code runs with a recipe of a few thousand parameters and a handful of steps.
"""
from __future__ import annotations

import json
import random
from dataclasses import replace

import pytest

from mrtpo.models import builtin
from mrtpo.models import builds as dm
from mrtpo.models import tiny_build
from mrtpo.models import sft
from mrtpo.models.injected import candidate_errors
from mrtpo.tasks import get_task
from tiny_recipe import tiny_recipe

TASKS = ("toolcall", "text2sql", "instruct")


@pytest.fixture(scope="module")
def prepared():
    rng = random.Random(0)
    cfg = sft.SFTConfig()
    return {name: sft.prepare_examples(get_task(name), get_task(name).load()[:6], cfg, rng) for name in TASKS}


# --- injected errors ---------------------------------------------------------------------

@pytest.mark.parametrize("name", TASKS)
def test_injected_errors_score_lower_on_the_rewards_they_are_filed_under(name, prepared):
    task = get_task(name)
    assert prepared[name], f"no example of {name} has a reference"
    for d in prepared[name]:
        rewards = task.rewards(d.example)
        ref = {r.name: v.score for r, v in zip(rewards, task.score(d.example, d.reference.text))}
        for err in d.errors:
            assert err.text != d.reference.text
            got = {r.name: v.score for r, v in zip(rewards, task.score(d.example, err.text))}
            assert err.failed and all(got[k] < ref[k] for k in err.failed), (err.kind, err.text)
            assert all(got[k] >= ref[k] for k in ref if k not in err.failed)


@pytest.mark.parametrize("name", ["toolcall", "text2sql"])
def test_every_reward_has_single_fault_errors(name, prepared):
    """Each reward of the fixed-K tasks can be broken on its own in most examples, so the
    warm start's errors spread over all rewards."""
    names = {r.name for r in get_task(name).rewards(prepared[name][0].example)}
    for reward in names:
        covered = [d for d in prepared[name]
                   if any(e.failed == (reward,) for e in d.errors)
                   or (reward != "format" and any(reward in e.failed for e in d.errors))]
        assert len(covered) >= len(prepared[name]) // 2, reward


def test_error_kinds_per_format():
    rng = random.Random(0)
    tool = get_task("toolcall")
    ex = tool.load()[0]
    kinds = {k for k, _ in candidate_errors(tool.format, tool.reference(ex), rng)}
    assert {"format:missing_tags", "format:text_before"} <= kinds
    assert any(k.startswith("call:") for k in kinds)
    sql = get_task("text2sql")
    ex = sql.load()[1]
    cands = candidate_errors(sql.format, sql.reference(ex), rng)
    assert ("format:missing_fence", sql.format.parse(sql.reference(ex)).answer) in cands
    assert any(k.startswith("sql:") for k, _ in cands)


def test_wrong_argument_uses_other_real_values():
    from mrtpo.models.injected import argument_values

    task = get_task("toolcall")
    refs = [task.reference(ex) for ex in task.load()]
    values = argument_values(task.format, refs)
    assert "location" in values and len(values["location"]) > 1
    ref = refs[0]
    cands = candidate_errors(task.format, ref, random.Random(1), n_content=30, values=values)
    others = [t for k, t in cands if k == "call:other_value"]
    assert others
    parsed = task.format.parse(others[0]).answer[0]["arguments"]
    assert any(v in values[k] for k, v in parsed.items())


# --- supervised data ---------------------------------------------------------------------

def _context(d, name):
    return next(c for c in d.contexts if c.name == name)


def test_p_all_carries_the_blocks_and_teaches_the_reference(prepared):
    """toolcall's P_all holds the reference as a block; its target is that reference."""
    for d in prepared["toolcall"]:
        p_all = _context(d, "P_all")
        user = p_all.messages[-1]["content"]
        assert d.p0[-1]["content"] in user and len(user) > len(d.p0[-1]["content"])
        assert d.reference.text in user and set(p_all.targets) == {sft.REFERENCE}


@pytest.mark.parametrize("name", TASKS)
def test_p_without_k_teaches_an_error_in_reward_k_alone(name, prepared):
    """Without block k the target breaks reward k (and, where such an error exists, nothing
    else); the context is the replay's own P_without_k."""
    from mrtpo.contexts import block_texts, context_messages

    task = get_task(name)
    seen = 0
    for d in prepared[name]:
        rewards = {r.name: r for r in task.rewards(d.example)}
        for c in d.contexts:
            if c.name == "P_all":
                continue
            reward = c.name.split(":", 1)[1]
            assert c.targets and sft.REFERENCE not in c.targets
            assert all(reward in d.errors[i].failed for i in c.targets), (c.name, [d.errors[i].failed for i in c.targets])
            fewest = min(len(e.failed) for e in d.errors if reward in e.failed)
            assert all(len(d.errors[i].failed) == fewest for i in c.targets)
            seen += 1
        # the reference's own P_without_k contexts are exactly the replay's
        blocks = block_texts(task, d.example, task.score(d.example, d.reference.text))
        _, without = context_messages(task, d.example, blocks)
        names = [c.name for c in d.contexts]
        for r, msgs, b in zip(rewards, without, blocks):
            if b.strip() and f"P_without:{r}" in names:
                assert any(c.messages == msgs for c in d.contexts)
    assert seen


def test_text2sql_without_its_sqlite_error_teaches_the_erroneous_query(prepared):
    """The SQLite-error block is response-dependent: without it, the target is the very
    response whose error the block named (the column is avoided only with the block). That
    context is the reference's P_all too (the other blocks do not depend on the response), so
    it teaches both: the reference and the erroneous query."""
    task = get_task("text2sql")
    found = 0
    for d in prepared["text2sql"]:
        for c in (c for c in d.contexts if c.name == "P_all"):
            wrong = [i for i in c.targets if i != sft.REFERENCE]
            for i in wrong:
                verdicts = task.score(d.example, d.errors[i].text)
                assert "SQLite error" in verdicts[1].feedback
                assert "SQLite error" not in c.messages[-1]["content"]
                found += 1
    assert found


def test_draw_prompt_follows_the_shares(prepared, tiny_tokenizer):
    data = [d for name in TASKS for d in prepared[name]]
    sft.tokenize(data, tiny_tokenizer)
    cfg = sft.SFTConfig(error_share=0.5, context_share=0.2, targets_per_prompt=3, context_targets=2)
    rng = random.Random(0)
    draws = [sft.draw_prompt(rng.choice(data), cfg, rng) for _ in range(3000)]
    in_context = [x for x in draws if x[2][0].startswith("P_")]
    assert abs(len(in_context) / len(draws) - 0.2) < 0.03
    assert all(len(targets) == 2 for _, targets, _ in in_context)
    kinds = [k for _, targets, ks in draws if not ks[0].startswith("P_") for k in ks]
    assert len(kinds) == 3 * (len(draws) - len(in_context))
    with_errors = sum(bool(d.errors_by_reward()) for d in data) / len(data)
    assert abs(kinds.count("error") / len(kinds) - 0.5 * with_errors) < 0.04
    d = prepared["toolcall"][0]
    prompt, targets, names = sft.draw_prompt(d, replace(cfg, context_share=1.0), rng)
    i = d.context_ids.index(prompt)
    assert names[0] == d.contexts[i].name
    if names[0] == "P_all":
        assert all(t == d.reference_ids for t in targets)
    else:
        assert all(t != d.reference_ids for t in targets)
    assert targets[0][-1] == tiny_tokenizer.eos_token_id


def test_example_picker_follows_task_weights(prepared, tiny_tokenizer):
    data = [d for name in TASKS for d in prepared[name]]
    cfg = sft.SFTConfig(task_weights=(("toolcall", 3.0), ("text2sql", 1.0), ("instruct", 0.0)))
    pick = sft.example_picker(data, cfg, random.Random(0))
    names = [pick().task.name for _ in range(4000)]
    assert names.count("instruct") == 0
    assert abs(names.count("toolcall") / len(names) - 0.75) < 0.03


def test_collate_shared_pads_prompts_left_and_targets_right():
    b = sft.collate_shared([([5, 6, 7], [[8, 9], [10]]), ([5], [[8]])], pad_id=0, max_length=16,
                           prompt_weight=0.1)
    assert b.prompt_ids.tolist() == [[5, 6, 7], [0, 0, 5]]
    assert b.prompt_mask.tolist() == [[1, 1, 1], [0, 0, 1]]
    assert b.prompt_weight.flatten().tolist() == pytest.approx([0, 0.1, 0.1, 0, 0, 0])
    assert b.owner.tolist() == [0, 0, 1]
    assert b.target_ids.tolist() == [[8, 9], [10, 0], [8, 0]]
    assert b.target_mask.tolist() == [[1, 1], [1, 0], [1, 0]]
    b = sft.collate_shared([([1, 2, 3, 4, 5], [[6, 7]])], pad_id=0, max_length=4, prompt_weight=0.0)
    assert b.prompt_ids.tolist() == [[4, 5]]  # the prompt loses tokens from the left


def test_shared_prompt_loss_equals_one_forward_per_sequence(tiny_tokenizer):
    """Targets that reuse their prompt's KV cache get exactly the log-likelihood that a full
    forward of prompt + target gives (positions, masks and the first target token)."""
    import torch
    import torch.nn.functional as F

    from mrtpo.models.tiny import build_model

    model = build_model(tiny_tokenizer, hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2, seed=0).eval()
    g = random.Random(0)
    items = [([g.randrange(3, 300) for _ in range(n)], [[g.randrange(3, 300) for _ in range(m)] for m in ms])
             for n, ms in [(7, [3, 5]), (4, [2]), (9, [4, 1, 6])]]
    _, target_loss = sft.shared_loss(model, sft.collate_shared(items, tiny_tokenizer.pad_token_id, 64, 0.0))
    total, count = 0.0, 0
    with torch.no_grad():
        for prompt, targets in items:
            for t in targets:
                logits = model(input_ids=torch.tensor([prompt + t])).logits[0]  # [P + T, V]
                total += float(F.cross_entropy(logits[len(prompt) - 1:-1], torch.tensor(t), reduction="sum"))
                count += len(t)
    assert target_loss == pytest.approx(total / count, rel=1e-5)


def test_copy_batch_repeats_a_span_of_prompt_tokens(prepared, tiny_tokenizer):
    data = prepared["text2sql"]
    sft.tokenize(data, tiny_tokenizer)
    cfg = sft.SFTConfig(copy_batch=8, copy_span=16)
    ids, weight = sft.copy_batch(data, cfg, random.Random(0))
    assert ids.shape == weight.shape == (8, 32)
    for row, w in zip(ids.tolist(), weight.tolist()):
        n = w.index(1.0) - 1  # the span's length: the copy's first token is not scored
        assert row[:n] == row[n:2 * n] and sum(w) == n - 1
        assert any(row[:n] == d.p0_ids[i:i + n] for d in data for i in range(len(d.p0_ids) - n + 1))


def test_supervised_pass_lowers_the_loss(prepared, tiny_tokenizer):
    from mrtpo.models.tiny import build_model

    data = prepared["toolcall"][:3]
    sft.tokenize(data, tiny_tokenizer)
    model = build_model(tiny_tokenizer, hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2, seed=0)
    cfg = sft.SFTConfig(steps=30, batch_prompts=2, targets_per_prompt=2, lr=3e-3, warmup_steps=3,
                        max_length=1024, copy_steps=5, copy_batch=4, copy_span=16)
    copy_losses = sft.train_copy(model, data, cfg)
    losses = sft.train(model, tiny_tokenizer, data, cfg)
    assert len(copy_losses) == 5 and len(losses) == 30
    assert sum(losses[-5:]) / 5 < 0.8 * sum(losses[:5]) / 5
    assert not model.training


def test_lr_schedule():
    cfg = sft.SFTConfig(steps=100, lr=1.0, warmup_steps=10, min_lr_ratio=0.1)
    assert sft.lr_at(0, cfg) == pytest.approx(0.1)
    assert sft.lr_at(9, cfg) == pytest.approx(1.0)
    assert sft.lr_at(99, cfg) == pytest.approx(0.1, abs=1e-3)
    assert all(sft.lr_at(s, cfg) >= sft.lr_at(s + 1, cfg) for s in range(10, 99))


# --- the cached build ----------------------------------------------------------------------

def test_build_is_cached_and_reused(tmp_path, monkeypatch):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    recipe = tiny_recipe()
    monkeypatch.setitem(builtin.RECIPES, recipe.name, recipe)
    path = dm.resolve_model(recipe.name, cache_dir=tmp_path, progress=False)
    assert path == str(dm.model_dir(recipe, tmp_path)) and dm.is_built(path)
    manifest = dm.read_manifest(path)
    assert manifest["fingerprint"] == dm.fingerprint(recipe)
    assert set(manifest["data"]) == set(TASKS)
    assert manifest["data"]["toolcall"]["examples"] == 3
    stamp = (tmp_path / path / builtin.MANIFEST).stat().st_mtime_ns
    # reused: the same directory, not rebuilt
    assert dm.resolve_model(recipe.name, cache_dir=tmp_path, progress=False) == path
    assert (tmp_path / path / builtin.MANIFEST).stat().st_mtime_ns == stamp
    # no temporary directories left behind
    assert [p.name for p in (tmp_path / "models").iterdir()] == [f"{recipe.name}-{dm.fingerprint(recipe)}"]
    # a user's model would load the same way
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path)
    assert tok.chat_template and tok.eos_token == "<|im_end|>"
    assert model.config.vocab_size == len(tok)
    text = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    assert text.endswith("<|im_start|>assistant\n")


def test_force_rebuilds_in_place(tmp_path):
    recipe = tiny_recipe()
    path = dm.build(recipe, cache_dir=tmp_path, progress=False)
    first = json.loads((path / builtin.MANIFEST).read_text())
    (path / "stale.txt").write_text("from the old build")
    again = dm.build(recipe, cache_dir=tmp_path, progress=False, force=True)
    assert again == path and dm.is_built(path) and not (path / "stale.txt").exists()
    assert json.loads((path / builtin.MANIFEST).read_text())["fingerprint"] == first["fingerprint"]
    assert [p.name for p in (tmp_path / "models").iterdir()] == [path.name]


def test_a_failed_build_leaves_nothing(tmp_path):
    recipe = tiny_recipe(tasks=("toolcall", "no-such-task"))
    with pytest.raises(KeyError, match="no-such-task"):
        dm.build(recipe, cache_dir=tmp_path, progress=False)
    assert not any((tmp_path / "models").iterdir())


def test_fingerprint_follows_the_recipe():
    a = tiny_recipe()
    assert dm.fingerprint(a) == dm.fingerprint(tiny_recipe())
    assert dm.fingerprint(a) != dm.fingerprint(replace(a, seed=1))
    assert dm.fingerprint(a) != dm.fingerprint(tiny_build.with_overrides(a, {"steps": 5}))


def test_resolve_leaves_paths_and_hub_ids_alone(tmp_path):
    assert dm.resolve_model(str(tmp_path), cache_dir=tmp_path) == str(tmp_path)
    assert dm.resolve_model("Qwen/Qwen2.5-0.5B-Instruct", cache_dir=tmp_path) == "Qwen/Qwen2.5-0.5B-Instruct"
    assert not (tmp_path / "models").exists()


def test_default_cache_dir_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("MRTPO_CACHE_DIR", str(tmp_path / "c"))
    assert dm.default_cache_dir() == tmp_path / "c"
    monkeypatch.delenv("MRTPO_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert dm.default_cache_dir() == tmp_path / "x" / "mrtpo"


def test_databases_and_policies_share_one_cache_root(monkeypatch, tmp_path):
    from mrtpo.tasks import text2sql_data

    monkeypatch.setenv("MRTPO_CACHE_DIR", str(tmp_path))
    assert text2sql_data.cache_dir() == dm.default_cache_dir() == tmp_path


def test_the_default_recipe_is_in_the_documented_size_range():
    """2-20M parameters (about 5-20M was asked for; 2.4M is what learns most in ~5
    minutes of 2 CPU cores, see the recipe), counted on the real model, without training."""
    import torch
    from transformers import AutoModelForCausalLM, Qwen2Config

    r = builtin.RECIPES[builtin.TINY_MODEL]
    config = Qwen2Config(vocab_size=r.vocab_size, hidden_size=r.hidden_size, intermediate_size=r.intermediate_size,
                         num_hidden_layers=r.num_layers, num_attention_heads=r.num_heads,
                         num_key_value_heads=r.num_kv_heads, tie_word_embeddings=True)
    with torch.device("meta"):
        n = sum(p.numel() for p in AutoModelForCausalLM.from_config(config).parameters())
    assert 2e6 <= n <= 20e6


def test_cli_model_build(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from mrtpo.cli import app

    recipe = tiny_recipe(name="test-tiny-cli")
    monkeypatch.setitem(builtin.RECIPES, recipe.name, recipe)
    runner = CliRunner()
    res = runner.invoke(app, ["model", "build", recipe.name, "--cache-dir", str(tmp_path)])
    assert res.exit_code == 0, res.output
    path = dm.model_dir(recipe, tmp_path)
    assert dm.is_built(path) and str(path) in res.stdout
    res = runner.invoke(app, ["model", "build", recipe.name, "--cache-dir", str(tmp_path)])
    assert res.exit_code == 0 and "cached" in res.output
    res = runner.invoke(app, ["model", "ls", "--cache-dir", str(tmp_path)])
    assert res.exit_code == 0 and recipe.name in res.stdout
    res = runner.invoke(app, ["model", "build", "no-such-model", "--cache-dir", str(tmp_path)])
    assert res.exit_code == 2 and "mrtpo-tiny" in res.output


def test_train_without_model_uses_the_builtin_policy_and_its_settings():
    from mrtpo.harness.config import resolve

    cfg = resolve(None, {"lora": True})
    assert cfg.model == builtin.DEFAULT_MODEL and cfg.lora
    for key, value in builtin.TRAIN_DEFAULTS[builtin.DEFAULT_MODEL].items():
        assert getattr(cfg, key) == value
    cfg = resolve(None, {"steps": 3, "task": "instruct"})  # flags given win
    assert (cfg.model, cfg.steps, cfg.task) == (builtin.DEFAULT_MODEL, 3, "instruct")
    cfg = resolve(None, {"model": "some/model", "task": "toolcall"})  # another model: trainer defaults
    assert cfg.lr != builtin.TRAIN_DEFAULTS[builtin.DEFAULT_MODEL]["lr"]


def test_the_trainer_loads_a_builtin_name_from_the_cache(tmp_path, monkeypatch):
    """`train(model="<built-in name>")` resolves the name to its cached build and trains it."""
    from mrtpo.harness import TrainConfig, train

    recipe = tiny_recipe(name="test-tiny-train", tasks=("toolcall",))
    monkeypatch.setitem(builtin.RECIPES, recipe.name, recipe)
    monkeypatch.setenv("MRTPO_CACHE_DIR", str(tmp_path / "cache"))
    cfg = TrainConfig(model=recipe.name, task="toolcall", steps=1, batch_prompts=1, num_generations=2,
                      max_new_tokens=4, output_dir=str(tmp_path / "run"), verify_workers=0,
                      log_completions_every=0, save_every=0)
    result = train(cfg)
    assert dm.is_built(dm.model_dir(recipe)) and len(result.history) == 1
