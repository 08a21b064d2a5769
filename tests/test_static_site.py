"""The static leaderboard: pages written from a results store of real runs, opened from the file system
in a real headless Chromium (no server, no network), and the markdown tables (the full one and the README's)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

pytest.importorskip("duckdb", reason="the board needs the 'board' extra")
pytest.importorskip("torch", reason="the runs here use the mlp system ('ml' extra)")

from conftest import reseal_bundle  # noqa: E402

from ddibench.data.published import load_published  # noqa: E402
from ddibench.leaderboard.static import markdown_table, ranked_table, safe_name, write_site  # noqa: E402
from ddibench.results.store import add_run  # noqa: E402
from ddibench.submission import read_bundle, submit, verify  # noqa: E402

SCRIPT = "<script>alert('hostile')</script>"
EVIL = f"evil{SCRIPT}"  # an outside system's name: this installation does not register it, so verify cannot refuse it
TINY = ["-C", "max_epochs=1", "-C", "max_train=1500", "-C", "hidden=[32]", "-C", "patience=1"]


def _hostile(bundle: Path, out: Path) -> Path:
    """The bundle of a run under another system's name, with markup in its system card and its traces, every
    hash and id redone as a competent forger would (bundles are data: text, never code)."""
    from ddibench.hashing import config_hash

    members = read_bundle(bundle)
    run, results = json.loads(members["run.json"]), json.loads(members["results.json"])
    run["system"]["name"] = results["system"] = EVIL
    run["system"]["config_hash"] = config_hash(
        {"system": EVIL, "version": run["system"]["version"], "config": run["system"]["config"]}
    )
    results["manifest"]["system"].update(  # an outside system that declares no constant answer (majority's card does)
        name=EVIL, config_hash=run["system"]["config_hash"], deviations=[f"card note {SCRIPT}"], constant_answer=False
    )
    return reseal_bundle(members, run, results, out, trace_note=f"trace {SCRIPT}")


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory: pytest.TempPathFactory) -> list:
    """Real runs on drugbank_s2: the majority floor and a small MLP (full split), a zero-shot preview
    (--limit 20, stub LLM server), and a hostile bundle of an outside system; each verified."""
    from ddibench.cli import main
    from ddibench.llm.stub import StubConfig, running_stub

    root = tmp_path_factory.mktemp("site-runs")

    def run(name: str, *args: str) -> Path:
        try:
            main(["run", "-t", "drugbank_s2", "--run-dir", str(root / name), *args])
        except SystemExit as exc:
            assert exc.code in (0, None), exc.code
        return submit(root / name, root / f"{name}.tar.gz")

    bundles = [run("majority", "-s", "majority"), run("mlp", "-s", "mlp", *TINY)]
    with running_stub(StubConfig()) as stub:
        bundles.append(run("preview", "-s", "zero-shot", "--limit", "20", "-m", f"vllm:stub-model@{stub.base_url}"))
    bundles.append(_hostile(bundles[0], root / "hostile.tar.gz"))
    return [verify(bundle, keep_traces=True) for bundle in bundles]


def _store(path: Path, verdicts: list) -> Path:
    for verdict in verdicts:
        add_run(path, verdict)  # the preview too: rejected only for --limit, shown apart
    return path


@pytest.fixture(scope="module")
def store(verdicts, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _store(tmp_path_factory.mktemp("site-store") / "board.duckdb", verdicts)


@pytest.fixture(scope="module")
def site(store: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site-out") / "site"
    summary = write_site(store, out)
    assert (summary.runs, summary.tasks, summary.systems) == (4, 1, 4)
    return out


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory):
    if shutil.which("chromium") is None or shutil.which("chromedriver") is None:
        pytest.skip("needs Debian chromium and chromium-driver")
    from conftest import chrome

    driver = chrome(tmp_path_factory.mktemp("chrome"))
    yield driver
    driver.quit()


def _text(driver) -> str:
    from selenium.webdriver.common.by import By

    return driver.find_element(By.TAG_NAME, "body").text


def _click(driver, text: str) -> None:
    """Follow the first link whose text is ``text`` (as a reader would), and wait for the next page."""
    from selenium.webdriver.common.by import By

    before = driver.current_url
    driver.find_element(By.LINK_TEXT, text).click()
    assert driver.current_url != before and driver.current_url.startswith("file://"), driver.current_url


def test_site_opens_from_the_file_system_and_links_its_pages(site: Path, browser) -> None:
    from selenium.webdriver.common.by import By

    browser.get((site / "index.html").as_uri())
    text = _text(browser)
    assert "4 runs · 1 task · 4 systems" in text
    header = [th.text for th in browser.find_elements(By.CSS_SELECTOR, "table.matrix th")]
    assert header == [
        "task",
        "metric",
        f"{EVIL} unregistered",
        "majority",
        "mlp",
        "floors",
    ]  # every full run's system; the papers' numbers in a table of their own
    row = [td.text for td in browser.find_elements(By.CSS_SELECTOR, "table.matrix tbody tr td")]
    assert row[0] == "drugbank_s2" and row[1] == "macro_f1"
    assert sum("★" in cell for cell in row) == 1 and all(
        re.fullmatch(r"[\d.]+ \[[\d.]+, [\d.]+\]( ★| ≈)?( ⚠)?", c) for c in row[2:5]
    )
    # the outside system answers one label for every pair (a copy of the majority run) and its card does not say it
    # does so by design: flagged; the majority floor's card says so, and it is not
    assert row[2].endswith(" ⚠") and not row[3].endswith(" ⚠") and not row[4].endswith(" ⚠")
    assert (
        len(row) == 6 and row[5].startswith("majority ") and " · random " in row[5]
    )  # the floors, in the metric's unit
    leaders = [td.text for td in browser.find_elements(By.CSS_SELECTOR, "table.leaders tbody td")]
    assert leaders[0] == "drugbank_s2" and "★" in leaders[3] and leaders[4] == "—"  # best run; no LLM, no model
    previews = [td.text for td in browser.find_elements(By.CSS_SELECTOR, "table.previews td")]
    assert (
        previews[1:4] == ["drugbank_s2", "zero-shot", "—"] and "stub-model" in previews[4] and previews[5] == "20"
    )  # apart, unranked; no variant

    _click(browser, "drugbank_s2")  # the task's page
    text = _text(browser)
    assert "Task drugbank_s2" in text and "Floors" in text and "Published not ranked" in text
    assert len(browser.find_elements(By.CSS_SELECTOR, "table.runs tbody tr")) == 4  # 3 full runs, 1 preview apart
    assert "★ best" in text and "best − this" in text and "a preview, never ranked" in text
    floors = [tr.text for tr in browser.find_elements(By.CSS_SELECTOR, "table.floors tbody tr")]
    assert len(floors) == 2 and floors[0].startswith("majority the most frequent label of the training split")
    published = [tr.text for tr in browser.find_elements(By.CSS_SELECTOR, "table.published-table tbody tr")]
    rows = [
        r for r in load_published()[0] if r.task == "drugbank_s2" and r.our_metric
    ]  # every metric of the task has runs here
    assert (
        len(published) == len(rows)
        and all(p.startswith("EmerGNN — ") for p in published[:3])
        and "46.3 ± 3.6" in published[1]
    )  # the papers' percent in the metric's unit, one row each: method, model, value, metric, paper, source
    assert any(p.startswith("CBR-DDI DeepSeek-V3 40.7 macro-F1 (%) cbr-ddi") for p in published), published
    paper = browser.find_element(By.CSS_SELECTOR, "table.published-table tbody tr td:nth-child(5) a")
    assert paper.text == "emergnn" and paper.get_attribute("href") == "https://arxiv.org/abs/2311.09261"

    mlp_run = browser.find_element(By.XPATH, "//tr[td/a[text()='mlp']]/td[1]/a").text
    _click(browser, mlp_run)  # a run's page
    text = _text(browser)
    for fact in (
        "Provenance",
        "data sha256",
        "config",
        "adapter source",
        "entry_point ddibench.systems.mlp:MLPSystem",
        "code",
        "ddibench",
        "trust tier",
        "recomputed",
        "profile",
        "cpu",
        "cost per item",
        "free (no LLM)",
        "card",
        "docs/systems/mlp.md",
    ):
        assert fact in text, fact
    assert [tr.text.split()[0] for tr in browser.find_elements(By.CSS_SELECTOR, "table tbody tr")] == [
        "accuracy",
        "macro-F1",
        "Cohen's",
    ]
    samples = browser.find_elements(By.CSS_SELECTOR, "section.sample")
    assert len(samples) == 5 and all(
        "gold:" in s.text and "prediction:" in s.text and "trace" in s.text for s in samples
    )

    _click(browser, "mlp")  # the system's page
    assert "System mlp" in _text(browser) and "docs/systems/mlp.md" in _text(browser)
    _click(browser, "ddibench leaderboard")
    assert browser.current_url == (site / "index.html").as_uri()
    published_link = next(a for a in browser.find_elements(By.TAG_NAME, "a") if a.text.endswith("for 1 task"))
    assert published_link.text == f"{len(rows)} numbers for 1 task"
    published_link.click()  # every published number of the board's tasks, apart
    assert len(browser.find_elements(By.CSS_SELECTOR, "table.published-table tbody tr")) == len(rows)


def test_every_link_resolves_and_nothing_loads_from_elsewhere(site: Path) -> None:
    pages = sorted(site.rglob("*.html"))
    assert len(pages) == 1 + 1 + 1 + 4 + 4  # index, the published numbers, a task, 4 runs, 4 systems
    for page in pages:
        html = page.read_text(encoding="utf-8")
        assert not re.search(r"<(script|link|img|iframe|object)\b", html), (
            page
        )  # no script, no stylesheet or font to fetch
        for href in re.findall(r'href="([^"]*)"', html):
            if not href.startswith(("https://", "http://")):
                assert (page.parent / href).resolve().is_file(), f"{page.name}: {href}"
    assert all(re.fullmatch(r"[a-z0-9_-]+\.html", p.name) for p in pages)  # names made from stored names are safe


def test_hostile_text_is_shown_as_text(site: Path, browser) -> None:
    """A system name, system card and trace holding a script tag are shown as written; nothing runs."""
    from selenium.common.exceptions import NoAlertPresentException
    from selenium.webdriver.common.by import By

    def shows_markup_as_text() -> str:
        assert not browser.find_elements(By.TAG_NAME, "script")
        with pytest.raises(NoAlertPresentException):
            browser.switch_to.alert.text  # noqa: B018 - reading it is the check
        return _text(browser)

    browser.get((site / "index.html").as_uri())
    assert EVIL in shows_markup_as_text()
    _click(browser, EVIL)
    assert f"System {EVIL}" in shows_markup_as_text()
    assert "no: an outside adapter" in _text(browser)
    run_id = browser.find_element(By.CSS_SELECTOR, "table.runs tbody tr td a").text
    _click(browser, run_id)
    text = shows_markup_as_text()
    assert f"card note {SCRIPT}" in text and f'"note": "trace {SCRIPT}"' in text
    assert safe_name(EVIL) != EVIL and (site / "systems" / f"{safe_name(EVIL)}.html").is_file()


def test_export_replaces_a_site_whole_or_leaves_it_alone(store: Path, site: Path, tmp_path: Path) -> None:
    from ddibench.errors import ConfigError

    out = tmp_path / "site"
    write_site(store, out)
    (out / "stale.html").write_text("from an earlier export")
    write_site(store, out)  # replaced whole: nothing of the earlier export stays
    assert not (out / "stale.html").exists() and (out / "index.html").is_file()
    before = sorted(p.relative_to(out) for p in out.rglob("*"))
    with pytest.raises(ConfigError, match="does not exist"):
        write_site(tmp_path / "missing.duckdb", out)  # a failed export ...
    assert sorted(p.relative_to(out) for p in out.rglob("*")) == before  # ... leaves the last site as it was
    assert sorted(p.name for p in tmp_path.iterdir()) == ["site"]  # and no half-written directory beside it
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("a user's file")
    with pytest.raises(ConfigError, match="is not a site ddibench wrote"):
        write_site(store, mine)  # never deletes a directory it did not write
    assert (mine / "notes.txt").read_text() == "a user's file"


def test_markdown_tables_are_byte_stable_and_complete(store: Path, verdicts, tmp_path: Path) -> None:
    text = markdown_table(store)
    assert markdown_table(store) == text
    # the same runs added in the other order: the same store content, the same bytes
    reversed_store = _store(tmp_path / "reversed.duckdb", list(reversed(verdicts)))
    assert markdown_table(reversed_store) == text
    # the README's compact table: one line for the task, its best full run; the only LLM run is a preview, never in it
    compact = ranked_table(store)
    assert ranked_table(store) == compact == ranked_table(reversed_store)
    lines = compact.splitlines()
    assert lines[:2] == ["| task | metric | best | best LLM system | floors |", "| --- | --- | --- | --- | --- |"]
    rows = [line.split(" | ") for line in lines[2:] if line.startswith("| ")]
    assert len(rows) == 1 and rows[0][:2] == ["| drugbank_s2", "macro_f1"] and "★" in rows[0][2]
    assert rows[0][3] == "—" and rows[0][4].startswith("majority ") and " · random " in rows[0][4]
    assert "zero-shot" not in compact and "stub-model" not in compact and "(LLM)" not in compact
    lines = text.splitlines()
    assert (
        lines[0]
        == "| task | metric | `evil<script>alert('hostile')</script>` (unregistered) | majority | mlp | floors |"
    )  # shown as written
    assert lines[1] == "| --- | --- | --- | --- | --- | --- |"
    row = lines[2].split(" | ")
    assert row[0] == "| drugbank_s2" and row[1] == "macro_f1" and sum("★" in c for c in row) == 1
    assert row[5].startswith("majority ") and " · random " in row[5]
    assert "<script>" not in re.sub(r"`[^`]*`", "", text)  # a stored name never becomes markup: it sits in a code span
    preview = next(line for line in lines if line.startswith("| drugbank_s2 | zero-shot |"))
    assert (
        preview.startswith("| drugbank_s2 | zero-shot | — | `vllm:stub-model@http://127.0.0.1:")
        and "| 20 | macro_f1 | " in preview
    )
    assert "★" not in preview and "≈" not in preview  # the model as submitted sits in a code span: never a link
    assert not re.search(r"\d{4}-\d\d-\d\d", text)  # no date: regenerating it changes nothing


def _headers(page: str, css: str) -> list[str]:
    """The header texts of a page's table of class ``css`` (tags dropped, entities read)."""
    import html

    head = re.search(rf'<table class="{css}[^"]*"><thead><tr>(.*?)</tr></thead>', page)
    assert head, css
    return [html.unescape(re.sub(r"<[^>]+>", "", th)) for th in re.findall(r"<th>(.*?)</th>", head.group(1))]


