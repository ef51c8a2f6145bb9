"""report.html: one self-contained page per benchmark run (its one script inline, nothing fetched) that
a person can open, send or archive: what ran and what it cost, the metrics with one bootstrap interval
each (results.json's, its resampling unit named), the PR and ROC curves drawn as steps with the same
intervals in the legend, and every scored unit in a table coloured by risk, sortable and filterable by
score and label, with a threshold control that shows precision, recall and the confusion counts."""

from __future__ import annotations

import datetime as dt
import html
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from halluscope.bench.report import CURVES, metric_label, write_text
from halluscope.bench.runner import BenchResult
from halluscope.metrics import BOOTSTRAP_RESAMPLES, auc_pr, auc_roc, flat_metrics
from halluscope.results import span_note
from halluscope.version import __version__

REPORT = "report.html"
_COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf")
_STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:2em auto;max-width:1100px;color:#222;padding:0 1em}
h1{font-size:1.6em;margin-bottom:.2em}h2{margin-top:1.6em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:.6em 0}td,th{border:1px solid #ccc;padding:3px 8px;text-align:left}
th{background:#f3f3f3}td.num{text-align:right;font-variant-numeric:tabular-nums}.ci{color:#666;font-size:90%}
.muted{color:#666}.curves{display:flex;flex-wrap:wrap;gap:1.5em}figure{margin:0}
details{margin:.3em 0}summary{cursor:pointer}pre{background:#f7f7f7;padding:.8em;overflow-x:auto}
.bad{color:#b00020;font-weight:600}
.controls{display:flex;flex-wrap:wrap;gap:1em;align-items:center;margin:.5em 0;padding:.5em;background:#f7f7f7}
.controls input[type=number]{width:6em}.controls input[type=range]{width:16em}
.units th[data-key]{cursor:pointer;user-select:none}.units th[data-key]:after{content:" \\2195";color:#999}
.units tr.flagged td:first-child:before{content:"! ";color:#b00020;font-weight:700}
.confusion{font-variant-numeric:tabular-nums}.units td:nth-child(-n+3){white-space:nowrap}
"""
# Sorting, filtering and the threshold control of every units table: plain DOM code, inline, nothing fetched
_SCRIPT = """
for (const section of document.querySelectorAll('section.items')) {
  const body = section.querySelector('table.units tbody');
  const rows = Array.from(body.rows);
  const positive = new Set(JSON.parse(section.dataset.positive));
  const label = section.querySelector('.label-filter'), least = section.querySelector('.min-score');
  const slider = section.querySelector('.threshold'), shown = section.querySelector('.threshold-value');
  const counts = section.querySelector('.confusion');
  const score = r => r.dataset.score === '' ? NaN : Number(r.dataset.score);
  function filter() {
    const want = label.value, floor = least.value === '' ? -Infinity : Number(least.value);
    for (const r of rows) r.hidden = (want !== '' && r.dataset.label !== want) || !(score(r) >= floor);
    section.querySelector('.shown').textContent = rows.filter(r => !r.hidden).length;
  }
  function judge() {
    const t = Number(slider.value);
    let tp = 0, fp = 0, fn = 0, tn = 0, flagged = 0;
    for (const r of rows) {
      const hit = score(r) >= t;
      r.classList.toggle('flagged', hit);
      flagged += hit;
      if (r.dataset.label === '' || positive.size === 0) continue;
      const bad = positive.has(r.dataset.label);
      if (hit && bad) tp++; else if (hit) fp++; else if (bad) fn++; else tn++;
    }
    shown.textContent = t.toPrecision(4);
    const ratio = (a, b) => b ? (a / b).toFixed(3) : 'n/a';
    counts.textContent = `${flagged} of ${rows.length} units flagged` + (positive.size ?
      `; TP ${tp}, FP ${fp}, FN ${fn}, TN ${tn}; precision ${ratio(tp, tp + fp)}, recall ${ratio(tp, tp + fn)}` : '');
  }
  for (const th of section.querySelectorAll('th[data-key]')) {
    th.addEventListener('click', () => {
      const key = th.dataset.key, down = th.dataset.order !== 'desc';
      for (const other of section.querySelectorAll('th[data-key]')) delete other.dataset.order;
      th.dataset.order = down ? 'desc' : 'asc';
      const value = r => key === 'score' ? (isNaN(score(r)) ? -Infinity : score(r)) :
        key === 'order' ? Number(r.dataset.order) : r.dataset[key];
      rows.sort((a, b) => { const x = value(a), y = value(b); return (x < y ? -1 : x > y ? 1 : 0) * (down ? -1 : 1); });
      for (const r of rows) body.appendChild(r);
    });
  }
  label.addEventListener('change', filter);
  least.addEventListener('input', filter);
  slider.addEventListener('input', judge);
  filter();
  judge();
}
"""


def write_html_report(results: Sequence[BenchResult], out: Path) -> Path:
    """OUT/report.html from the run's results, the curves its report drew (OUT/curves.json) and its
    report.md."""
    out.mkdir(parents=True, exist_ok=True)
    curves = json.loads((out / CURVES).read_text(encoding="utf-8")) if (out / CURVES).is_file() else {}
    markdown = (out / "report.md").read_text(encoding="utf-8") if (out / "report.md").is_file() else ""
    bench = results[0].bench if results else "?"
    parts = [
        f"<h1>halluscope bench {_e(bench)}</h1>",
        f"<p class='muted'>written {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC by halluscope {__version__}</p>",
        "<h2>What ran, and what it cost</h2>",
        _cost_table(results),
        "<h2>Metrics</h2>",
        _metrics_table(results),
    ]
    if curves:
        parts += ["<h2>Curves</h2>", _curves_section(curves, results)]
    parts += ["<h2>Items</h2>", *(_items(result) for result in results)]
    if markdown:
        parts += ["<h2>The protocol's report (report.md)</h2>", f"<pre>{_e(markdown)}</pre>"]
    page = (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        f"<title>halluscope bench {_e(bench)}</title><style>{_STYLE}</style></head><body>"
        + "\n".join(parts)
        + f"<script>{_SCRIPT}</script></body></html>\n"
    )
    path = out / REPORT
    write_text(path, page)
    return path


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _number(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return _e(value)
    return f"{value:,}" if isinstance(value, int) else f"{value:.4g}"


def _cost_table(results: Sequence[BenchResult]) -> str:
    rows = []
    for r in results:
        m = r.meta
        failed = f"<span class='bad'>{len(r.failures)}</span>" if r.failures else "0"
        rows.append(
            "<tr>"
            f"<td>{_e(r.params.get('method', r.bench))}</td><td>{_e(', '.join(m.models) or '-')}</td>"
            f"<td>{_e(', '.join(m.prompts) or '-')}</td><td class='num'>{len(r.items)}</td>"
            f"<td class='num'>{failed}</td>"
            f"<td class='num'>{m.calls:,}</td><td class='num'>{m.cache_hits:,}</td>"
            f"<td class='num'>{m.tokens.prompt:,} / {m.tokens.completion:,}</td>"
            f"<td class='num'>{m.seconds / 60:.1f}</td></tr>"
        )
    head = (
        "<tr><th>method</th><th>models</th><th>prompt versions</th><th>items</th><th>failed</th>"
        "<th>model calls</th><th>cache hits</th><th>tokens in / out</th><th>minutes</th></tr>"
    )
    return f"<table>{head}{''.join(rows)}</table>"


def _metrics_table(results: Sequence[BenchResult]) -> str:
    flat = [flat_metrics(r.metrics) for r in results]
    names = list(dict.fromkeys(k for f in flat for k in f))
    if not names:
        return "<p class='muted'>no metrics</p>"
    head = "<tr><th>metric</th>" + "".join(f"<th>{_e(r.params.get('method', r.bench))}</th>" for r in results)

    def cell(result: BenchResult, values: dict[str, Any], name: str) -> str:
        interval = result.intervals.get(name)
        shown = f" <span class='ci'>[{_number(interval[0])}, {_number(interval[1])}]</span>" if interval else ""
        return f"<td class='num'>{_number(values.get(name, '-'))}{shown}</td>"

    rows = [
        f"<tr><td title='{_e(name)}'>{_e(metric_label(name))}</td>"
        + "".join(cell(r, f, name) for r, f in zip(results, flat, strict=True))
        + "</tr>"
        for name in names
    ]
    note = (
        f"<p class='muted'>[95% interval]: {_resampling(results)}; a metric undefined in most resamples has none.</p>"
    )
    return f"<table>{head}</tr>{''.join(rows)}</table>{note}"


def _resampling(results: Sequence[BenchResult]) -> str:
    """How every interval of the page was made, its resampling unit named."""
    what = results[0].item if results else "item"
    counts = ", ".join(f"{len(r.items)}" for r in results)
    return (
        f"a percentile bootstrap resampling whole {what}s ({counts} {what}s; each {what}'s units move together), "
        f"{BOOTSTRAP_RESAMPLES:,} resamples, seed 0"
    )


def _curves_section(curves: dict[str, Any], results: Sequence[BenchResult]) -> str:
    figures = [_svg(name, entry) for name, entry in curves.items()]
    note = (
        "<p class='muted'>AUC as the report computes it (x100; PR by SelfCheckGPT's trapezoid over the "
        f"curve's points); [95% interval]: the metrics table's own, {_resampling(results)}.</p>"
    )
    return f"<div class='curves'>{''.join(figures)}</div>{note}"


def _step_points(kind: str, y: np.ndarray, scores: np.ndarray) -> list[tuple[float, float]]:
    """The curve's corners, joined by horizontal then vertical steps: (recall, precision) or (FPR, TPR)."""
    from sklearn.metrics import precision_recall_curve, roc_curve

    if kind == "pr":
        precision, recall, _ = precision_recall_curve(y, scores)
        points = sorted(zip(recall.tolist(), precision.tolist(), strict=True))
    else:
        fpr, tpr, _ = roc_curve(y, scores)
        points = list(zip(fpr.tolist(), tpr.tolist(), strict=True))
    stepped = [points[0]]
    for x, v in points[1:]:
        stepped += [(x, stepped[-1][1]), (x, v)]
    return stepped


def _svg(name: str, entry: dict[str, Any]) -> str:
    kind, width, height, pad = entry["kind"], 440, 360, 44
    plot_w, plot_h = width - pad - 12, height - pad - 28

    def at(x: float, v: float) -> str:
        return f"{pad + x * plot_w:.1f},{12 + (1 - v) * plot_h:.1f}"

    shapes = [f"<rect x='{pad}' y='12' width='{plot_w}' height='{plot_h}' fill='none' stroke='#888'/>"]
    for tick in (0.0, 0.25, 0.5, 0.75, 1.0):
        shapes.append(
            f"<text x='{pad - 6}' y='{16 + (1 - tick) * plot_h:.0f}' font-size='10' text-anchor='end'>{tick:g}</text>"
        )
        shapes.append(
            f"<text x='{pad + tick * plot_w:.0f}' y='{24 + plot_h}' font-size='10' text-anchor='middle'>{tick:g}</text>"
        )
    x_label, y_label = ("recall", "precision") if kind == "pr" else ("false positive rate", "true positive rate")
    shapes.append(f"<text x='{pad + plot_w / 2}' y='{height - 4}' font-size='11' text-anchor='middle'>{x_label}</text>")
    shapes.append(
        f"<text x='12' y='{12 + plot_h / 2}' font-size='11' text-anchor='middle' "
        f"transform='rotate(-90 12 {12 + plot_h / 2})'>{y_label}</text>"
    )
    legend = []
    for i, curve in enumerate(entry["curves"]):
        y, scores = np.asarray(curve["y"], dtype=int), np.asarray(curve["scores"], dtype=np.float64)
        colour = _COLOURS[i % len(_COLOURS)]
        metric = auc_pr if kind == "pr" else auc_roc
        value = metric(y, scores) if y.size else None
        if value is None:
            legend.append(f"<li style='color:{colour}'>{_e(curve['name'])}: undefined (one class only)</li>")
            continue
        ci = curve.get("interval")  # the run's own (results.json): the same interval as the metrics table
        interval = f" [{ci[0]:.1f}, {ci[1]:.1f}]" if ci else ""
        path = " ".join(at(x, v) for x, v in _step_points(kind, y, scores))
        shapes.append(f"<polyline points='{path}' fill='none' stroke='{colour}' stroke-width='1.8'/>")
        legend.append(f"<li style='color:{colour}'>{_e(curve['name'])}: AUC {value:.1f}{interval}</li>")
        if kind == "pr" and i == 0:  # a random ranker's precision is the positive rate
            rate = float(y.mean())
            shapes.append(
                f"<line x1='{pad}' x2='{pad + plot_w}' y1='{12 + (1 - rate) * plot_h:.1f}' "
                f"y2='{12 + (1 - rate) * plot_h:.1f}' stroke='#999' stroke-dasharray='4 3'/>"
            )
    if kind == "roc":
        shapes.append(
            f"<line x1='{pad}' y1='{12 + plot_h}' x2='{pad + plot_w}' y2='12' stroke='#999' stroke-dasharray='4 3'/>"
        )
    svg = f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}'>{''.join(shapes)}</svg>"
    return (
        f"<figure id='{_e(name)}'><figcaption><b>{_e(entry['title'])}</b> ({kind.upper()}; dashed: random)"
        f"</figcaption>{svg}<ul>{''.join(legend)}</ul></figure>"
    )


def _items(result: BenchResult) -> str:
    """Every scored unit of the run in one table (item, unit, score, label, text), coloured by its risk
    among the run's scores, with the controls ``_SCRIPT`` drives; the failed items listed below it."""
    method = result.params.get("method", result.bench)
    rows = [row for row in result.rows() if row.get("error") is None]
    texts = [column for column in result.per_score.values() if column not in ("label", "spans")]
    scores = np.array([row["score"] for row in rows if row["score"] is not None], dtype=np.float64)
    ranked = np.sort(scores)
    labels = sorted({str(row["label"]) for row in rows if row.get("label") is not None})
    lines = []
    for order, row in enumerate(rows):
        score, label = row["score"], row.get("label")
        text = " ".join(str(row[c]) for c in texts if row.get(c) is not None)
        where = span_note(text, row.get("spans") or [])  # a claim's words in the answer; a sentence's is itself
        if score is None:
            colour = "#eee"
        else:  # its rank among the run's scores: green (least risky) to red (most)
            rank = float(np.searchsorted(ranked, score, side="right")) / len(ranked)
            colour = f"hsl({120 * (1 - rank):.0f},70%,88%)"
        lines.append(
            f"<tr data-order='{order}' data-item='{_e(row['item'])}' data-score='{'' if score is None else score!r}' "
            f"data-label='{_e('' if label is None else label)}' style='background:{colour}'>"
            f"<td>{_e(row['item'])}</td><td>{_e(row['unit'])}</td>"
            f"<td class='num'>{'n/a' if score is None else _number(score)}</td>"
            f"<td>{_e('' if label is None else label)}</td><td>{_e(text)}"
            f"{f' <small>{_e(where)}</small>' if where else ''}</td></tr>"
        )
    low, high = (float(scores.min()), float(scores.max())) if scores.size else (0.0, 1.0)
    step = (high - low) / 200 or 1.0
    start = float(np.median(scores)) if scores.size else low
    options = "".join(f"<option value='{_e(label)}'>{_e(label)}</option>" for label in labels)
    positive = f" ({', '.join(result.positive)} count as hallucinated)" if result.positive else ""
    controls = (
        "<div class='controls'>"
        f"<label>label <select class='label-filter'><option value=''>all</option>{options}</select></label>"
        "<label>score at least <input type='number' class='min-score' step='any'></label>"
        f"<label>threshold <input type='range' class='threshold' min='{low!r}' max='{high!r}' step='{step!r}' "
        f"value='{start!r}'> <output class='threshold-value'></output></label>"
        f"<span class='confusion'></span></div>"
    )
    head = (
        "<thead><tr><th data-key='order'>item</th><th>unit</th><th data-key='score'>score</th>"
        "<th data-key='label'>label</th><th>text</th></tr></thead>"
    )
    failed = "".join(f"<li class='bad'>{_e(f['item'])}: {_e(f['error'])}</li>" for f in result.failures)
    return (
        f"<section class='items' data-positive='{_e(json.dumps(result.positive))}'>"
        f"<h3>{_e(method)}: {len(result.items)} {_e(result.item)}s, <span class='shown'>{len(rows)}</span> of "
        f"{len(rows)} units shown{_e(positive)}</h3>{controls}"
        f"<table class='units'>{head}<tbody>{''.join(lines)}</tbody></table>"
        + (f"<ul>{failed}</ul>" if failed else "")
        + "</section>"
    )
