"""Replay: the shared-prefix method equals one full forward per context, on real tiny models.

The reference in these tests is independent of mrtpo.replay: one unbatched forward per
(response, context) over the whole sequence, all logits kept, JS computed in float64.
"""
from __future__ import annotations

import math

import pytest
import torch

from mrtpo.replay import js_distance
from mrtpo.contexts import ReplayItem, build_item
from mrtpo.replay import ReplayOptions, distances, replay_groups, replay_tokens
from replay_models import EX2, TOL, begin_alike_items, load_model, one_thread  # noqa: F401 (one_thread: an autouse fixture)
from replay_task import EX, SQLishTask


@pytest.fixture(scope="module")
def models(tiny_qwen2_dir, tiny_llama_dir):
    return {"qwen2": load_model(tiny_qwen2_dir), "llama": load_model(tiny_llama_dir)}




def _sampled_items(model, tokenizer, n_per_example: int = 3) -> list[ReplayItem]:
    """Responses sampled from the model on P0 (plus a hand-written one that errors), with their
    verdicts and contexts, as the trainer will build them."""
    from mrtpo.contexts import render_ids

    task = SQLishTask()
    items = []
    torch.manual_seed(0)
    for ex in (EX, EX2):
        p0 = torch.tensor([render_ids(tokenizer, task.messages(ex))])
        for i in range(n_per_example):
            out = model.generate(p0, attention_mask=torch.ones_like(p0), do_sample=True,
                                 max_new_tokens=4 + 3 * i, min_new_tokens=4 + 3 * i,
                                 pad_token_id=tokenizer.pad_token_id)
            ids = out[0, p0.shape[1]:].tolist()
            items.append(build_item(task, tokenizer, ex, ids, task.score(ex, tokenizer.decode(ids))))
        text = "```sql\nSELECT nme FROM singer\n```"
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        items.append(build_item(task, tokenizer, ex, ids, task.score(ex, text)))
    return items


@pytest.fixture(scope="module")
def items(models, tiny_tokenizer):
    return _sampled_items(models["qwen2"], tiny_tokenizer)


def _js64(la: torch.Tensor, lb: torch.Tensor) -> torch.Tensor:
    """JS distance in float64 straight from the definition (KL to the mixture, base 2)."""
    p, q = torch.softmax(la.double(), -1), torch.softmax(lb.double(), -1)
    m = (p + q) / 2

    def kl(a):
        return torch.where(a > 0, a * (a.log() - m.log()), torch.zeros_like(a)).sum(-1)

    return ((kl(p) + kl(q)) / 2 / math.log(2)).clamp(0, 1).sqrt()


@pytest.fixture(scope="module")
def reference(models, items):
    """The naive distances of the module's items, computed once per (arch, temperature)."""
    cache = {}

    def get(arch: str, temperature: float = 1.0) -> torch.Tensor:
        if (arch, temperature) not in cache:
            cache[arch, temperature] = naive_distances(models[arch], items, temperature)
        return cache[arch, temperature]

    return get


def naive_distances(model, items, temperature: float = 1.0) -> torch.Tensor:
    k = max(it.num_rewards for it in items)
    t = max(len(it.response_ids) for it in items)
    q = torch.zeros(len(items), k, t, dtype=torch.float64)
    model.eval()
    with torch.no_grad():
        def logits(ctx, resp):
            out = model(torch.tensor([ctx + resp])).logits[0]  # [L, V]
            return out[len(ctx) - 1:len(ctx) - 1 + len(resp)] / temperature  # [T, V]

        for n, it in enumerate(items):
            la = logits(it.context_ids[0], it.response_ids)
            for j in range(it.num_rewards):
                lb = logits(it.context_ids[1 + j], it.response_ids)
                q[n, j, :len(it.response_ids)] = _js64(la, lb)
    return q


