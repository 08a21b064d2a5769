"""A bundle's own words on the board: a forged bundle of a system this installation does not register
(verify checks its identity by hash only) writes markdown emphasis, links, remote images, a bare URL
and a script into every free-text field it has: its system's name, description, deviations and
configuration, the task card's deviations, the adapter's source, the hardware it declares, its traces.

The static site, the markdown table and the Streamlit app (its markdown, and the page a real headless
Chromium renders) must show all of it as literal text, never as emphasis, a link or an image; mark
those fields as the submitter's own words; and label the system 'unregistered' wherever it appears."""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

pytest.importorskip("duckdb", reason="the board needs the 'board' extra")

from conftest import reseal_bundle  # noqa: E402

from ddibench.leaderboard.data import UNCHECKED, UNREGISTERED  # noqa: E402

FORGED = "**Reproduced by the ddibench maintainers**"
LINK = "[the authors' code](https://evil.example/phish)"
IMAGE = "![verified](https://evil.example/badge.png)"
BARE = "https://evil.example/bare and www.evil.example"
SCRIPT = "<script>alert('hostile')</script>"
WORDS = f"{FORGED} {LINK} {IMAGE} {BARE} {SCRIPT}"
SYSTEM = f"forged {FORGED} {LINK}"  # the name too is the bundle's: no ddibench registers it


def _forge(bundle: Path, out: Path) -> Path:
    """The bundle of a real run renamed to an outside system, with ``WORDS`` in every free-text field, its
    hashes and ids redone as a competent forger would: verify accepts it (its identity checked by hash only)."""
    from ddibench.hashing import config_hash
    from ddibench.submission import read_bundle

    members = read_bundle(bundle)
    run, results = json.loads(members["run.json"]), json.loads(members["results.json"])
    config = {"note": WORDS}
    run["system"].update(name=SYSTEM, config=config)
    run["system"]["config_hash"] = config_hash(
        {"system": SYSTEM, "version": run["system"]["version"], "config": config}
    )
    results["system"] = SYSTEM
    manifest = results["manifest"]
    manifest["system"].update(
        name=SYSTEM,
        config=config,
        config_hash=run["system"]["config_hash"],
        description=f"description {WORDS}",
        deviations=[f"system deviation {WORDS}"],
        provenance={"entry_point": "forged", "source": LINK, "note": WORDS},
    )
    manifest["task"]["deviations"] = [*manifest["task"].get("deviations", []), f"task deviation {WORDS}"]
    manifest["profile"]["detected"] = {**manifest["profile"].get("detected", {}), "cpu": f"hardware {WORDS}"}
    return reseal_bundle(members, run, results, out, trace_note=f"trace {WORDS}")


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A store holding a real majority run on drugbank_s2 and the forged bundle made from it; the forged run's id."""
    from ddibench.cli import main
    from ddibench.results.store import add_run
    from ddibench.submission import submit, verify

    root = tmp_path_factory.mktemp("board-text")
    try:
        main(["run", "-t", "drugbank_s2", "-s", "majority", "--run-dir", str(root / "majority")])
    except SystemExit as exc:
        assert exc.code in (0, None), exc.code
    real = submit(root / "majority", root / "majority.tar.gz")
    forged = verify(_forge(real, root / "forged.tar.gz"), keep_traces=True)
    assert forged.accepted and forged.tier == "recomputed", (
        forged.reasons
    )  # verify cannot tell: only the board's labels can
    assert any(name == "system" and "checked by hash only" in detail for name, _, detail in forged.checks)
    path = root / "board.duckdb"
    add_run(path, verify(real))
    add_run(path, forged)
    return path, forged.run.run_id


def _no_markup_from_the_bundle(page: str, where: str) -> None:
    """HTML (a page, or markdown rendered to HTML) carries no element the bundle's words could have made."""
    assert "<img" not in page and "<script" not in page, where
    assert not re.search(r"<a [^>]*href=\"[^\"]*evil\.example", page), where
    assert not re.search(r"<(strong|em)>[^<]*Reproduced by", page), where


