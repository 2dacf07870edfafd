"""The HTML reports, opened in headless Chromium as a user would open them.

One browser session for the module. Skipped where chromium/chromedriver are missing,
unless TFTUNE_REQUIRE_BROWSER=1 (CI), where their absence is a failure.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from repo_paths import FIXTURES

from tftune.reports import render_report_json

pytestmark = pytest.mark.browser

WHEN = "2026-11-30 03:40 UTC"
CHROME_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    "--window-size=1200,900",
]
PAGE_LOAD_S = 90  # generous: the suite shares 2 cores between two workers


def _find(*names: str) -> str | None:
    for name in names:
        found = shutil.which(name)
        if found:
            return found
    return None


@pytest.fixture(scope="module")
def driver() -> Iterator[Any]:
    chromium = _find("chromium", "chromium-browser", "google-chrome")
    chromedriver = _find("chromedriver")
    required = os.environ.get("TFTUNE_REQUIRE_BROWSER") == "1"
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        chromium = None
    if chromium is None or chromedriver is None:
        message = "headless Chromium tests need chromium, chromedriver and selenium"
        if required:
            pytest.fail(message + " (TFTUNE_REQUIRE_BROWSER=1)")
        pytest.skip(message)
    profile = tempfile.mkdtemp(prefix="tftune-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in [*CHROME_FLAGS, f"--user-data-dir={profile}"]:
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    browser = _start(lambda: webdriver.Chrome(service=Service(chromedriver), options=options))
    try:
        yield browser
    finally:
        browser.quit()
        shutil.rmtree(profile, ignore_errors=True)


def _start(launch: Any) -> Any:
    """A ready browser, launched again once where the first one's renderer did not answer
    in time: a loaded CI machine (the suite runs two workers on 2 cores) once kept it
    busy past 30 s before the first command. What the tests check starts after this."""
    from selenium.common.exceptions import WebDriverException

    for attempt in (1, 2):
        browser = launch()
        try:
            browser.set_page_load_timeout(PAGE_LOAD_S)
            # Let the page's copy button write to, and the test read, the clipboard.
            browser.execute_cdp_cmd(
                "Browser.grantPermissions",
                {"permissions": ["clipboardReadWrite", "clipboardSanitizedWrite"]},
            )
            return browser
        except WebDriverException:
            browser.quit()
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("reports")
    written = {}
    for name in ("analysis_cpu_pyfunc", "analysis_gpu_h2d", "tuning_latency"):
        data = json.loads((FIXTURES / f"{name}.json").read_text())
        path = out / f"{name}.html"
        path.write_text(render_report_json(data, generated_at=WHEN, source=f"{name}.json"))
        written[name] = path
    return written


def keep_screenshot(shot: Path) -> None:
    """Copy a screenshot to $TFTUNE_SCREENSHOT_DIR (CI artifacts, a human's look) if set."""
    where = os.environ.get("TFTUNE_SCREENSHOT_DIR")
    if where:
        Path(where).mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, Path(where) / shot.name)


def open_page(driver: Any, path: Path) -> list[str]:
    """Load the page; return every URL the page requested."""
    driver.get("about:blank")
    driver.get_log("performance")  # drain: only this page's requests count
    driver.get_log("browser")
    driver.get(path.as_uri())
    driver.execute_script("return document.readyState")
    urls = []
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message["method"] == "Network.requestWillBeSent":
            urls.append(message["params"]["request"]["url"])
    return urls


def drawn_shapes(driver: Any, selector: str) -> list[int]:
    """Per matching SVG chart: how many of its shapes have a visible size on the page."""
    counts: list[int] = driver.execute_script(
        """
        return Array.from(document.querySelectorAll(arguments[0])).map(function (svg) {
          return Array.from(svg.querySelectorAll('rect,circle,path,line')).filter(function (s) {
            var b = s.getBoundingClientRect(); return b.width > 0 || b.height > 0;
          }).length;
        });""",
        selector,
    )
    return counts


def check_loaded_cleanly(driver: Any, path: Path, urls: list[str]) -> None:
    assert urls == [path.as_uri()], f"unexpected requests: {urls}"
    errors = [e for e in driver.get_log("browser") if e["level"] in ("SEVERE", "WARNING")]
    assert errors == []