@pytest.mark.parametrize("arch", ["qwen2", "llama"])
@pytest.mark.parametrize("side", ["left", "right"])
def test_shared_prefix_equals_one_forward_per_context(models, items, reference, arch, side):
    model = models[arch]
    ref = reference(arch)
    shared = distances(model, items, padding_side=side)
    full = distances(model, items, shared_prefix=False, padding_side=side)
    assert shared.shape == full.shape == ref.shape and shared.dtype == torch.float32
    assert (shared.double() - ref).abs().max() <= TOL
    assert (full.double() - ref).abs().max() <= TOL
    assert (shared - full).abs().max() <= TOL
    assert ref.max() > 0.1  # the contexts really change the distributions
    # the shared prefix really is shared: two prompts -> two groups, far fewer tokens
    assert len(replay_groups(items)) == 2
    assert replay_tokens(items) < 0.6 * replay_tokens(items, shared_prefix=False)


@pytest.mark.parametrize("arch", ["qwen2", "llama"])
def test_lora_adapter(models, items, arch):
    import copy

    from peft import LoraConfig, get_peft_model

    base = models[arch]
    q_base = distances(base, items)
    peft_model = get_peft_model(copy.deepcopy(base), LoraConfig(
        r=4, lora_alpha=8, init_lora_weights=False,
        target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]))
    peft_model.train()
    ref = naive_distances(peft_model, items)
    peft_model.train()
    shared = distances(peft_model, items, padding_side="left")
    assert peft_model.training  # restored
    full = distances(peft_model, items, shared_prefix=False)
    assert (shared.double() - ref).abs().max() <= TOL
    assert (shared - full).abs().max() <= TOL
    assert (shared - q_base).abs().max() > 1e-3  # the adapter is part of the replay


def test_small_batches_and_chunks_give_the_same_distances(models, items):
    model = models["llama"]
    default = distances(model, items)
    tiny = distances(model, items, batch_tokens=60, chunk_tokens=3)  # several forwards and waves
    assert len(items) > 4
    assert (default - tiny).abs().max() <= TOL
    full = distances(model, items, shared_prefix=False, batch_tokens=1)
    assert (default - full).abs().max() <= TOL


def test_empty_block_gives_zero_for_that_reward(models, items):
    q = distances(models["qwen2"], items)
    for n, it in enumerate(items):
        t = len(it.response_ids)
        for k, block in enumerate(it.blocks):
            if block:
                assert q[n, k, :t].max() > 0
            else:
                assert torch.all(q[n, k] == 0)
    assert any(not it.blocks[1] for it in items) and any(it.blocks[1] for it in items)


def test_identical_contexts_give_zero(models, items):
    # a context equal to P_all is not replayed (q is exactly 0 by construction), and equal
    # logits give exactly 0 in the JS step itself
    same = [ReplayItem([it.context_ids[0]] * 4, it.response_ids, it.reward_names, ["x", "y", "z"]) for it in items]
    for shared in (True, False):
        assert torch.all(distances(models["qwen2"], same, shared_prefix=shared) == 0)
    logits = torch.randn(5, 7, 400)
    assert torch.all(js_distance(logits, logits.clone()) == 0)


def test_skipped_rewards_are_not_replayed_and_the_others_keep_their_distances(models, items, reference):
    """`only_rewards` (the trainer drops rewards with zero credit): a dropped reward's q is 0
    and its context is not fed; every kept reward's q is the full replay's."""
    from mrtpo.contexts import only_rewards

    keep = [[(n + k) % 2 == 0 for k in range(it.num_rewards)] for n, it in enumerate(items)]
    fewer = [only_rewards(it, kp) for it, kp in zip(items, keep)]
    q = distances(models["qwen2"], fewer)
    ref = reference("qwen2")
    for n, (it, kp) in enumerate(zip(items, keep)):
        t = len(it.response_ids)
        for k, kept in enumerate(kp):
            if kept:
                torch.testing.assert_close(q[n, k, :t].double(), ref[n, k, :t], atol=1e-4, rtol=0)
            else:
                assert torch.all(q[n, k] == 0) and fewer[n].blocks[k] == it.blocks[k]
    assert replay_tokens(fewer) < replay_tokens(items)
    assert any(not kept and it.blocks[k] for it, kp in zip(items, keep) for k, kept in enumerate(kp))
    with pytest.raises(ValueError, match="keep has 1 entries"):
        only_rewards(items[0], [True])


