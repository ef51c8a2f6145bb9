"""report.html: one self-contained page per benchmark run (no script, no link outside it) that a person
can open, send or archive: what ran and what it cost, the metrics, the PR and ROC curves drawn as steps
with each AUC and its bootstrap interval (results.json's, computed once) in the legend, and every item's
scores to drill into."""

from __future__ import annotations

import datetime as dt
import html
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from halluscope import __version__
from halluscope.bench.report import CURVES, write_text
from halluscope.bench.runner import BenchResult
from halluscope.metrics import BOOTSTRAP_RESAMPLES, auc_pr, auc_roc, flat_metrics

REPORT = "report.html"
SHOWN_CHARS = 4000  # of an item's other record fields, in its drill-down
_COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf")
_STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:2em auto;max-width:1100px;color:#222;padding:0 1em}
h1{font-size:1.6em;margin-bottom:.2em}h2{margin-top:1.6em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:.6em 0}td,th{border:1px solid #ccc;padding:3px 8px;text-align:left}
th{background:#f3f3f3}td.num{text-align:right;font-variant-numeric:tabular-nums}.ci{color:#666;font-size:90%}
.muted{color:#666}.curves{display:flex;flex-wrap:wrap;gap:1.5em}figure{margin:0}
details{margin:.3em 0}summary{cursor:pointer}pre{background:#f7f7f7;padding:.8em;overflow-x:auto}
.bad{color:#b00020;font-weight:600}
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
        parts += ["<h2>Curves</h2>", _curves_section(curves)]
    parts += ["<h2>Items</h2>", *(_items(result) for result in results)]
    if markdown:
        parts += ["<h2>The protocol's report (report.md)</h2>", f"<pre>{_e(markdown)}</pre>"]
    page = (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        f"<title>halluscope bench {_e(bench)}</title><style>{_STYLE}</style></head><body>"
        + "\n".join(parts)
        + "</body></html>\n"
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
        f"<tr><td>{_e(name)}</td>" + "".join(cell(r, f, name) for r, f in zip(results, flat, strict=True)) + "</tr>"
        for name in names
    ]
    note = (
        "<p class='muted'>[95% interval]: a percentile bootstrap over the items (passages, questions), "
        f"{BOOTSTRAP_RESAMPLES:,} resamples, seed 0; a metric undefined in most resamples has none.</p>"
    )
    return f"<table>{head}</tr>{''.join(rows)}</table>{note}"


def _curves_section(curves: dict[str, Any]) -> str:
    figures = [_svg(name, entry) for name, entry in curves.items()]
    note = (
        "<p class='muted'>AUC as the report computes it (x100; PR by SelfCheckGPT's trapezoid over the "
        "curve's points); [95% interval]: the run's own, as in the metrics table (a percentile bootstrap "
        "over the items).</p>"
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
    """One collapsible row per item: its scores beside the record's texts and labels, when it has them."""
    method = result.params.get("method", result.bench)
    rows = []
    for item in result.items:
        record = item.record
        scores = item.scores if isinstance(item.scores, dict) else {"score": item.scores}
        texts, labels = record.get("sentences"), record.get("labels")
        lines = []
        for i, (unit, score) in enumerate(scores.items()):
            text = texts[i] if isinstance(texts, list) and i < len(texts) else ""
            label = labels[i] if isinstance(labels, list) and i < len(labels) else ""
            lines.append(
                f"<tr><td>{_e(unit)}</td><td class='num'>{_number(score) if score is not None else 'n/a'}</td>"
                f"<td>{_e(label)}</td><td>{_e(text)}</td></tr>"
            )
        extra = json.dumps({k: v for k, v in record.items() if k not in ("sentences", "labels")}, default=str)
        if len(extra) > SHOWN_CHARS:
            extra = extra[:SHOWN_CHARS] + " ... (the whole record is in results.json)"
        rows.append(
            f"<details><summary>{_e(item.id)} ({len(scores)} scores)</summary>"
            "<table><tr><th>unit</th><th>score</th><th>label</th><th>text</th></tr>"
            f"{''.join(lines)}</table><pre>{_e(extra)}</pre></details>"
        )
    failed = "".join(f"<li class='bad'>{_e(f['item'])}: {_e(f['error'])}</li>" for f in result.failures)
    return f"<h3>{_e(method)}: {len(result.items)} items</h3>{''.join(rows)}" + (f"<ul>{failed}</ul>" if failed else "")
