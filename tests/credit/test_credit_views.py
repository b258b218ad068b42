"""The three views of credit records: terminal (rich), HTML page, PNG heatmap.

Records here are written by hand, with tokens chosen to break naive rendering (markup,
entities, a line break, an empty token, a closing script tag); the CLI tests render records
from a real run and a real replay.
"""
from __future__ import annotations

import json

import pytest
from rich.console import Console

from mrtpo.credit import html as credit_html
from mrtpo.credit.records import CreditError, CreditRecord
from mrtpo.credit.terminal import EVEN, SHADES, render, shade_style, token_line
from credit_runs import PageReader

TOKENS = ["<b>", " SELECT", " &amp;", "\n", "", '"x"', "</script>", "<|im_end|>"]


def _record(**kw) -> CreditRecord:
    t = len(TOKENS)
    q = [[0.0, 0.9, 0.1, 0.0, 0.0, 0.0, 0.0, 0.0],  # format: points at " SELECT"
         [0.0] * t,  # executes: empty block, nothing located
         [0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.3]]  # result: spread, heaviest at the end token
    w = []
    for row in q:
        m = sum(row) / t
        w.append([x / m for x in row] if m > 0 else [1.0] * t)
    base = dict(example_id="ex-1", tokens=TOKENS, response_ids=list(range(t)),
                reward_names=["format", "executes", "result"], scores=[1.0, 1.0, 0.0],
                credit=[0.5, 0.0, -0.7], blocks=["Answer in one <sql> block & nothing else.", "", "```sql\nSELECT 1\n```"],
                advantage=-0.2, offset=0.0, feedback=["", "", "rows differ"], distances=q, token_weights=w,
                token_advantages=[sum(w[k][i] * c for k, c in enumerate([0.5, 0.0, -0.7])) for i in range(t)],
                prompt="<|im_start|>user\nHow many books?<|im_end|>", step=3, group=0, sample=1)
    base.update(kw)
    return CreditRecord(**base)


def test_html_page_holds_every_token_once_per_reward_and_parses():
    recs = [_record(), _record(example_id="ex-2", credit=[0.0, 0.0, 0.0], sample=0)]
    page = credit_html.page(recs, title="credit <test>", task="text2sql", model="tiny", meta="run x")
    reader = PageReader()
    reader.feed(page)
    reader.close()
    for i, rec in enumerate(recs):
        for k in range(len(rec.reward_names)):
            assert reader.rows[(i, k)] == TOKENS  # every token, exactly, in order, once per reward
    assert len(reader.rows) == 6
    # the hover data is valid JSON holding q and the weights for every reward
    data = json.loads(reader.scripts["credit-data"])
    assert data[0]["tokens"] == TOKENS and data[0]["q"] == recs[0].distances
    assert data[0]["w"] == recs[0].token_weights and data[0]["names"] == recs[0].reward_names
    # self-contained: no external resources, and the token "</script>" did not end a script early
    for needle in ("http://", "https://", "src=", "<link", "@import"):
        assert needle not in page
    assert page.count("</script>") == 2
    # summary at the top, before the first completion; the paper's figure next to ours
    assert page.index('id="summary"') < page.index('class="completion"')
    assert "26-29%" in page and "not the paper" in page
    assert "rows differ" in page and "Answer in one &lt;sql&gt; block &amp; nothing else." in page
    assert "credit &lt;test&gt;" in page


def test_html_shades_tokens_by_weight_with_the_sign_of_credit():
    rec = _record()
    spans = credit_html.token_spans(rec, 0)  # format: credit +0.5, all weight on " SELECT"
    reader = PageReader()
    reader.feed(f'<section class="completion" data-i="0"><table><tr data-k="0"><td>{spans}</td></tr></table></section>')
    assert reader.rows[(0, 0)] == TOKENS
    assert 'data-t="1" style="background:rgba(49,163,84,0.850)"' in spans  # heaviest: full green
    assert 'data-t="0" class' not in spans and '<span class="tok" data-t="0">' in spans  # weight 0: unshaded
    assert "rgba(222,45,38," in credit_html.token_spans(rec, 2)  # negative credit: red
    # nothing located (empty block): every token the same light tint, the colour of no credit
    assert credit_html.token_spans(rec, 1).count('style="background:rgba(49,130,189,0.170)"') == len(TOKENS)


def test_terminal_view_one_line_per_reward_with_score_credit_block():
    rec = _record()
    console = Console(record=True, width=200, force_terminal=True, color_system="truecolor")
    render(console, [rec], task="text2sql", model="tiny", heading="run x")
    out = console.export_text()
    lines = out.splitlines()
    for name, score, credit in (("format", "1.000", "+0.500"), ("executes", "1.000", "+0.000"),
                                ("result", "0.000", "-0.700")):
        line = next(ln for ln in lines if ln.startswith(name + " "))
        assert score in line and credit in line
        assert "\u21b5" in line and "<|im_end|>" in line  # the tokens, line break made visible
    assert "Answer in one <sql> block" in out and "(empty)" in out
    assert "' SELECT' 7.2" in out  # heaviest tokens spelled out for terminals without colour
    assert "all rewards" in out and "26-29%" in out and "not the paper's" in out
    # format's credit is positive: its heaviest token gets the strongest green, a weight-0 token none
    styles = {str(span.style) for span in token_line(rec, 0).spans}
    assert shade_style(1.0, 1) in styles and SHADES[1][4] in shade_style(1.0, 1)
    assert shade_style(0.0, 1) == "" and SHADES[-1][4] in shade_style(1.0, -1)
    assert {str(span.style) for span in token_line(rec, 1).spans} == {shade_style(EVEN, 0)}  # even spread


