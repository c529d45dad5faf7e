"""Open a page in the real headless Chromium (Debian's chromium + chromedriver, driven by
selenium) and report what a person and the browser saw: console errors, every network
request, the figures and the visible text. One screenshot per page is kept as an artifact
(``TOKENSLEUTH_ARTIFACTS`` or ``test-artifacts/`` in the repository)."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ARTIFACTS = Path(os.environ.get("TOKENSLEUTH_ARTIFACTS", Path(__file__).resolve().parent.parent / "test-artifacts"))


@dataclass(frozen=True)
class Seen:
    text: str
    console_errors: list[str]
    requests: list[str]
    figures: list[tuple[int, int, int]]  # per <figure> svg: width, height, drawn elements
    scripts: int
    screenshot: Path
    links: list[str] = field(default_factory=list)  # every <a href> as written
    # per element id asked for: its visible text and the drawn figures inside it (as ``figures``)
    by_id: dict[str, tuple[str, list[tuple[int, int, int]]]] = field(default_factory=dict)


def have_browser() -> bool:
    return bool(shutil.which("chromium") and shutil.which("chromedriver"))


def open_page(page: Path, name: str, width: int = 1000, ids: Sequence[str] = ()) -> Seen:
    # the test says so up front (@pytest.mark.needs("browser")): never a skip after the rest passed
    assert have_browser(), "chromium and chromedriver are missing: mark the test @pytest.mark.needs(\"browser\")"
    from selenium import webdriver
    from selenium.webdriver.common.by import By

    opts = webdriver.ChromeOptions()
    opts.binary_location = shutil.which("chromium") or "chromium"
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--hide-scrollbars",
              f"--window-size={width},1200"):
        opts.add_argument(a)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    # the profile folders chromedriver makes in TMPDIR (org.chromium.Chromium.*) go in one removed
    # after the browser quits: 339 were left in /tmp by a day of runs
    tmp = tempfile.mkdtemp(prefix="tokensleuth-browser-")
    service = webdriver.ChromeService(executable_path=shutil.which("chromedriver"), env={**os.environ, "TMPDIR": tmp})
    try:
        d = webdriver.Chrome(options=opts, service=service)
    except BaseException:
        shutil.rmtree(tmp)
        raise
    try:
        d.get(page.resolve().as_uri())
        errors = [e["message"] for e in d.get_log("browser")  # type: ignore[no-untyped-call]
                  if e["level"] == "SEVERE"]
        requests = []
        for e in d.get_log("performance"):  # type: ignore[no-untyped-call]
            msg = json.loads(e["message"])["message"]
            if msg["method"] == "Network.requestWillBeSent":
                requests.append(msg["params"]["request"]["url"])
        def drawn_in(root: Any) -> list[tuple[int, int, int]]:  # the driver, or an element of the page
            out = []
            for svg in root.find_elements(By.CSS_SELECTOR, "figure svg"):
                drawn = len(svg.find_elements(By.CSS_SELECTOR, "path, line, text, rect, use"))
                out.append((svg.size["width"], svg.size["height"], drawn))
            return out

        figures = drawn_in(d)
        text = d.find_element(By.TAG_NAME, "body").text
        links = [str(a.get_dom_attribute("href")) for a in d.find_elements(By.CSS_SELECTOR, "a[href]")]
        by_id = {}
        for i in ids:
            found = d.find_elements(By.ID, i)
            if found:
                by_id[i] = (found[0].text, drawn_in(found[0]))
        scripts = int(d.execute_script("return document.scripts.length"))
        height = int(d.execute_script("return document.body.scrollHeight"))
        d.set_window_size(width, min(max(height, 600), 12000))
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        shot = ARTIFACTS / f"{name}.png"
        d.save_screenshot(str(shot))
    finally:
        d.quit()
        shutil.rmtree(tmp)
    return Seen(text, errors, requests, figures, scripts, shot, links, by_id)


def assert_clean(seen: Seen, page: Path) -> None:
    """No console error, no request but the page itself, no script, every figure drawn."""
    assert seen.console_errors == [], seen.console_errors
    assert [u for u in seen.requests if u != page.resolve().as_uri()] == [], seen.requests
    assert seen.scripts == 0
    assert seen.figures, "no figure on the page"
    for w, h, drawn in seen.figures:
        assert w > 100 and h > 50 and drawn > 10, seen.figures
