"""report.html: written by every bench beside report.md, self-contained, and rendered by a real headless
browser (Debian's chromium; .ci/run installs it) into a screenshot that is not blank."""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

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
    assert page.count("<script") == 1 and "<script src" not in page  # the one script is inline
    assert "http" not in page.replace("http://www.w3.org/2000/svg", "") and "fetch(" not in page
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
    sentences = sum(len(i["record"]["sentences"]) for i in items)
    assert page.count("<tr data-order=") == sentences and items[0]["record"]["sentences"][0][:40] in page
    assert "<pre>{" not in page  # no raw record dumps under the items
    assert "resampling whole passages (4 passages" in page  # the intervals' resampling unit, named once for all


def confusion(rows: list[dict], threshold: float) -> str:
    """What the page must say at ``threshold``, computed here from results.json."""
    bad = [r["label"] != "accurate" for r in rows]
    hit = [r["score"] is not None and r["score"] >= threshold for r in rows]
    tp = sum(h and b for h, b in zip(hit, bad, strict=True))
    fp = sum(h and not b for h, b in zip(hit, bad, strict=True))
    fn = sum(b and not h for h, b in zip(hit, bad, strict=True))
    tn = len(rows) - tp - fp - fn

    def ratio(a: int, b: int) -> str:
        return f"{a / b:.3f}" if b else "n/a"

    return (
        f"{sum(hit)} of {len(rows)} units flagged; TP {tp}, FP {fp}, FN {fn}, TN {tn}; "
        f"precision {ratio(tp, tp + fp)}, recall {ratio(tp, tp + fn)}"
    )


class Browser:
    """A headless Chromium driven over the DevTools protocol: real mouse clicks and key presses."""

    def __init__(self, url: str, profile: Path) -> None:
        import urllib.request

        from websockets.sync.client import connect

        browser = shutil.which("chromium") or shutil.which("chromium-browser")
        assert browser, "report.html is checked in a real browser: install Debian's chromium (.ci/run does)"
        flags = ["--headless", "--no-sandbox", "--disable-gpu", "--window-size=1200,900"]
        self.proc = subprocess.Popen(
            [browser, *flags, "--remote-debugging-port=0", f"--user-data-dir={profile}", url],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + 60
        while not (port_file.is_file() and port_file.read_text().strip()):
            assert time.monotonic() < deadline and self.proc.poll() is None, "chromium did not start"
            time.sleep(0.1)
        port = port_file.read_text().split()[0]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json") as answer:
            page = next(t for t in json.load(answer) if t["type"] == "page")
        self.stack = contextlib.ExitStack()
        self.socket = self.stack.enter_context(connect(page["webSocketDebuggerUrl"], max_size=None))
        self.sent = 0
        # the page target may still show about:blank (complete, and empty) on a busy machine: wait for ours
        loaded = f"location.href === {json.dumps(url)} && document.readyState === 'complete'"
        while self.js(loaded) is not True:
            assert time.monotonic() < deadline, "the page did not load"
            time.sleep(0.1)

    def call(self, method: str, **params: Any) -> Any:
        self.sent += 1
        self.socket.send(json.dumps({"id": self.sent, "method": method, "params": params}))
        while True:
            message = json.loads(self.socket.recv())
            if message.get("id") == self.sent:
                assert "error" not in message, message
                return message["result"]

    def js(self, expression: str) -> Any:
        return self.call("Runtime.evaluate", expression=expression, returnByValue=True)["result"].get("value")

    def click(self, selector: str, at: float = 0.5) -> None:
        """A mouse click ``at`` that fraction of the element's width, scrolled into view first."""
        x, y = self.js(
            f"(() => {{ const e = document.querySelector({json.dumps(selector)});"
            " e.scrollIntoView({block: 'center'}); const r = e.getBoundingClientRect();"
            f" return [r.x + r.width * {at}, r.y + r.height / 2]; }})()"
        )
        for kind in ("mousePressed", "mouseReleased"):
            self.call("Input.dispatchMouseEvent", type=kind, x=x, y=y, button="left", clickCount=1)

    def key(self, key: str, code: int) -> None:
        for kind in ("keyDown", "keyUp"):
            self.call("Input.dispatchKeyEvent", type=kind, key=key, code=key, windowsVirtualKeyCode=code)

    def close(self) -> None:
        self.stack.close()
        self.proc.terminate()
        self.proc.wait(timeout=30)


def test_a_person_sorts_filters_and_moves_the_threshold_in_a_real_browser(report: Path, tmp_path: Path) -> None:
    """Clicks on the score header sort the units, a click on the threshold's track and arrow keys move
    it, and the counts the page shows are the ones computed here from results.json."""
    rows = [
        {"score": score, "label": label}
        for item in json.loads((report / "selfcheck-unigram" / "results.json").read_text())["items"]
        for score, label in zip(item["scores"].values(), item["record"]["labels"], strict=True)
    ]
    browser = Browser((report / "report.html").as_uri(), tmp_path / "profile")
    try:
        threshold = float(browser.js("document.querySelector('.threshold').value"))
        assert browser.js("document.querySelector('.confusion').textContent") == confusion(rows, threshold)
        first_scores = "Array.from(document.querySelectorAll('table.units tbody tr')).map(r => Number(r.dataset.score))"
        browser.click("th[data-key='score']")
        assert browser.js(first_scores) == sorted((r["score"] for r in rows), reverse=True)
        browser.click("th[data-key='score']")
        assert browser.js(first_scores) == sorted(r["score"] for r in rows)
        browser.click(".threshold", at=0.02)  # near the track's left end: a low threshold
        low = float(browser.js("document.querySelector('.threshold').value"))
        assert low < threshold and browser.js("document.querySelector('.confusion').textContent") == confusion(
            rows, low
        )
        for _ in range(5):
            browser.key("ArrowRight", 39)
        moved = float(browser.js("document.querySelector('.threshold').value"))
        assert moved > low and browser.js("document.querySelector('.confusion').textContent") == confusion(rows, moved)
        flagged = browser.js("document.querySelectorAll('table.units tr.flagged').length")
        assert flagged == sum(r["score"] >= moved for r in rows)
        browser.js(
            "(s => { s.value = 'accurate'; s.dispatchEvent(new Event('change')); })"
            "(document.querySelector('.label-filter'))"
        )
        visible = browser.js(
            "Array.from(document.querySelectorAll('table.units tbody tr')).filter(r => !r.hidden).length"
        )
        assert (
            visible
            == sum(r["label"] == "accurate" for r in rows)
            == int(browser.js("document.querySelector('.shown').textContent"))
        )
    finally:
        browser.close()


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
