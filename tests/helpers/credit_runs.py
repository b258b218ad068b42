"""The credit tests' shared pieces: one logged MRTPO step of a tiny model (the `run_dir`
fixture) and a reader of the HTML view's token spans."""
from __future__ import annotations

from html.parser import HTMLParser

import pytest


@pytest.fixture(scope="module")
def run_dir(tiny_qwen2_dir, tmp_path_factory):
    """One step of MRTPO training (2 prompts x 2 completions, 8 tokens) on the tiny model."""
    from mrtpo.harness import TrainConfig, train

    out = tmp_path_factory.mktemp("credit") / "run"
    train(TrainConfig(model=str(tiny_qwen2_dir), output_dir=str(out), task="harness-words", steps=1,
                      batch_prompts=2, num_generations=2, max_new_tokens=8, verify_workers=0, lr=5e-3,
                      lora_r=4, log_completions_every=1, save_every=0, mrtpo=True))
    return out


class PageReader(HTMLParser):
    """Collects, per completion section and reward row, the text of each token span in order."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.rows: dict[tuple[int, int], list[str]] = {}
        self.section = self.row = None
        self.in_tok = False
        self.tags: list[str] = []
        self.scripts: dict[str, str] = {}
        self._script = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.append(tag)
        if tag == "section" and a.get("class") == "completion":
            self.section = int(a["data-i"])
        elif tag == "tr" and "data-k" in a:
            self.row = int(a["data-k"])
            self.rows[(self.section, self.row)] = []
        elif tag == "span" and a.get("class") == "tok":
            self.in_tok = True
            assert int(a["data-t"]) == len(self.rows[(self.section, self.row)])
            self.rows[(self.section, self.row)].append("")
        elif tag == "script":
            self._script = a.get("id", "code")
            self.scripts[self._script] = ""

    def handle_endtag(self, tag):
        if tag == "span":
            self.in_tok = False
        elif tag == "script":
            self._script = None

    def handle_data(self, data):
        if self.in_tok:
            self.rows[(self.section, self.row)][-1] += data
        elif self._script is not None:
            self.scripts[self._script] += data