def test_every_view_takes_its_columns_from_one_declaration(store: Path, site: Path) -> None:
    """The static site, the markdown tables and the app's frames show the columns leaderboard/columns.py declares,
    in its order and under its headers (the submitter's words marked as unchecked on the site)."""
    from ddibench.leaderboard import columns
    from ddibench.leaderboard import data as board

    def titled(shown) -> list[str]:  # noqa: ANN001
        return [c.header + (f" {board.UNCHECKED}" if c.shows == "words" else "") for c in shown]

    index = (site / "index.html").read_text(encoding="utf-8")
    assert _headers(index, "previews") == titled(columns.SITE_PREVIEWS)
    assert _headers(index, "leaders") == titled(columns.LEADERS)
    task_page = (site / "tasks" / "drugbank_s2.html").read_text(encoding="utf-8")
    runs = _headers(task_page, "runs")
    shown = [c for c in columns.SITE_RUNS if c.key not in columns.SITE_RUNS_ACROSS_TASKS and c is not columns.PROBE]
    at = shown.index(columns.METRICS)  # then a column per metric of the task, titled by the metric
    metrics = len(runs) - len(shown) + 1
    assert runs[:at] + runs[at + metrics :] == titled([c for c in shown if c is not columns.METRICS])
    assert metrics >= 1
    system_page = (site / "systems" / "majority.html").read_text(encoding="utf-8")
    across = [c for c in columns.SITE_RUNS if c not in (columns.METRICS, columns.PROBE)]
    assert _headers(system_page, "runs") == titled(across)
    published = (site / "published.html").read_text(encoding="utf-8")
    assert _headers(published, "published-table") == titled(columns.SITE_PUBLISHED)

    table = markdown_table(store).splitlines()
    previews = "| " + " | ".join(c.header for c in columns.MARKDOWN_PREVIEWS) + " |"
    assert previews in table and table[0].startswith(f"| {columns.TASK.header} | {columns.METRIC.header} |")
    assert ranked_table(store).splitlines()[0] == "| " + " | ".join(c.header for c in columns.COMPACT) + " |"

    frame = board.runs(store)
    assert list(columns.ranked(frame).columns) == [c.header for c in columns.RANKED]
    assert list(columns.preview_rows(frame).columns) == [c.header for c in columns.APP_PREVIEWS]
