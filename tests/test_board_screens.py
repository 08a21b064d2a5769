"""The board as a reviewer sees it: the Streamlit app (served as ``ddibench board serve`` serves it) and the
static site's index, in a real headless Chromium at 1,400 and 400 px wide, from a store of real shipped
bundles (results/): full runs and ``--limit`` previews of twosides_s2 and tox_herg, and two previews of
drugbank_s1, a task with many published numbers and previews only (one of them the store's best, one tied).

Every shipped LLM run is a preview, so one of them (tox_herg's zero-shot) is marked submittable in the
test's copy of the store: it stands for a full LLM run, whose model the ranked matrix must show.

Checked with the DOM: no row of a ranked, preview or published table taller than a few lines (a paper's
numbers in one cell made a task's row 450 to over 1,000 px tall); the page needs no sideways scrolling at
400 px (a wide matrix scrolls in its own box); no preview in the ranked tables; no ★, ☆ or ≈ beside a
preview; the model beside every LLM score; no published number in the matrix. Screenshots are kept in
$DDIBENCH_SCREENSHOTS when it is set (else in the test's temporary directory)."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

pytest.importorskip("duckdb", reason="the board needs the 'board' extra")
pytest.importorskip("streamlit", reason="the board needs the 'board' extra")

from conftest import chrome, free_port, needs_chromium, open_when_up  # noqa: E402

RESULTS = Path(__file__).resolve().parent.parent / "results"
BUNDLES = (
    "twosides_s2/mlp/11a560bd0a6308f4",
    "twosides_s2/popularity/233bd06205eadfb9",
    "twosides_s2/naive-cbr/e86ffc56f2394ebe",  # previews: the store marks both tied with the best
    "twosides_s2/cbr-ddi/bbfdf8762e7bc464",
    "tox_herg/gin/8654277cf4419783",
    "tox_herg/majority/d7dba3f6d598ec26",
    "tox_herg/zero-shot/957ddd60c0de8316",  # a preview, made a full LLM run in the test's store
    "drugbank_s1/naive-cbr/0cfaa2c41ff7b64b",  # previews only: one tied, one the store's best
    "drugbank_s1/naive-cbr/00d071ae457555f6",
)
LLM_FULL = "957ddd60c0de8316"
MODEL = "qwen2.5-coder-1.5b-instruct"  # the short name of the model every shipped LLM run used
PREVIEW_ONLY = ("naive-cbr", "cbr-ddi")  # systems that have previews alone here
WIDTHS = (1400, 400)
ROW_PX = 120  # a few lines of text
LINE_PX = 45  # one line: a row of the matrix
MARKS = ("★", "☆", "≈")


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import duckdb

    from ddibench.results.store import add_run
    from ddibench.submission import verify

    path = tmp_path_factory.mktemp("screens") / "board.duckdb"
    for name in BUNDLES:
        verdict = verify(RESULTS / f"{name}.tar.gz")
        assert verdict.accepted or verdict.is_preview(), (name, verdict.reasons)
        add_run(path, verdict)
    with duckdb.connect(str(path)) as conn:
        conn.execute("UPDATE runs SET submittable = TRUE WHERE run_id = ?", [LLM_FULL])
        previews = conn.execute("SELECT count(*), count(*) FILTER (WHERE best OR tied) FROM runs WHERE NOT submittable")
        n, marked = previews.fetchone()
    assert n == 4 and marked >= 3  # the store's marks on previews, which no view may show
    return path


@pytest.fixture(scope="module")
def previews(store: Path) -> set[str]:
    """The run ids of the previews (runs the store holds as not submittable)."""
    import duckdb

    with duckdb.connect(str(store), read_only=True) as conn:
        return {row[0] for row in conn.execute("SELECT run_id FROM runs WHERE NOT submittable").fetchall()}


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = Path(os.environ.get("DDIBENCH_SCREENSHOTS") or tmp_path_factory.mktemp("shots"))
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _text(element) -> str:  # noqa: ANN001 - a selenium element
    """An element's text as a reader reads it: no-break spaces as spaces, no word joiners (see leaderboard/app.py)."""
    return element.text.replace("\xa0", " ").replace("\u2060", "")


def _rows(driver, css: str) -> list:  # noqa: ANN001
    from selenium.webdriver.common.by import By

    return driver.find_elements(By.CSS_SELECTOR, f"{css} tr")


def _short_rows(driver, css: str, where: str, limit: int = ROW_PX) -> int:  # noqa: ANN001
    """Every row of the tables ``css`` finds is under ``limit`` px high; the number of rows."""
    rows = _rows(driver, css)
    tall = [(round(r.rect["height"]), _text(r)[:80]) for r in rows if r.rect["height"] >= limit]
    assert not tall, f"{where}: rows taller than {limit} px: {tall}"
    return len(rows)


def _no_sideways_scroll(driver, where: str) -> None:  # noqa: ANN001
    inner, scroll = driver.execute_script("return [window.innerWidth, document.documentElement.scrollWidth]")
    assert scroll <= inner, f"{where}: the page is {scroll} px wide in a {inner} px window"


def _wait(driver, ready: Callable[[], bool], deadline: float, what: str) -> None:  # noqa: ANN001
    from selenium.common.exceptions import StaleElementReferenceException

    while time.time() < deadline:
        try:
            if ready():
                return
        except StaleElementReferenceException:  # drawn again meanwhile
            pass
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