def test_static_site_shows_the_bundles_words_as_text_marked_and_unregistered(
    store: tuple[Path, str], tmp_path: Path
) -> None:
    from ddibench.leaderboard.static import safe_name, write_site

    path, run_id = store
    site = tmp_path / "site"
    write_site(path, site)
    pages = {p.relative_to(site).as_posix(): p.read_text(encoding="utf-8") for p in site.rglob("*.html")}
    for name, page in pages.items():
        _no_markup_from_the_bundle(page, name)
        assert "<strong>" not in page and "<em>" not in page, name
    run_page = pages[f"runs/{safe_name(run_id)}.html"]
    system_page = pages[f"systems/{safe_name(SYSTEM)}.html"]
    shown = html.escape(WORDS, quote=True)
    for field in ("description", "system deviation", "task deviation", "hardware", "trace"):
        assert f"{field} {shown}" in run_page, field
    assert (
        html.escape(LINK, quote=True) in run_page and html.escape(json.dumps({"note": WORDS}), quote=True) in run_page
    )
    # the words a submitter wrote sit beside the mark that says so; the system is labelled wherever it is named
    for field in ("description", "system deviation", "task deviation", "hardware"):
        assert re.search(
            re.escape(f"{field} {shown}") + r"[^<]*<span class=\"tag unchecked\">" + re.escape(UNCHECKED), run_page
        ), field
    label = f'<span class="tag unregistered">{UNREGISTERED}</span>'
    escaped_name = html.escape(SYSTEM, quote=True)
    for name in (
        "index.html",
        "tasks/drugbank_s2.html",
        f"runs/{safe_name(run_id)}.html",
        f"systems/{safe_name(SYSTEM)}.html",
    ):
        mentions = pages[name].count(f"{escaped_name}</a>") + pages[name].count(f"{escaped_name}</h1>")
        assert (
            mentions
            and pages[name].count(f"{escaped_name}</a> {label}") + pages[name].count(f"{escaped_name} {label}")
            >= mentions
        ), name
    assert "majority</a> " + label not in pages["index.html"]  # a registered system is not labelled
    assert f"System {escaped_name} {label}</h1>" in system_page


def test_markdown_table_escapes_the_bundles_words_and_labels_the_system(store: tuple[Path, str]) -> None:
    from markdown_it import MarkdownIt

    from ddibench.leaderboard.static import markdown_table, ranked_table

    path, _ = store
    table = markdown_table(path)
    outside_code = re.sub(r"(`+)(?!`).*?(?<!`)\1(?!`)", "", table)
    assert (
        "evil.example" in table and "evil.example" not in outside_code
    )  # no URL for GitHub to link: all in code spans
    rendered = MarkdownIt("commonmark").enable("table").render(table)
    _no_markup_from_the_bundle(rendered, "README table")
    assert (
        f"<code>{html.escape(SYSTEM, quote=False)}</code> ({UNREGISTERED})" in rendered
    )  # the name, as written, then the label
    assert "majority (unregistered)" not in rendered and "| majority |" in table
    # the README's compact table: the forged run ties the real one, and whichever is shown best is text too
    ranked = ranked_table(path)
    assert "evil.example" not in re.sub(r"(`+)(?!`).*?(?<!`)\1(?!`)", "", ranked)
    _no_markup_from_the_bundle(MarkdownIt("commonmark").enable("table").render(ranked), "README compact table")


def _app() -> str:
    import ddibench.leaderboard

    return str(Path(ddibench.leaderboard.__file__).parent / "app.py")


def _rendered_markdown(values: list[str]) -> str:
    from markdown_it import MarkdownIt

    return "".join(MarkdownIt("commonmark").enable("table").render(v) for v in values)