def copy_and_read(driver: Any, button: Any) -> tuple[str, str]:
    from selenium.webdriver.support.ui import WebDriverWait

    button.click()
    WebDriverWait(driver, 5).until(lambda d: button.text != "Copy")
    label = button.text
    clip: str = driver.execute_async_script(
        "var done = arguments[0];"
        "navigator.clipboard.readText().then(done, function (e) { done('ERR ' + e); });"
    )
    return label, clip


def test_analysis_report_in_the_browser(driver: Any, pages: dict[str, Path]) -> None:
    from selenium.webdriver.common.by import By

    path = pages["analysis_cpu_pyfunc"]
    urls = open_page(driver, path)
    check_loaded_cleanly(driver, path, urls)
    assert driver.title.startswith("input pipeline analysis")

    # The verdict is first, big and on the first screen.
    sentence = driver.find_element(By.CSS_SELECTOR, "#verdict .sentence")
    assert "highly input-bound" in sentence.text and "slow_tokenize" in sentence.text
    assert sentence.rect["y"] < 200
    assert float(sentence.value_of_css_property("font-size").rstrip("px")) >= 24

    body = driver.find_element(By.TAG_NAME, "body").text
    for key in ("Python", "90%", "MapAndBatch", "num_parallel_calls=32", "TensorFlow", "2.21.0"):
        assert key in body, key
    assert "not measured" in body

    # Every chart drew: the average bar, the per-step bars, the timeline.
    assert drawn_shapes(driver, "svg.sharebar")[0] >= 3
    assert drawn_shapes(driver, "svg.stacked")[0] >= 40  # 20 steps, several categories each
    assert drawn_shapes(driver, "svg.timeline")[0] >= 20
    hot_row = driver.find_element(By.CSS_SELECTOR, "tr.hot")
    assert "MapAndBatch" in hot_row.text and "bottleneck" in hot_row.text

    shot = path.with_suffix(".png")
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(1200, min(int(height) + 40, 6000))
    try:
        assert driver.save_screenshot(str(shot))
    finally:
        driver.set_window_size(1200, 900)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
    keep_screenshot(shot)

    # The first fix's copy button puts exactly the fix on the clipboard.
    buttons = driver.find_elements(By.CSS_SELECTOR, "#bottlenecks button[data-copy]")
    assert len(buttons) == 2
    label, clip = copy_and_read(driver, buttons[0])
    assert label == "Copied"
    assert clip.startswith("ds = ds.map(slow_tokenize, num_parallel_calls=32)")
    assert clip.endswith("ds = ds.with_options(options)")
    assert [e for e in driver.get_log("browser") if e["level"] == "SEVERE"] == []


def test_gpu_analysis_report_in_the_browser(driver: Any, pages: dict[str, Path]) -> None:
    from selenium.webdriver.common.by import By

    path = pages["analysis_gpu_h2d"]
    urls = open_page(driver, path)
    check_loaded_cleanly(driver, path, urls)
    body = driver.find_element(By.TAG_NAME, "body").text
    assert "Host → device" in body and "prefetch_to_device" in body
    assert "capped by threadpool_size" in body
    lanes = driver.find_element(By.CSS_SELECTOR, "svg.timeline").text
    assert "MemcpyH2D" in lanes
    assert drawn_shapes(driver, "svg.stacked")[0] >= 100
    assert driver.save_screenshot(str(path.with_suffix(".png")))
    keep_screenshot(path.with_suffix(".png"))


def test_tuning_report_in_the_browser(driver: Any, pages: dict[str, Path]) -> None:
    from selenium.webdriver.common.by import By

    path = pages["tuning_latency"]
    urls = open_page(driver, path)
    check_loaded_cleanly(driver, path, urls)
    sentence = driver.find_element(By.CSS_SELECTOR, "#verdict .sentence").text
    assert "7,310 ex/s" in sentence and "31.0×" in sentence
    body = driver.find_element(By.TAG_NAME, "body").text
    for key in ("AUTOTUNE everywhere", "#cores heuristic", "ResourceExhaustedError", "pruned"):
        assert key in body, key
    assert drawn_shapes(driver, "svg.history")[0] >= 17  # complete trials, best line, axes
    assert drawn_shapes(driver, "svg.hbars")[0] == 3  # one bar per importance
    command = driver.find_element(By.CSS_SELECTOR, "#winner button[data-copy]")
    label, clip = copy_and_read(driver, command)
    assert label == "Copied" and clip == "tftune run --config tftune-best.json train.py"
    assert driver.save_screenshot(str(path.with_suffix(".png")))
    keep_screenshot(path.with_suffix(".png"))
