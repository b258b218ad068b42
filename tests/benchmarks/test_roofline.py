"""benchmarks/speed/roofline.py on a tiny model: every phase of a step is timed and counted, and
the machine's peaks are measured in the same run (the figures themselves are not asserted)."""
from __future__ import annotations

import json

from benchmarks.speed import roofline


def test_every_phase_gets_its_counts_and_bound(tiny_qwen2_dir, tmp_path):
    doc = roofline.main(["--model", str(tiny_qwen2_dir), "--task", "toolcall", "--max-new-tokens", "8", "--quick",
                         "--lora-dropout", "0.05", "--json", str(tmp_path / "r.json")])
    assert [r["phase"] for r in doc["rows"]] == ["prefill", "decode", "score", "replay", "forward",
                                                 "backward", "optimizer"]
    assert doc["machine"]["fp32_flops"] > 0 and doc["machine"]["bandwidth"] > 0
    assert doc["machine"]["cpu"] and doc["machine"]["cpu"] != "unknown"  # tables name their CPU
    for r in doc["rows"]:
        assert r["seconds"] > 0 and r["bound"] in ("compute", "memory")
    rows = {r["phase"]: r for r in doc["rows"]}
    assert rows["forward"]["flops"] < rows["backward"]["flops"] < 2 * rows["forward"]["flops"]  # LoRA
    assert rows["decode"]["tokens"] == doc["sizes"]["completion_tokens"] > 0
    nd = doc["sizes"]["without_lora_dropout"]  # the train settings' dropout, then the update without it
    assert nd["lora_dropout"] > 0 and nd["forward"] > 0 and nd["backward"] > 0
    assert json.loads((tmp_path / "r.json").read_text())["schema"] == "mrtpo.roofline/1"


def test_fed_tokens_counts_what_goes_through_the_first_layer(tiny_qwen2_dir):
    """The replay's token count: every position a forward feeds the first decoder layer, a
    cached beginning not at all."""
    import torch
    from transformers import AutoModelForCausalLM, DynamicCache

    model = AutoModelForCausalLM.from_pretrained(tiny_qwen2_dir)
    ids = torch.arange(1, 13).view(2, 6)  # [2, 6]
    with torch.no_grad(), roofline.fed_tokens(model) as fed:
        cache = DynamicCache()
        model(input_ids=ids[:, :4], past_key_values=cache, use_cache=True)  # 8 positions
        model(input_ids=ids[:, 4:], past_key_values=cache, use_cache=True)  # 4 more on the cache
    assert fed == [12]
    with torch.no_grad():
        model(input_ids=ids)
    assert fed == [12]  # the hook is gone after the block