def test_response_ids_in_every_context_are_the_sampled_ids(items):
    for shared in (True, False):
        fed = 0
        for group in replay_groups(items, shared_prefix=shared):
            for n, slot, ids in group.rows:
                it = items[n]
                assert ids[len(ids) - len(it.response_ids):] == it.response_ids
                assert group.prefix + ids == it.context_ids[slot] + it.response_ids
                fed += 1
        # every context that differs from P_all is replayed, plus P_all once per response
        assert fed == sum(1 + len({tuple(c) for c in it.context_ids[1:]} - {tuple(it.context_ids[0])})
                          for it in items)


def test_context_suffixes_shared_by_responses_are_fed_once(items):
    """Blocks that do not depend on the response give all responses of a prompt the same
    context after the prefix (here P_without_execution); that suffix is encoded once."""
    from mrtpo.replay.planning import split_branches as _branches

    shared_rows = 0
    for group in replay_groups(items):
        singles, branches = _branches(group.rows, items)
        assert len(singles) + sum(len(rows) for _, rows in branches) == len(group.rows)
        for suffix, rows in branches:
            assert len(rows) > 1 and all(items[n].context_ids[slot] == group.prefix + suffix for n, slot in rows)
        shared_rows += sum(len(rows) for _, rows in branches)
    assert shared_rows >= 4
    one_level = sum(len(g.prefix) + sum(len(ids) for _, _, ids in g.rows) for g in replay_groups(items))
    assert replay_tokens(items) < one_level


def test_shape_padding_and_absent_rewards(models, items):
    one = items[0]
    short = ReplayItem(one.context_ids[:2], one.response_ids[:2], one.reward_names[:1], one.blocks[:1])
    batch = [short, items[3]]
    t = len(items[3].response_ids)
    q = distances(models["qwen2"], batch, k_max=5, length=t + 4)
    assert q.shape == (2, 5, t + 4)
    assert torch.all(q[0, 1:] == 0) and torch.all(q[0, 0, 2:] == 0)  # absent rewards, padding
    assert torch.all(q[1, 3:] == 0) and torch.all(q[1, :, t:] == 0)
    assert q[0, 0, :2].min() > 0
    with pytest.raises(ValueError, match="k_max=2"):
        distances(models["qwen2"], batch, k_max=2)
    with pytest.raises(ValueError, match="length=1"):
        distances(models["qwen2"], batch, length=1)
    assert distances(models["qwen2"], [], k_max=3, length=4).shape == (0, 3, 4)


def test_temperature_applies_to_logits(models, items, reference):
    model = models["llama"]
    q2 = distances(model, items, temperature=2.0)
    assert (q2.double() - reference("llama", 2.0)).abs().max() <= TOL
    assert (q2 - distances(model, items)).abs().max() > 1e-3


def test_no_grad_and_eval_mode_during_replay(models, items):
    model = models["qwen2"]
    seen = []
    hook = model.get_decoder().register_forward_hook(lambda m, i, o: seen.append((m.training, torch.is_grad_enabled())))
    try:
        model.train()
        q = distances(model, items)
    finally:
        hook.remove()
        model.eval()
    assert seen and all(s == (False, False) for s in seen)
    assert not q.requires_grad


def test_js_distance_is_exact_near_zero():
    """Rounding noise must not be amplified by the square root (q ~ 1e-4 for equal inputs)."""
    g = torch.Generator().manual_seed(0)
    a = torch.randn(64, 3000, generator=g, dtype=torch.float64) * 3
    for eps in (1e-6, 1e-3, 0.3):
        b = a + eps * torch.randn(a.shape, generator=g, dtype=torch.float64)
        got = js_distance(a.float(), b.float()).double()
        assert (got - _js64(a.float().double(), b.float().double())).abs().max() < 1e-6
        assert torch.equal(got, js_distance(b.float(), a.float()).double())  # symmetric
    a[:, :5] = -math.inf
    b = a.clone()
    b[:, 3:9] = -math.inf
    got = js_distance(a.float(), b.float())
    assert torch.isfinite(got).all() and (got.double() - _js64(a, b)).abs().max() < 1e-6


