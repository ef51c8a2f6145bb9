"""report.html: written by every bench beside report.md, self-contained, and rendered by a real headless
browser (Debian's chromium; .ci/run installs it) into a screenshot that is not blank."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from halluscope.cli import main


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory, data_dir: Path) -> Path:
    out = tmp_path_factory.mktemp("wikibio")
    argv = [
        "bench",
        "wikibio",
        "--method",
        "selfcheck-unigram",
        "--limit",
        "4",
        "--data",
        str(data_dir),
        "--out",
        str(out),
    ]
    assert main(argv) == 0
    return out


def test_the_page_holds_cost_metrics_curves_with_their_auc_and_every_item(report: Path) -> None:
    page = (report / "report.html").read_text(encoding="utf-8")
    saved = json.loads((report / "selfcheck-unigram" / "results.json").read_text())
    metrics = saved["metrics"]
    low, high = saved["intervals"]["pearson"]  # the metrics table: each value with its bootstrap interval
    assert (
        low <= metrics["pearson"] <= high
        and f"{metrics['pearson']:.4g} <span class='ci'>[{low:.4g}, {high:.4g}]" in page
    )
    assert "<script" not in page and "http://" not in page.replace("http://www.w3.org/2000/svg", "")
    assert page.count("<svg") == 4  # PR and ROC, NonFact and NonFact*
    legends = re.findall(r"selfcheck-unigram: AUC ([0-9.]+) \[([0-9.]+), ([0-9.]+)\]", page)
    shown = [float(auc) for auc, _, _ in legends]
    expected = [
        metrics[k] for k in ("auc_pr_nonfact", "auc_roc_nonfact", "auc_pr_nonfact_star", "auc_roc_nonfact_star")
    ]
    assert shown == pytest.approx([round(x, 1) for x in expected], abs=0.051)
    assert all(float(low) <= float(auc) <= float(high) for auc, low, high in legends)
    names = ("auc_pr_nonfact", "auc_roc_nonfact", "auc_pr_nonfact_star", "auc_roc_nonfact_star")
    drawn = [[float(low), float(high)] for _, low, high in legends]  # one interval per metric, computed once
    assert drawn == [[round(v, 1) for v in saved["intervals"][name]] for name in names]
    items = json.loads((report / "selfcheck-unigram" / "results.json").read_text())["items"]
    assert len(items) == 4 and all(len(i["record"]["sentences"]) == len(i["scores"]) for i in items)
    assert page.count("<details>") == 4 and items[0]["record"]["sentences"][0][:40] in page


def test_a_real_browser_renders_it(report: Path, tmp_path: Path) -> None:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    assert browser, "report.html is checked in a real browser: install Debian's chromium (.ci/run does)"
    flags = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--window-size=1200,1600"]
    url = (report / "report.html").as_uri()
    dom = subprocess.run([*flags, "--dump-dom", url], capture_output=True, text=True, timeout=120, check=True).stdout
    assert dom.count("<svg") == 4 and "halluscope bench wikibio" in dom
    shot = tmp_path / "report.png"
    subprocess.run([*flags, f"--screenshot={shot}", url], capture_output=True, timeout=120, check=True)
    import matplotlib.image

    pixels = matplotlib.image.imread(shot)
    assert pixels.shape[:2] == (1600, 1200)
    ink = (pixels[..., :3].mean(axis=2) < 0.5).mean()  # share of dark pixels: text, axes, tables
    assert 0.005 < ink < 0.5, f"the rendered page looks blank or black ({ink:.3%} dark)"
    curve_blue = np.all(np.abs(pixels[..., :3] - np.array([0x1F, 0x77, 0xB4]) / 255) < 0.08, axis=2).sum()
    assert curve_blue > 200  # the first curve's colour is drawn
