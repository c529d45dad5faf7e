"""Open a page in the real headless Chromium (Debian's chromium + chromedriver, driven by
selenium) and report what a person and the browser saw: console errors, every network
request, the figures and the visible text. One screenshot per page is kept as an artifact
(``TOKENSLEUTH_ARTIFACTS`` or ``test-artifacts/`` in the repository)."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

ARTIFACTS = Path(os.environ.get("TOKENSLEUTH_ARTIFACTS", Path(__file__).resolve().parent.parent / "test-artifacts"))


@dataclass(frozen=True)
class Seen:
    text: str
    console_errors: list[str]
    requests: list[str]
    figures: list[tuple[int, int, int]]  # per <figure> svg: width, height, drawn elements
    scripts: int
    screenshot: Path


def have_browser() -> bool:
    return bool(shutil.which("chromium") and shutil.which("chromedriver"))


def open_page(page: Path, name: str, width: int = 1000) -> Seen:
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
    service = webdriver.ChromeService(executable_path=shutil.which("chromedriver"))
    d = webdriver.Chrome(options=opts, service=service)
    try:
        d.get(page.resolve().as_uri())
        errors = [e["message"] for e in d.get_log("browser")  # type: ignore[no-untyped-call]
                  if e["level"] == "SEVERE"]
        requests = []
        for e in d.get_log("performance"):  # type: ignore[no-untyped-call]
            msg = json.loads(e["message"])["message"]
            if msg["method"] == "Network.requestWillBeSent":
                requests.append(msg["params"]["request"]["url"])
        figures = []
        for svg in d.find_elements(By.CSS_SELECTOR, "figure svg"):
            drawn = len(svg.find_elements(By.CSS_SELECTOR, "path, line, text, rect, use"))
            figures.append((svg.size["width"], svg.size["height"], drawn))
        text = d.find_element(By.TAG_NAME, "body").text
        scripts = int(d.execute_script("return document.scripts.length"))
        height = int(d.execute_script("return document.body.scrollHeight"))
        d.set_window_size(width, min(max(height, 600), 12000))
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        shot = ARTIFACTS / f"{name}.png"
        d.save_screenshot(str(shot))
    finally:
        d.quit()
    return Seen(text, errors, requests, figures, scripts, shot)


def assert_clean(seen: Seen, page: Path) -> None:
    """No console error, no request but the page itself, no script, every figure drawn."""
    assert seen.console_errors == [], seen.console_errors
    assert [u for u in seen.requests if u != page.resolve().as_uri()] == [], seen.requests
    assert seen.scripts == 0
    assert seen.figures, "no figure on the page"
    for w, h, drawn in seen.figures:
        assert w > 100 and h > 50 and drawn > 10, seen.figures