def test_the_replays_js_step_equals_the_pairwise_reference():
    """`js_against_first` (each context exponentiated once) gives `js_distance_log_probs`'s
    figures and float64's, near zero, at -inf entries and in chunks of rows; identical
    contexts give exactly 0 and one-hot against one-hot exactly 1."""
    from mrtpo.replay.js import js_against_first, js_distance_log_probs

    g = torch.Generator().manual_seed(1)
    a = torch.randn(7, 3000, generator=g, dtype=torch.float64) * 3  # [r, V]
    ctx = [a] + [a + eps * torch.randn(a.shape, generator=g, dtype=torch.float64) for eps in (1e-6, 1e-3, 0.3, 3.0)]
    ctx[3][:, :5] = -math.inf
    ctx[4][:, 3:9] = -math.inf
    lp = torch.log_softmax(torch.stack(ctx).float(), -1)  # [C, r, V]
    others = [1, 2, 3, 4]
    for chunk in (2**20, 4 * 3000 * 2):  # one chunk; two rows a chunk
        got = js_against_first(lp, others, chunk_bytes=chunk)  # [4, r]
        for o, j in enumerate(others):
            assert (got[o] - js_distance_log_probs(lp[0], lp[j])).abs().max() < 1e-6
            assert (got[o].double() - _js64(lp[0], lp[j])).abs().max() < 1e-6
    same = js_against_first(torch.stack([lp[0], lp[0].clone()]), [1])
    assert torch.all(same == 0)
    onehot = torch.full((2, 1, 10), -math.inf)
    onehot[0, 0, 2] = onehot[1, 0, 7] = 0.0
    assert js_against_first(onehot, [1]).item() == pytest.approx(1.0, abs=1e-6)


def test_text2sql_task_items(models, tiny_tokenizer):
    """The built-in text-to-SQL task end to end: bundled sample, real SQLite verdicts, blocks."""
    from mrtpo.contexts import render_ids
    from mrtpo.tasks.text2sql import Text2SQLTask

    task = Text2SQLTask(workers=0)
    ex = task.load()[0]
    model = models["qwen2"]
    p0 = torch.tensor([render_ids(tiny_tokenizer, task.messages(ex))])
    torch.manual_seed(0)
    sampled = model.generate(p0, attention_mask=torch.ones_like(p0), do_sample=True, max_new_tokens=6,
                             min_new_tokens=6, pad_token_id=tiny_tokenizer.pad_token_id)[0, p0.shape[1]:].tolist()
    texts = [task.reference(ex), "```sql\nSELECT nme FROM no_such_table\n```"]
    responses = [tiny_tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts] + [sampled]
    items = [build_item(task, tiny_tokenizer, ex, ids, task.score(ex, tiny_tokenizer.decode(ids))) for ids in responses]
    assert items[0].blocks[1] == "" and "no such table" in items[1].blocks[1]
    shared = distances(model, items)
    assert (shared - distances(model, items, shared_prefix=False)).abs().max() <= TOL
    assert torch.all(shared[0, 1] == 0) and shared[1, 1].max() > 0
    (group,) = replay_groups(items)  # one prompt -> one group sharing the schema prompt
    assert len(group.prefix) > 0.8 * min(len(c) for it in items for c in it.context_ids)


