"""`commsched report` pages in a real headless Chromium (Debian's chromium + chromium-driver, driven by
selenium): each page loads from file:// without console errors and without fetching anything, its
table has one row per strategy, its timeline one element per all-reduce, and hovering an all-reduce
shows its bytes and tensors. A screenshot of each page is saved as a test artifact, to
$COMMSCHED_TEST_ARTIFACTS or out/test-artifacts/ under the repository.

`make test` installs chromium where it is missing (as root, with apt-get); where it still is not
installed, these tests skip and say so.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
PROFILE = DATA / "tiny-profile.json"
CLUSTER = DATA / "tiny-cluster.json"
# a trimmed validate.json of a recorded run (mobilenet_v2, 2 ranks, emulated 2 Gbit/s)
VALIDATE = DATA / "validate-report.json"
HOSTILE = '</script><script>window.pwned=1</script> "q" \u00e9\u2028x'


def _browser_paths() -> tuple[str, str]:
    chromium = os.environ.get("COMMSCHED_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    driver = os.environ.get("COMMSCHED_CHROMEDRIVER") or shutil.which("chromedriver")
    if not chromium or not driver:
        pytest.skip(
            "headless Chromium not installed (Debian packages chromium and chromium-driver; `make test` installs them "
            "when run as root): the report's browser test cannot run"
        )
    return chromium, driver


@pytest.fixture(scope="module")
def browser():
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (pip install -e '.[test]')")
    from selenium.webdriver.chrome.service import Service

    chromium, driver_path = _browser_paths()
    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1280,1000",
              "--no-first-run", "--disable-extensions"):
        opts.add_argument(a)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    d = webdriver.Chrome(service=Service(executable_path=driver_path), options=opts)
    d.set_page_load_timeout(30)
    yield d
    d.quit()


def _artifacts() -> Path:
    p = Path(os.environ.get("COMMSCHED_TEST_ARTIFACTS") or ROOT / "out" / "test-artifacts")
    p.mkdir(parents=True, exist_ok=True)
    return p


def _cli(*args: str) -> None:
    r = subprocess.run([sys.executable, "-m", "commsched", *args], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr


def _open(browser, page: Path, shot: str):
    """Load the page; return its severe console entries after saving a full-page screenshot."""
    browser.get_log("browser")  # drop what an earlier page left
    browser.get(page.resolve().as_uri())
    assert browser.execute_script("return document.body.getAttribute('data-rendered')") == "true", browser.get_log("browser")
    height = browser.execute_script("return document.documentElement.scrollHeight")
    # the whole page in one image: a viewport as tall as the page (a window cannot grow past the screen)
    metrics = {"width": 1280, "height": min(height, 8000), "deviceScaleFactor": 1, "mobile": False}
    browser.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", metrics)
    browser.save_screenshot(str(_artifacts() / shot))
    browser.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
    severe = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    # self-contained: nothing was fetched (no script, style, font or image from anywhere)
    fetched = browser.execute_script("return performance.getEntriesByType('resource').map(function (e) { return e.name; })")
    return severe, fetched


def _css(browser, selector: str):
    from selenium.webdriver.common.by import By

    return browser.find_elements(By.CSS_SELECTOR, selector)


def _hover_text(browser, element) -> str:
    from selenium.webdriver.common.action_chains import ActionChains

    browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", element)
    ActionChains(browser).move_to_element(element).perform()
    tip = _css(browser, "#tooltip")[0]
    assert tip.is_displayed()
    return tip.text


def test_plan_report(browser, tmp_path):
    # a tensor name that would end the data's <script> element if it were not escaped
    prof = json.loads(PROFILE.read_text())
    prof["tensors"][0]["name"] = HOSTILE
    prof["optimizer_s"] = 0.002  # a measured update: the table gets its column, so its columns add up
    (tmp_path / "p.json").write_text(json.dumps(prof))
    _cli("plan", "--profile", str(tmp_path / "p.json"), "--cluster", str(CLUSTER), "--out", str(tmp_path / "o"))
    data = json.loads((tmp_path / "o" / "report-data.json").read_text())
    severe, fetched = _open(browser, tmp_path / "o" / "report.html", "report-plan.png")
    assert severe == [] and fetched == []
    assert browser.execute_script("return window.pwned") is None

    rows = _css(browser, "section#plan table.strategies tbody tr[data-strategy]")
    assert [r.get_attribute("data-strategy") for r in rows] == [s["name"] for s in data["strategies"]]
    assert len(rows) == 8  # every strategy of `plan` on a cluster without resources

    buckets = {s["name"]: s["buckets"] for s in data["strategies"]}
    shown = list(dict.fromkeys([data["recommended"]["strategy"], data["best"], "ddp"]))
    assert [t["strategy"] for t in data["timelines"]] == shown
    heads = [h.text for h in _css(browser, "section#plan table.strategies thead th")]
    assert heads[3:5] == ["non-overlapped comm ms", "optimizer ms"] and len(heads) == 8
    assert [c.text for c in rows[0].find_elements("css selector", "td")][4] == "2.00"
    marked = _css(browser, "section#plan table.strategies tbody tr.best")
    assert [r.get_attribute("data-strategy") for r in marked] == [data["recommended"]["strategy"]]
    # one .allreduce per all-reduce of each shown timeline: the recommended plan's, the fastest's and DDP's
    assert len(_css(browser, "section#plan .allreduce")) == sum(len(buckets[n]) for n in shown) > len(shown)
    for name in shown:
        assert len(_css(browser, f'section#plan g.timeline[data-strategy="{name}"] .allreduce')) == len(buckets[name])
    assert len(_css(browser, "section#plan .bucket")) == sum(len(b) for b in buckets.values())

    # hovering the best plan's first all-reduce shows its bytes and its tensors' names
    first = buckets[data["best"]][0]
    names = [data["tensors"][i]["name"] for i in first["tensors"]]
    assert HOSTILE in names  # the first bucket holds the first tensor ready
    el = _css(browser, f'section#plan g.timeline[data-strategy="{data["best"]}"] .allreduce')[0]
    text = _hover_text(browser, el)
    assert f"{first['bytes']} bytes" in text
    assert HOSTILE.split("\u2028")[0] in text  # the tooltip's rendered text (U+2028 shows as a space)
    assert HOSTILE in el.get_attribute("data-tip")  # every character, as text: no markup, no script run


def test_scale_report(browser, tmp_path):
    _cli("scale", "--profile", str(PROFILE), "--cluster", "k80-10gbe", "--workers", "4,8,16", "--out", str(tmp_path))
    lines = (tmp_path / "scale.csv").read_text().splitlines()[1:]
    strategies = list(dict.fromkeys(line.split(",")[2] for line in lines))
    severe, fetched = _open(browser, tmp_path / "scale-report.html", "report-scale.png")
    assert severe == [] and fetched == []
    rows = _css(browser, "section#scale table.strategies tbody tr[data-strategy]")
    assert [r.get_attribute("data-strategy") for r in rows] == strategies
    # two charts (scaling factor, speedup), a line per strategy and a point per worker count
    assert len(_css(browser, "section#scale .series polyline")) == 2 * len(strategies) + 1  # + the linear reference
    assert len(_css(browser, "section#scale .point")) == 2 * len(lines)
    text = _hover_text(browser, _css(browser, 'section#scale .series[data-strategy="optimal"] .point')[0])
    assert "optimal at 4 workers" in text
    # scale's markers (bend, synceasgd overtaking wfbp, optimal's one bucket): one list item each
    header = (tmp_path / "scale.csv").read_text().splitlines()[0].split(",")
    marked = sum(int(line.split(",")[header.index(k)]) for line in lines for k in ("bend", "synceasgd_overtakes_wfbp", "optimal_one_bucket"))
    assert len(_css(browser, "section#scale li.marker")) == marked


def test_validate_report(browser, tmp_path):
    _cli("report", "--from", str(VALIDATE), "--out", str(tmp_path / "v.html"))
    report = json.loads(VALIDATE.read_text())
    severe, fetched = _open(browser, tmp_path / "v.html", "report-validate.png")
    assert severe == [] and fetched == []
    rows = _css(browser, "section#validate table.strategies tbody tr[data-strategy]")
    assert sorted(r.get_attribute("data-strategy") for r in rows) == sorted(report["strategies"])
    assert len(_css(browser, "section#validate tr[data-reference]")) == 1
    n = len(report["strategies"]) + 1  # and stock DDP
    assert len(_css(browser, "section#validate .measured")) == len(_css(browser, "section#validate .predicted")) == n
    assert len(_css(browser, "section#validate .interval")) == 2 * n  # measured range, error's 95% interval
    opt = report["strategies"]["optimal"]
    text = _hover_text(browser, _css(browser, 'section#validate svg.validate-errors g[data-strategy="optimal"] .interval')[0])
    lo, hi = (f"{x * 100:+.1f}%" for x in opt["error_ci95"])
    assert f"[{lo}, {hi}]" in text