def test_app_markdown_shows_the_bundles_words_literally(
    store: tuple[Path, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Everything the app hands Streamlit's markdown renderer, rendered by a CommonMark renderer: no
    element from the bundle; the words as written; the marks and the label."""
    pytest.importorskip("streamlit", reason="the board needs the 'board' extra")
    from streamlit.testing.v1 import AppTest

    path, run_id = store
    monkeypatch.setenv("DDIBENCH_BOARD", str(path))
    at = AppTest.from_file(_app(), default_timeout=120).run()
    assert not at.exception
    matrix = at.table[0].value
    headers = _rendered_markdown([str(c) for c in matrix.columns])
    _no_markup_from_the_bundle(headers, "matrix")
    assert f"<code>{html.escape(SYSTEM, quote=False)}</code> ({UNREGISTERED})" in headers
    ranked, systems = (frame.value for frame in at.dataframe)  # plain text: no markdown at all
    assert f"{SYSTEM} ({UNREGISTERED})" in set(systems["system"]) and "majority" in set(systems["system"])
    assert f"{SYSTEM} ({UNREGISTERED})" in set(ranked["system"])
    at.query_params["run"] = run_id
    at.session_state["view"] = "Run details"
    at.run()
    assert not at.exception
    sources = [m.value for m in at.markdown] + [i.value for i in at.info] + [w.value for w in at.warning]
    page = _rendered_markdown(sources)
    _no_markup_from_the_bundle(page, "run view")
    texts = [t.value for t in at.text]
    for field in ("description", "system deviation", "task deviation"):
        assert f"{field} {WORDS}" in texts, field  # st.text: no markdown at all
    for heading in ("Description", "Deviations"):
        assert f"**{heading}** *({UNCHECKED})*" in sources, heading
    for field in ("Adapter source", "Hardware profile", "Configuration"):
        line = next((s for s in sources if s.startswith(f"**{field}:**")), "")
        assert line.endswith(f"*({UNCHECKED})*"), (field, line)
    assert f"(detected: hardware {html.escape(WORDS, quote=False)})</code>" in page  # a code span: shown as written
    assert f"{UNREGISTERED}: its name and its words are the bundle's" in page


@pytest.mark.skipif(
    shutil.which("chromium") is None or shutil.which("chromedriver") is None,
    reason="needs Debian chromium and chromium-driver",
)
def test_app_in_a_real_browser_renders_no_emphasis_link_or_image_from_the_bundle(
    store: tuple[Path, str], tmp_path: Path
) -> None:
    from conftest import chrome, free_port, open_when_up
    from selenium.webdriver.common.by import By

    from ddibench.commands.board import streamlit_command

    path, run_id = store
    port = free_port()
    server = subprocess.Popen(
        streamlit_command(Path(_app()), port),
        env={**os.environ, "DDIBENCH_BOARD": str(path)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    driver = None

    def body_when(wanted: str, deadline: float) -> str:
        text = ""
        while time.time() < deadline:
            text = driver.find_element(By.TAG_NAME, "body").text
            if wanted in text:
                break
            time.sleep(0.5)
        return text

    def nothing_from_the_bundle() -> None:
        # read in one script: Streamlit redraws parts of the page meanwhile (an element found may go stale)
        images, links, emphasis = driver.execute_script(
            "const all = (css) => [...document.querySelectorAll(css)];"
            "return [all('img').map((e) => e.getAttribute('src') || ''),"
            " all(\"a[href*='evil.example']\").map((a) => a.parentElement.outerHTML.slice(0, 600)),"
            " all('strong, em, b, i').map((e) => e.textContent)];"
        )
        assert not [src for src in images if "evil.example" in src]
        assert not links, links
        assert not [text for text in emphasis if "Reproduced by" in text]

    try:
        driver = chrome(tmp_path / "chrome")
        deadline = time.time() + 120
        open_when_up(driver, f"http://127.0.0.1:{port}/?run={run_id}", deadline)
        text = body_when("system deviation", deadline)
        assert f"system deviation {WORDS}" in text and f"task deviation {WORDS}" in text
        assert f"description {WORDS}" in text and f"hardware {WORDS}" in text and f"({UNCHECKED})" in text
        assert f"{UNREGISTERED}: its name and its words are the bundle's" in text
        nothing_from_the_bundle()
        driver.find_element(By.XPATH, "//*[normalize-space(text())='Matrix']").click()
        text = body_when("Tasks × systems", deadline)
        text = body_when(f"{SYSTEM} ({UNREGISTERED})", deadline)
        assert f"{SYSTEM} ({UNREGISTERED})" in text  # the matrix's column: literal, labelled
        nothing_from_the_bundle()
    finally:
        if driver is not None:
            driver.quit()
        server.terminate()
        server.wait(timeout=20)