def test_toolcall_contexts_that_keep_p0_share_it(models, tiny_tokenizer):
    """toolcall's P_without_schema edits P0's tool list, so the prefix all contexts share is
    short; the three contexts that keep all of P0 share it after that prefix, and that part is
    encoded once (`_clusters`): the same distances as one forward per context, fewer tokens."""
    from mrtpo.replay.planning import cluster_suffixes as _clusters, split_branches as _branches
    from mrtpo.tasks import get_task

    task = get_task("toolcall")
    model = models["qwen2"]
    items = []
    for ex in task.load()[:2]:
        ref = task.reference(ex)
        for text in (ref, ref.replace('"name": "', '"name": "x_'), "no call at all"):
            ids = tiny_tokenizer(text, add_special_tokens=False)["input_ids"]
            items.append(build_item(task, tiny_tokenizer, ex, ids, task.score(ex, text)))
    shared = distances(model, items)
    assert (shared - distances(model, items, shared_prefix=False)).abs().max() <= TOL
    assert shared.amax() > 0
    groups = replay_groups(items)
    found, saved, unclustered = 0, 0, 0
    for g in groups:
        singles, branches = _branches(g.rows, items)
        unclustered += len(g.prefix) + sum(len(ids) for _, _, ids in singles) + sum(  # a row per response,
            len(suffix) + sum(len(items[n].response_ids) - 1 for n, _ in rows) for suffix, rows in branches)  # but its last token
        for beginning, members in _clusters(branches):
            if beginning:
                found += 1
                assert len(members) >= 2 and all(branches[b][0][:len(beginning)] == beginning for b in members)
                saved += (len(members) - 1) * len(beginning)
    assert found >= 1 and saved > 0
    from mrtpo.replay.planning import groups_common

    common = groups_common(groups)  # the two prompts' prefixes begin alike: that beginning once
    one_level = ReplayOptions(trunks=False)  # `_clusters`, as counted above
    assert replay_tokens(items, tree_tokens=0, options=one_level) == unclustered - saved - common
    assert replay_tokens(items, options=one_level) < unclustered - saved - common  # the reference and its edit
    assert (distances(model, items, tree_tokens=0, options=one_level) - shared).abs().max() <= TOL
    # nested trunks (the default) share at least as much, and more here: the same distances
    assert replay_tokens(items, tree_tokens=0) < replay_tokens(items, tree_tokens=0, options=one_level)
    assert (distances(model, items, tree_tokens=0) - shared).abs().max() <= TOL



def test_suffixes_nested_by_what_they_share_are_encoded_once(models, tiny_tokenizer):
    """text2sql with its worked example: the P_all and P_without_result rows of both prompts
    share the example and the schema, those of one prompt its question too, those of one
    response its blocks before the last, a branch's rows their suffix: `suffix_trunks` encodes
    each such beginning once (nested), for fewer tokens than the one-level clusters and the
    same distances; every row lands once, its trunks its own beginning."""
    from mrtpo.replay.planning import FORWARD_TOKENS, Trunk, split_branches, suffix_trunks
    from mrtpo.tasks.text2sql import Text2SQLTask

    task = Text2SQLTask(workers=0, demo=True)
    exs = [ex for ex in task.load() if ex.data.get("db_id") == task.load()[0].data.get("db_id")][:2]
    items = []
    for ex in exs:
        for text in (task.reference(ex), "```sql\nSELECT nme FROM no_such_table\n```", "no query", "SELECT 1"):
            ids = tiny_tokenizer(text, add_special_tokens=False)["input_ids"]
            items.append(build_item(task, tiny_tokenizer, ex, ids, task.score(ex, text)))
    (group,) = replay_groups(items)
    singles, branches = split_branches(group.rows, items)
    root = suffix_trunks(singles, branches, items, min_saved=FORWARD_TOKENS)  # tiny prompts: a low bar

    def entries(t: Trunk) -> int:
        return len(t.rows) + sum(entries(k) for k in t.kids)

    def walk(t: Trunk, above: list[int], depth: int = 0):
        assert t.depth == len(above) and (depth == 0) == (not t.shared)
        for n, slot, ids in t.rows:  # every row begins with the trunks above it, short of its suffix
            assert ids[:t.depth] == above and t.depth < len(ids) - len(items[n].response_ids)
            yield (n, slot), depth
        for kid in t.kids:  # a trunk saves a forward's worth of tokens or more
            assert (entries(kid) - 1) * len(kid.shared) >= FORWARD_TOKENS
            yield from walk(kid, above + kid.shared, depth + 1)

    placed = list(walk(root, []))
    assert sorted(p for p, _ in placed) == sorted([(n, s) for n, s, _ in singles]
                                                  + [m for _, members in branches for m in members])  # each once
    assert max(d for _, d in placed) >= 2  # nested: the example and schema, then a prompt's question
    one_level = ReplayOptions(trunks=False)
    assert replay_tokens(items) < replay_tokens(items, options=one_level)
    full = distances(models["qwen2"], items, shared_prefix=False)
    assert full.amax() > 0
    for options in (ReplayOptions(), one_level):
        assert (distances(models["qwen2"], items, options=options) - full).abs().max() <= TOL
    assert not suffix_trunks(singles, branches, items, min_saved=10**9).kids  # a trunk must save enough