@needs_chromium
def test_static_index_reads_like_a_leaderboard_at_1400_and_400_px(
    store: Path, previews: set[str], shots: Path, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By

    from ddibench.leaderboard.static import safe_name, write_site

    site = tmp_path / "site"
    write_site(store, site)
    driver = chrome(tmp_path / "chrome")
    try:
        for width in WIDTHS:
            driver.set_window_size(width, 1000)
            driver.get((site / "index.html").as_uri())
            where = f"static index at {width} px"
            assert _short_rows(driver, "table.matrix", where, LINE_PX) == 1 + 2  # a row per task with a full run
            assert _short_rows(driver, "table.previews", where) == 1 + len(previews)
            assert _short_rows(driver, "table.leaders", where) == 1 + 2
            _no_sideways_scroll(driver, where)
            leaders = driver.find_element(By.CSS_SELECTOR, "table.leaders")
            assert leaders.rect["width"] <= width, f"{where}: the best-per-task table does not fit"
            # the ranked tables link full runs only; the matrix holds no paper's number
            for css in ("table.leaders", "table.matrix"):
                linked = {
                    Path(a.get_attribute("href")).stem
                    for a in driver.find_elements(By.CSS_SELECTOR, f"{css} a[href*='runs/']")
                }
                assert linked and not linked & {safe_name(p) for p in previews}, (where, css)
            header = [_text(th) for th in driver.find_elements(By.CSS_SELECTOR, "table.matrix th")]
            assert not set(PREVIEW_ONLY) & set(header) and not any("published" in h for h in header), header
            cells = {_text(td) for td in driver.find_elements(By.CSS_SELECTOR, "table.matrix td")}
            assert any(c.endswith(f" · {MODEL}") for c in cells), "the model beside the full LLM run's score"
            for row in driver.find_elements(By.CSS_SELECTOR, "table.previews tbody tr"):
                text = _text(row)
                assert not any(mark in text for mark in MARKS), f"{where}: a preview marked: {text}"
                assert MODEL in text, f"{where}: a preview's model: {text}"
            driver.save_screenshot(str(shots / f"static-index-{width}.png"))
            driver.execute_script("document.getElementById('previews').scrollIntoView()")
            driver.save_screenshot(str(shots / f"static-previews-{width}.png"))
        driver.set_window_size(1400, 1000)
        driver.get((site / "tasks" / "drugbank_s1.html").as_uri())  # previews only, many published numbers
        assert _short_rows(driver, "table.published-table", "drugbank_s1's published table") > 20
        assert not any(m in _text(driver.find_element(By.TAG_NAME, "body")) for m in ("☆", "★", "≈"))
        driver.save_screenshot(str(shots / "static-task-drugbank_s1-1400.png"))
    finally:
        driver.quit()


def _app() -> Path:
    import ddibench.leaderboard

    return Path(ddibench.leaderboard.__file__).parent / "app.py"


@needs_chromium
def test_streamlit_board_reads_like_a_leaderboard_at_1400_and_400_px(
    store: Path, previews: set[str], shots: Path, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By

    from ddibench.commands.board import streamlit_command

    port = free_port()
    server = subprocess.Popen(
        streamlit_command(_app(), port),
        env={**os.environ, "DDIBENCH_BOARD": str(store)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    driver = None
    tables = "[data-testid='stTable'] table"
    try:
        driver = chrome(tmp_path / "chrome")
        deadline = time.time() + 100
        body = lambda: _text(driver.find_element(By.TAG_NAME, "body"))  # noqa: E731
        for width in WIDTHS:
            driver.set_window_size(width, 1000)
            open_when_up(driver, f"http://127.0.0.1:{port}/", deadline)
            _wait(
                driver,
                lambda: "Tasks × systems" in body() and driver.find_elements(By.CSS_SELECTOR, tables),
                deadline,
                "the matrix",
            )
            time.sleep(1)  # the rest of the tab
            where = f"Streamlit at {width} px"
            matrix = driver.find_elements(By.CSS_SELECTOR, tables)[0]
            assert _short_rows(driver, tables, where, LINE_PX) == 1 + 2
            _no_sideways_scroll(driver, where)
            text = body()
            assert not any(system in text for system in PREVIEW_ONLY), f"{where}: a preview shown by default"
            assert len(driver.find_elements(By.CSS_SELECTOR, tables)) == 1  # and no table of previews
            header = [_text(th) for th in matrix.find_elements(By.CSS_SELECTOR, "thead th")]
            assert not any("published" in h for h in header), header
            assert f"· {MODEL}" in _text(matrix), f"{where}: the model beside the full LLM run's score"
            driver.save_screenshot(str(shots / f"streamlit-{width}.png"))
        driver.set_window_size(1400, 1000)
        driver.find_element(By.XPATH, "//label[contains(normalize-space(.), 'show previews')]").click()
        _wait(driver, lambda: len(driver.find_elements(By.CSS_SELECTOR, tables)) == 2, deadline, "the previews")
        matrix, shown = driver.find_elements(By.CSS_SELECTOR, tables)
        assert not any(system in _text(matrix) for system in PREVIEW_ONLY), "a preview in the ranked matrix"
        rows = shown.find_elements(By.CSS_SELECTOR, "tbody tr")
        assert len(rows) == len(previews) and {_text(r).split()[-1] for r in rows} == previews
        for row in rows:
            text = _text(row)
            assert not any(mark in text for mark in MARKS), f"a preview marked: {text}"
            assert MODEL in text, f"a preview's model: {text}"
        for width in WIDTHS:
            driver.set_window_size(width, 1000)
            time.sleep(1)
            _short_rows(driver, tables, f"Streamlit with previews at {width} px")
            _no_sideways_scroll(driver, f"Streamlit with previews at {width} px")
            heading = driver.find_element(By.XPATH, "//h3[contains(., 'Previews')]")
            driver.execute_script("arguments[0].scrollIntoView()", heading)
            driver.save_screenshot(str(shots / f"streamlit-previews-{width}.png"))
    finally:
        if driver is not None:
            driver.quit()
        server.terminate()
        server.wait(timeout=20)
