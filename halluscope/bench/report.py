"""Benchmark reports: results.json, a markdown table and PNG curves, side by side in one directory."""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from halluscope.errors import ConfigError, redact_credentials

CURVES = "curves.json"  # every curve a report drew, beside its PNG: report.html draws them again


class Curve(NamedTuple):
    """One method's PR or ROC curve: its labels and scores, and the AUC's 95% interval (x100) as the run's
    results.json has it (a bootstrap over the items), so report.html shows the same interval."""

    name: str
    y: np.ndarray
    scores: np.ndarray
    interval: Sequence[float] | None = None


def write_curves(path: Path, curves: Sequence[Curve], kind: str, title: str) -> None:
    """One PNG with a PR or ROC curve per method. The labels, scores and intervals go to curves.json in
    the same folder too, under the PNG's name, for report.html."""
    _keep_curves(path, curves, kind, title)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from sklearn.metrics import precision_recall_curve, roc_curve

    fig, ax = plt.subplots(figsize=(5.5, 4.5), dpi=120)
    for name, y, scores, _ in curves:
        if y.all() or not y.any():  # one class only: no curve is defined
            ax.text(0.5, 0.5, "undefined: every sentence has the same label", ha="center", transform=ax.transAxes)
            break
        if kind == "pr":
            precision, recall, _ = precision_recall_curve(y, scores)
            ax.plot(recall, precision, label=name)
        else:
            fpr, tpr, _ = roc_curve(y, scores)
            ax.plot(fpr, tpr, label=name)
    if kind == "pr":
        if curves[0][1].size:
            ax.axhline(float(np.mean(curves[0][1])), color="grey", linestyle=":", label="random")
        ax.set_xlabel("recall")
        ax.set_ylabel("precision")
    else:
        ax.plot([0, 1], [0, 1], color="grey", linestyle=":", label="random")
        ax.set_xlabel("false positive rate")
        ax.set_ylabel("true positive rate")
    ax.set_title(title)
    if ax.get_legend_handles_labels()[0]:  # one class only: no curve and no random line to name
        ax.legend(loc="lower left" if kind == "pr" else "lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _keep_curves(path: Path, curves: Sequence[Curve], kind: str, title: str) -> None:
    store = path.parent / CURVES
    kept = json.loads(store.read_text(encoding="utf-8")) if store.is_file() else {}
    kept[path.stem] = {
        "kind": kind,
        "title": title,
        "curves": [
            {
                "name": c.name,
                "y": [int(v) for v in c.y],
                "scores": [float(v) for v in c.scores],
                "interval": None if c.interval is None else [float(v) for v in c.interval],
            }
            for c in curves
        ],
    }
    write_json(store, kept)


def write_json(path: Path, obj: Any) -> None:
    """Results as JSON, with credentials written into any URL (a model spec's base URL) redacted."""
    write_text(path, json.dumps(obj, indent=2, ensure_ascii=False) + "\n")


def write_text(path: Path, text: str) -> None:
    """A report file (report.md, report.html, compare.md ...), with credentials in any URL redacted: every
    file a benchmark writes goes through here or ``write_json``. A path that cannot be written is one
    ConfigError naming it."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(redact_credentials(text), encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot write {path}: {exc.strerror or exc}") from exc


FORMULA_START = ("=", "+", "-", "@", "\t", "\r")  # a spreadsheet reads such a cell as a formula
_FORMULA_AFTER_BREAK = re.compile(r"(?<=[\r\n])(?=[=+\-@\t])")  # a line of a cell that starts like one


def csv_text(rows: Sequence[Mapping[str, Any]], columns: Sequence[str] | None = None) -> str:
    """A table as CSV, for a spreadsheet or ``pandas.read_csv``: a dict or list cell as JSON, None as an
    empty cell, and a text cell that a spreadsheet would run as a formula (it starts with = + - @, a tab
    or a carriage return: a model's answer, a user's text) escaped with a leading apostrophe, as OWASP
    advises, and so is each line of a cell that starts so; numbers stay numbers. Rows end in CRLF (RFC
    4180), so every cell holding a line break, a lone CR included, is quoted: unquoted, a spreadsheet
    started a new row inside it. ``columns``: their order (default: as the rows first name them)."""
    names = list(columns) if columns is not None else list(dict.fromkeys(k for row in rows for k in row))

    def cell(value: Any) -> Any:
        if isinstance(value, dict | list | tuple):
            value = json.dumps(value, ensure_ascii=False, default=str)
        if not isinstance(value, str):
            return value
        value = _FORMULA_AFTER_BREAK.sub("'", value)
        return "'" + value if value.startswith(FORMULA_START) else value

    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=names, extrasaction="ignore", lineterminator="\r\n")
    writer.writeheader()
    writer.writerows({k: cell(v) for k, v in row.items()} for row in rows)
    return redact_credentials(text.getvalue())


def write_csv(path: Path, rows: Sequence[Mapping[str, Any]], columns: Sequence[str] | None = None) -> None:
    """``csv_text`` written to ``path``, credentials redacted as in every file written: the one writer of
    every CSV (detect --csv, every bench's items.csv)."""
    write_text(path, csv_text(rows, columns))


METRIC_LABELS = {  # results.json's keys as a reader names them (report.html's metrics table)
    "auc_roc": "AUC-ROC",
    "auc_pr": "AUC-PR",
    "random_auc_pr": "AUC-PR of a random ranking (the base rate)",
    "accuracy": "accuracy",
    "balanced_accuracy": "balanced accuracy",
    "precision": "precision",
    "recall": "recall",
    "f1": "F1",
    "n_pairs": "pairs",
    "n_unsupported": "pairs not supported (positives)",
    "n_passages": "passages",
    "n_sentences": "sentences",
    "auc_pr_nonfact": "NonFact AUC-PR",
    "auc_pr_nonfact_star": "NonFact* AUC-PR",
    "auc_pr_factual": "Factual AUC-PR",
    "auc_roc_nonfact": "NonFact AUC-ROC",
    "auc_roc_nonfact_star": "NonFact* AUC-ROC",
    "random_auc_pr_nonfact": "NonFact AUC-PR of a random ranking",
    "random_auc_pr_factual": "Factual AUC-PR of a random ranking",
    "pearson": "Pearson (passages)",
    "spearman": "Spearman (passages)",
}


def metric_label(key: str) -> str:
    """A results.json metric key as a reader names it: a known one by its name, any other (a nested
    'correlation.D_R.mean') with its underscores as spaces and its dots as ' / '."""
    if key in METRIC_LABELS:
        return METRIC_LABELS[key]
    return " / ".join(METRIC_LABELS.get(part, part.replace("_", " ")) for part in key.split("."))


def markdown_table(rows: Sequence[dict[str, Any]], columns: Sequence[tuple[str, str]], digits: int = 2) -> str:
    """A markdown table of the given (key, heading) columns; floats with ``digits`` decimals."""

    def cell(value: Any) -> str:
        if value is None:
            return "n/a"
        return f"{value:.{digits}f}" if isinstance(value, float) else str(value)

    head = "| " + " | ".join(h for _, h in columns) + " |"
    rule = "| " + " | ".join("---" for _ in columns) + " |"
    body = ["| " + " | ".join(cell(r.get(k, "")) for k, _ in columns) + " |" for r in rows]
    return "\n".join([head, rule, *body])