@pytest.mark.parametrize("arch", ["qwen2", "llama"])
def test_responses_that_begin_alike_are_fed_once_as_a_trie(models, tiny_tokenizer, arch):
    """After a context suffix several responses share, their responses go through the model as
    one token trie (a shared beginning once, tree attention), and positions whose distances an
    item with the same contexts already has are copied: the same q as the naive reference,
    as one row per response, as small tries, and as one forward per context."""
    items = begin_alike_items(tiny_tokenizer)
    model = models[arch]
    ref = naive_distances(model, items)
    trie = distances(model, items)
    assert (trie.double() - ref).abs().max() <= TOL and ref.max() > 0.1
    for kw in ({"tree_tokens": 0}, {"tree_tokens": 12, "batch_tokens": 40, "chunk_tokens": 5},
               {"shared_prefix": False}):
        assert (distances(model, items, **kw) - trie).abs().max() <= TOL, kw
    from mrtpo.replay.planning import split_branches as _branches

    def saved(seqs) -> int:  # fed tokens less their distinct beginnings
        return sum(map(len, seqs)) - len({tuple(s[:d + 1]) for s in seqs for d in range(len(s))})

    in_branches = in_singles = 0
    for g in replay_groups(items):
        singles, branches = _branches(g.rows, items)
        in_singles += saved([ids[:-1] for _, _, ids in singles])  # a response's own contexts, before its block
        in_branches += sum(saved([items[n].response_ids[:-1] for n, _ in rows]) for _, rows in branches)
    assert in_branches > 40 and in_singles > 10
    saved = in_branches + in_singles
    one_level = ReplayOptions(trunks=False)  # nested trunks would take some of the singles' sharing
    assert replay_tokens(items, options=one_level) == replay_tokens(items, tree_tokens=0, options=one_level) - saved


def test_the_gpu_plan_gives_the_cpu_plans_distances_in_fewer_forwards(models, tiny_tokenizer):
    """The replay plans by its device's costs (`planning.plan_costs`): on CUDA, where a forward
    is launch-bound, the step's contexts go in as few forwards as memory allows. Both plans,
    run here on CPU, give the same q; the GPU's feeds the decoder fewer times."""
    from mrtpo.replay.planning import CPU_COSTS, GPU_COSTS, plan_costs

    assert plan_costs("cpu") == CPU_COSTS and plan_costs(torch.device("cuda", 0)) == GPU_COSTS
    items = begin_alike_items(tiny_tokenizer)
    model = models["llama"]
    calls = []
    hook = model.get_decoder().register_forward_pre_hook(lambda module, args: calls.append(1))
    try:
        runs = {}
        for name, costs in (("cpu", CPU_COSTS), ("gpu", GPU_COSTS)):
            calls.clear()
            runs[name] = (distances(model, items, batch_tokens=costs.batch_tokens,
                                    forward_tokens=costs.forward_tokens), len(calls))
        calls.clear()
        default = distances(model, items)  # on CPU: the CPU's costs
    finally:
        hook.remove()
    (cpu, cpu_calls), (gpu, gpu_calls) = runs["cpu"], runs["gpu"]
    assert (gpu - cpu).abs().max() <= TOL and cpu.max() > 0.1
    assert torch.equal(default, cpu) and len(calls) == cpu_calls
    assert gpu_calls < cpu_calls


