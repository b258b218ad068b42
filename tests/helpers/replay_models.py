"""The replay tests' shared pieces: a tiny model with sharpened weights, one torch thread,
and hand-written responses that begin alike, as a sampled group does."""
from __future__ import annotations

import pytest
import torch

from mrtpo.contexts import ReplayItem, build_item
from mrtpo.tasks.base import Example
from replay_task import EX, SQLishTask

TOL = 1e-5


def load_model(path):
    """A saved tiny model, loaded as a user's would be; random weights made larger so the
    contexts change the next-token distributions visibly (q of 0.1-0.5, not 0.003)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 2:
                p.copy_(torch.randn(p.shape, generator=g) * 0.15)
            elif name.endswith("bias"):
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)
    return model


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Tiny models: one thread is faster than two, and steady on a shared machine."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


EX2 = Example(id="ex2", prompt=("List the names of singers ordered by age.\n\n"
                               "CREATE TABLE singer (singer_id INTEGER, name TEXT, age INTEGER)"),
              data={"gold": "SELECT name FROM singer ORDER BY age"})

BEGIN_ALIKE = ["```sql\nSELECT name FROM singer\n```", "```sql\nSELECT name FROM singer ORDER BY age\n```",
               "```sql\nSELECT name FROM singer\n```", "```sql\nSELECT nme FROM singer\n```",
               "```sql\nSELECT age FROM singer WHERE age > 30\n```", "SELECT 1", "x"]


def begin_alike_items(tokenizer) -> list[ReplayItem]:
    """Hand-written responses that begin alike (one repeated, one that errors, one token long),
    as a sampled group does: the same code fence, the same first words."""
    task = SQLishTask()
    return [build_item(task, tokenizer, ex, tokenizer(t, add_special_tokens=False)["input_ids"], task.score(ex, t))
            for ex in (EX, EX2) for t in BEGIN_ALIKE]
