"""The browser view: one self-contained HTML page (inline CSS and JS, nothing fetched).

At the top, the summary table (per reward and for the task: mean score and credit, top-80
token share, the paper's figure where it reports one). Then, per completion, one row per
reward: score, credit, top-80 share, the response's tokens shaded by that reward's weight
(green for positive credit, red for negative, blue for none; full colour = the reward's
heaviest token), and the block beside it with the verifier's feedback. Hovering a token
shows its q (JS distance) and weight for every reward and the advantage the token got, and
outlines the same token in the other rows. Each token is its own element holding the token
text exactly, so the page holds every token of the response once per reward.
"""
from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Sequence

from mrtpo.credit.records import CreditRecord
from mrtpo.statistics import (ALL, PAPER_NOTE, SHARE, paper_figure, percent, response_top_share,
                                     summarize)
from mrtpo.credit.terminal import levels, sign

RGB = {1: (49, 163, 84), -1: (222, 45, 38), 0: (49, 130, 189)}

CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:1.5em 2em;color:#222;background:#fff}
h1{font-size:1.35em;margin:0 0 .2em} h2{font-size:1.05em;margin:1.6em 0 .4em;font-weight:600}
.meta,.note{color:#555;max-width:70em} .note{font-size:.9em}
table{border-collapse:collapse} th,td{padding:.25em .6em;vertical-align:top;text-align:left}
table.summary td.num,table.rewards td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
table.summary tr:nth-child(even){background:#f6f6f6} table.summary tr.all{font-weight:600;border-top:1px solid #bbb}
table.rewards{width:100%;border-top:1px solid #ddd} table.rewards tr{border-bottom:1px solid #eee}
table.rewards th.name{white-space:nowrap}
td.resp{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;white-space:pre-wrap;word-break:break-word;width:60%}
td.block{width:25%;font-size:.88em} td.block pre{white-space:pre-wrap;margin:0;font-family:inherit}
td.block .fb{color:#666;margin-top:.3em} td.block .empty{color:#999}
.tok{border-radius:2px;cursor:default} .tok:empty{display:inline-block;min-width:.4em}
.tok.hl{outline:2px solid #222;outline-offset:-1px}
details{margin:.2em 0 .5em} details pre{white-space:pre-wrap;background:#f6f6f6;padding:.6em;margin:.3em 0;font-size:.88em}
#tip{position:fixed;z-index:10;background:#fff;border:1px solid #888;box-shadow:0 2px 8px rgba(0,0,0,.2);
 padding:.4em .6em;font-size:12px;pointer-events:none;max-width:32em}
#tip table td{padding:.05em .5em} #tip .t{font-family:ui-monospace,monospace;background:#eee;white-space:pre}
.legend span{padding:0 .4em;margin-right:.4em;border-radius:2px}
"""

# hover: the token's q and weight for every reward of its completion (data below, as JSON)
JS = """
(function(){
 var data=JSON.parse(document.getElementById('credit-data').textContent);
 var tip=document.getElementById('tip');
 function f(x){return (x===null||x===undefined)?'-':Number(x).toFixed(4);}
 function esc(s){return s.replace(/[&<>"]/g,function(c){return {'&':'&amp;','<':'&lt;','>':'&gt;','"':'&quot;'}[c];});}
 function mark(sec,t,on){sec.querySelectorAll('.tok[data-t="'+t+'"]').forEach(function(e){e.classList.toggle('hl',on);});}
 document.addEventListener('mouseover',function(ev){
  var el=ev.target.closest&&ev.target.closest('.tok'); if(!el){return;}
  var sec=el.closest('section.completion'); var d=data[+sec.dataset.i]; var t=+el.dataset.t;
  var rows='<tr><th>reward</th><th>q</th><th>weight</th></tr>';
  d.names.forEach(function(n,k){rows+='<tr><td>'+esc(n)+'</td><td>'+f(d.q?d.q[k][t]:null)+'</td><td>'+f(d.w?d.w[k][t]:null)+'</td></tr>';});
  tip.innerHTML='<div>token '+(t+1)+' of '+d.tokens.length+': <span class="t">'+esc(JSON.stringify(d.tokens[t]))+'</span></div>'+
   '<table>'+rows+'</table><div>token advantage: '+f(d.adv?d.adv[t]:null)+'</div>';
  tip.hidden=false; mark(sec,t,true);
 });
 document.addEventListener('mouseout',function(ev){
  var el=ev.target.closest&&ev.target.closest('.tok'); if(!el){return;}
  tip.hidden=true; mark(el.closest('section.completion'),el.dataset.t,false);
 });
 document.addEventListener('mousemove',function(ev){
  if(tip.hidden){return;} var x=ev.clientX+14,y=ev.clientY+14;
  if(x+tip.offsetWidth>innerWidth){x=ev.clientX-tip.offsetWidth-14;}
  if(y+tip.offsetHeight>innerHeight){y=ev.clientY-tip.offsetHeight-14;}
  tip.style.left=x+'px'; tip.style.top=y+'px';
 });
})();
"""


def _e(text: str) -> str:
    return html.escape(text, quote=True)


def _num(x: float | None, signed: bool = False) -> str:
    if x is None or x != x:
        return "-"
    return f"{x:+.3f}" if signed else f"{x:.3f}"


def token_spans(rec: CreditRecord, k: int) -> str:
    """The response's tokens as spans, each shaded by its weight for reward k."""
    r, g, b = RGB[sign(rec.credit[k])]
    out = []
    for t, (tok, level) in enumerate(zip(rec.tokens, levels(rec, k))):
        style = f' style="background:rgba({r},{g},{b},{0.85 * level:.3f})"' if level >= 0.02 else ""
        out.append(f'<span class="tok" data-t="{t}"{style}>{html.escape(tok, quote=False)}</span>')
    return "".join(out)


def summary_html(records: Sequence[CreditRecord], task: str | None) -> str:
    rows = []
    for s in summarize(records, SHARE):
        rng = "-" if s.share_min is None else f"{percent(s.share_min)}-{percent(s.share_max)}"
        cls = ' class="all"' if s.name == ALL else ""
        rows.append(f"<tr{cls}><td>{_e(s.name)}</td><td class=num>{s.responses}</td><td class=num>{s.located}</td>"
                    f"<td class=num>{_num(s.mean_score)}</td><td class=num>{_num(s.mean_credit, True)}</td>"
                    f"<td class=num>{percent(s.share_mean)}</td><td class=num>{rng}</td>"
                    f"<td class=num>{_e(paper_figure(task, s.name) or '')}</td></tr>")
    head = ("<tr><th>reward</th><th>responses</th><th>located</th><th>mean score</th><th>mean credit</th>"
            f"<th>top{round(100 * SHARE)} share</th><th>range</th><th>paper</th></tr>")
    return f'<table class="summary">{head}{"".join(rows)}</table>'


def completion_html(i: int, rec: CreditRecord) -> str:
    rows = []
    for k, name in enumerate(rec.reward_names):
        share = None if rec.distances is None else response_top_share(rec.distances[k])
        block = (f"<pre>{_e(rec.blocks[k])}</pre>" if rec.blocks[k].strip()
                 else '<span class="empty">(empty block: nothing to locate)</span>')
        fb = rec.feedback[k] if k < len(rec.feedback) else ""
        if fb:
            block += f'<div class="fb">feedback: {_e(fb)}</div>'
        rows.append(f'<tr data-k="{k}"><th class="name">{_e(name)}</th><td class=num>{_num(rec.scores[k])}</td>'
                    f"<td class=num>{_num(rec.credit[k], True)}</td><td class=num>{percent(share)}</td>"
                    f'<td class="resp">{token_spans(rec, k)}</td><td class="block">{block}</td></tr>')
    prompt = (f"<details><summary>prompt</summary><pre>{_e(rec.prompt)}</pre></details>" if rec.prompt else "")
    head = ("<tr><th>reward</th><th>score</th><th>credit</th><th>top80</th>"
            "<th>response, shaded by weight</th><th>block</th></tr>")
    return (f'<section class="completion" data-i="{i}" id="c{i}"><h2>{_e(rec.label())}</h2>{prompt}'
            f'<table class="rewards">{head}{"".join(rows)}</table></section>')


def page(records: Sequence[CreditRecord], *, title: str = "mrtpo credit", task: str | None = None,
         model: str | None = None, meta: str = "", note: str = "") -> str:
    """The whole page as a string."""
    data = [{"tokens": r.tokens, "names": r.reward_names, "q": r.distances, "w": r.token_weights,
             "adv": r.token_advantages} for r in records]
    payload = json.dumps(data, ensure_ascii=True).replace("<", "\\u003c").replace(">", "\\u003e")
    legend = "".join(f'<span style="background:rgba({r},{g},{b},.6)">{word}</span>' for word, (r, g, b) in
                     (("positive credit", RGB[1]), ("negative credit", RGB[-1]), ("no credit", RGB[0])))
    ours = (f"Figures measured with {_e(model) if model else 'our model'} on these completions, "
            f"not the paper's. {_e(PAPER_NOTE)}")
    body = [
        f"<h1>{_e(title)}</h1>",
        f'<p class="meta">{_e(meta)}</p>' if meta else "",
        f'<p class="note">{_e(note)}</p>' if note else "",
        '<section id="summary"><h2>Summary</h2>', summary_html(records, task),
        f'<p class="note">top{round(100 * SHARE)} share: the smallest share of a response\'s tokens that '
        f"carries {round(100 * SHARE)}% of the reward's JS distance (and so of its credit), averaged over "
        f"the responses where the distance is not all zero (located). {ours}</p>",
        f'<p class="note legend">Token shading: {legend} strength = the token\'s weight relative to the '
        "reward's heaviest token. Hover a token for its q and weight under every reward.</p></section>",
        *(completion_html(i, r) for i, r in enumerate(records)),
        '<div id="tip" hidden></div>',
        f'<script type="application/json" id="credit-data">{payload}</script>',
        f"<script>{JS}</script>",
    ]
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{_e(title)}</title><style>{CSS}</style></head><body>\n"
            + "\n".join(b for b in body if b) + "\n</body></html>\n")


def write(path: str | Path, records: Sequence[CreditRecord], **kw) -> Path:
    """Write the page to `path` whole or not at all; `OutputPathError` names a path that cannot
    be written. Lone surrogates in the text become U+FFFD (the page is UTF-8)."""
    from mrtpo.textio import scrub, write_text_atomic

    return write_text_atomic(path, scrub(page(records, **kw)), "HTML page")