def test_tree_attention_with_eager_attention(tiny_qwen2_dir, tiny_tokenizer):
    """eager attention adds the mask to the scores: the tree mask is handed over as 0 / -inf."""
    items = begin_alike_items(tiny_tokenizer)
    model = load_model(tiny_qwen2_dir)
    sdpa = distances(model, items)
    model.set_attn_implementation("eager")
    assert model.config._attn_implementation == "eager"
    assert (distances(model, items) - sdpa).abs().max() <= TOL


def test_tries_hold_each_sequence_once_per_beginning():
    from mrtpo.replay.planning import build_tries as _trees
    from mrtpo.replay.shared import tree_mask as _tree_mask

    seqs = [[5, 1, 2], [5, 1, 2, 4], [5, 1], [], [5, 1, 2], [8], [5, 1, 2, 4, 9]]  # fed tokens
    members = list(enumerate(seqs))
    (tree,) = _trees(members, 1024)
    fed = {tuple(s[:d + 1]) for s in seqs for d in range(len(s))}
    assert len(tree.tokens) == len(fed) == 6
    assert sorted(tree.members) == list(range(len(seqs)))
    ancestors = {}
    for m, path in zip(tree.members, tree.paths):
        assert [tree.tokens[i] for i in path] == seqs[m]
        assert [tree.depth[i] for i in path] == list(range(len(seqs[m])))
        assert path == sorted(path)  # preorder: each node after its parent
        for d, i in enumerate(path):
            ancestors.setdefault(i, set(path[:d + 1]))
    width = len(tree.tokens) + 3
    mask = _tree_mask(tree.depth, width)
    for i in range(width):
        for j in range(width):
            assert bool(mask[i, j]) == (j in ancestors[i] if i < len(tree.tokens) else i == j), (i, j)
    small = _trees(members, 4)
    assert all(len(t.tokens) <= 4 or len(t.members) == 1 for t in small) and len(small) > 1
    chains = _trees(members, 0)
    assert [len(t.members) for t in chains] == [1] * len(seqs)
    assert sum(len(t.tokens) for t in chains) == sum(map(len, seqs))
    # the cost rule: with attention as dear as a token pass, only a sequence that adds no node joins
    dear = _trees(members, 1024, keys_per_token=0)
    assert all(len(t.tokens) == max(len(seqs[m]) for m in t.members) for t in dear)
    assert len(dear) == len(seqs) - 2  # [5, 1, 2] twice, and [] with [5, 1]
    for trees in (small, chains, dear):  # every member's path spells its sequence, in whichever trie
        assert sorted(m for t in trees for m in t.members) == list(range(len(seqs)))
        for t in trees:
            for m, path in zip(t.members, t.paths):
                assert [t.tokens[i] for i in path] == seqs[m] and [t.depth[i] for i in path] == list(range(len(seqs[m])))


def test_which_models_take_a_tree_mask():
    from transformers import Qwen2Config

    from mrtpo.replay import takes_tree_mask

    def config(attn="sdpa", **kw):
        c = Qwen2Config(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=2, **kw)
        c._attn_implementation = attn
        return c

    assert takes_tree_mask(config()) and takes_tree_mask(config("eager"))
    assert not takes_tree_mask(config("flash_attention_2"))
    assert not takes_tree_mask(config(use_sliding_window=True, sliding_window=16, max_window_layers=0))


def test_contexts_with_no_common_prefix(models):
    """Contexts that differ from their first token: the group's prefix is empty, every row is
    fed from position 0 (no cache), tries included; the same q as the naive reference."""
    resp_a, resp_b = [7, 8, 9, 10, 11], [7, 8, 9, 12]
    items = [ReplayItem([[3, 4, 5, 6], [20, 5, 6], [21, 22, 4, 5, 6]], resp, ["r1", "r2"], ["x", "y"])
             for resp in (resp_a, resp_b, resp_a)]
    (group,) = replay_groups(items)
    assert group.prefix == []
    model = models["qwen2"]
    ref = naive_distances(model, items)
    for kw in ({}, {"tree_tokens": 0}):
        assert (distances(model, items, **kw).double() - ref).abs().max() <= TOL, kw
    assert ref.max() > 0.05