def test_terminal_view_without_mrtpo_shows_plain_tokens():
    rec = _record(distances=None, token_weights=None)
    console = Console(record=True, width=200)
    render(console, [rec], note="this run had MRTPO off")
    out = console.export_text()
    assert "MRTPO off" in out and "format" in out
    assert token_line(rec, 0).spans == []


def test_png_heatmap_of_one_completion(tmp_path):
    pytest.importorskip("matplotlib")
    from PIL import Image

    from mrtpo.credit.png import heatmap

    short = heatmap(_record(), tmp_path / "short.png")
    assert short.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    long_rec = _record(tokens=TOKENS * 12, response_ids=list(range(96)),
                       distances=[row * 12 for row in _record().distances],
                       token_weights=[row * 12 for row in _record().token_weights])
    tall = heatmap(long_rec, tmp_path / "sub" / "long.png", per_panel=32)  # 3 panels stacked
    with Image.open(short) as a, Image.open(tall) as b:
        assert b.size[1] > 1.5 * a.size[1]  # three panels of rows, not one
    with pytest.raises(CreditError, match="MRTPO off"):
        heatmap(_record(token_weights=None), tmp_path / "none.png")


# A stand-in for the browser: just enough DOM for the page's hover script (event delegation,
# closest(), dataset, classList, querySelectorAll), so the script runs as written.
FAKE_DOM = r"""
const data = process.argv[2], code = process.argv[3];
function el(cls, ds, parent) {
  return {cls: cls, dataset: ds, parent: parent, classes: new Set(), style: {}, hidden: true, innerHTML: '',
          offsetWidth: 10, offsetHeight: 10,
          classList: {toggle(c, on) { on ? this.o.classes.add(c) : this.o.classes.delete(c); }},
          closest(sel) { let e = this; const want = sel.replace('section.', '').replace('.', '');
                         while (e) { if (e.cls === want) return e; e = e.parent; } return null; },
          querySelectorAll(sel) { const t = sel.match(/data-t="(\d+)"/)[1];
                                  return toks.filter(x => x.parent === this && x.dataset.t === t); }};
}
const sec = el('completion', {i: '0'}, null);
const toks = [0, 1, 2].map(t => el('tok', {t: String(t)}, sec)).concat([el('tok', {t: '1'}, sec)]);
toks.forEach(t => { t.classList.o = t; });
const tip = el('tip', {}, null);
const handlers = {};
global.innerWidth = 1000; global.innerHeight = 800;
global.document = {
  getElementById: id => id === 'credit-data' ? {textContent: data} : tip,
  addEventListener: (type, fn) => { handlers[type] = fn; },
};
eval(code);
handlers.mouseover({target: toks[1]});
const shown = tip.innerHTML, lit = toks.filter(t => t.classes.has('hl')).length;
handlers.mousemove({clientX: 5, clientY: 5});
handlers.mouseout({target: toks[1]});
console.log(JSON.stringify({html: shown, lit: lit, hidden: tip.hidden, left: tip.style.left,
                            after: toks.filter(t => t.classes.has('hl')).length}));
"""


def test_hover_script_shows_q_and_weight_for_every_reward(tmp_path):
    import re
    import shutil
    import subprocess

    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed: the page's script is checked with it")
    rec = _record(tokens=["a", "<b>", "c"], response_ids=[0, 1, 2],
                  distances=[[0.1, 0.5, 0.0], [0.0, 0.0, 0.0], [0.2, 0.25, 0.3]],
                  token_weights=[[0.5, 2.5, 0.0], [1.0, 1.0, 1.0], [0.8, 1.0, 1.2]],
                  token_advantages=[0.1, -0.3, 0.2])
    page = credit_html.page([rec])
    data = re.search(r'<script type="application/json" id="credit-data">(.*?)</script>', page, re.S).group(1)
    code = re.findall(r"<script>(.*?)</script>", page, re.S)[-1]
    (tmp_path / "dom.js").write_text(FAKE_DOM)
    run = subprocess.run([node, str(tmp_path / "dom.js"), data, code], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    tip = out["html"]
    assert "token 2 of 3" in tip and "&lt;b&gt;" in tip  # the token, escaped
    for name, q, w in (("format", "0.5000", "2.5000"), ("executes", "0.0000", "1.0000"),
                       ("result", "0.2500", "1.0000")):
        assert f"<td>{name}</td><td>{q}</td><td>{w}</td>" in tip
    assert "token advantage: -0.3000" in tip
    assert out["lit"] == 2 and out["after"] == 0  # the token outlined in every row, then cleared
    assert out["hidden"] is True and out["left"] == "19px"


def test_tokens_are_shown_on_one_line_without_control_characters():
    from mrtpo.credit.terminal import shown

    assert shown("a\nb\tc") == "a\u21b5b\u2192c"
    assert shown("\x1b[31m") == "\\x1b[31m"  # a sampled escape byte must not recolour the terminal
    assert shown("") == "\u00b7" and shown(" é中") == " é中" and shown("\u200b") == "\\u200b"
