#!/usr/bin/env python3
"""Leaderboard cold start and first render with 10,000 runs in the results store.

A real run (zero-shot on the full DrugBank S2 test split against the loopback stub server) is
submitted, verified and added to a fresh store; its row is then cloned to ``--runs`` runs spread over
every registered task and system (random scores, tiers, models and costs) with ``--samples`` of its
per-sample rows each, so the store has the shape and size of a busy board. Then, side by side:

* reading the summaries the board starts from, against reading every per-sample row (what a board
  without precomputed summaries would load);
* the app's first full script run in a fresh Python process (Streamlit AppTest: imports, store read,
  matrix, charts, the run view), cold and again warm;
* with Debian ``chromium`` present: ``streamlit run`` serving the app and a headless Chromium loading
  it, from navigation until the matrix is on screen, next to the same for a one-table Streamlit app
  (the floor that Streamlit's own front end sets on this machine);
* adding one more run to the 10,000-run store (verify + insert + tie update).

    python benchmarks/board_load.py [--runs 10000] [--samples 200]

Needs $DDIBENCH_MIRROR (or network) for the DrugBank data. Prints seconds; asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

APP_RUN = """
import sys, time
t0 = time.perf_counter()
from streamlit.testing.v1 import AppTest
at = AppTest.from_file(sys.argv[1], default_timeout=600)
t1 = time.perf_counter()
at.run()
t2 = time.perf_counter()
assert not at.exception, at.exception
assert "★" in at.table[0].value.to_string()
print(f"{t1 - t0:.3f} {t2 - t1:.3f}")
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def template_run(root: Path) -> Path:
    from ddibench.cli import main
    from ddibench.llm.stub import StubConfig, running_stub
    from ddibench.submission import submit

    with running_stub(StubConfig()) as stub:
        try:
            main(
                [
                    "run",
                    "-s",
                    "zero-shot",
                    "-t",
                    "drugbank_s2",
                    "-m",
                    f"vllm:stub-model@{stub.base_url}",
                    "--concurrency",
                    "16",
                    "--run-dir",
                    str(root / "run"),
                ]
            )
        except SystemExit as exc:
            if exc.code not in (0, None):
                raise
    return submit(root / "run", root / "run.tar.gz")


def fill(store: Path, n_runs: int, n_samples: int) -> None:
    """Clone the template run into ``n_runs`` runs over every registered task and system."""
    import duckdb

    from ddibench.registry import get_task, system_names, task_names

    tasks = [(t.name, t.family, t.setting) for t in map(get_task, task_names())]
    systems = system_names()
    conn = duckdb.connect(str(store))
    (template,) = conn.execute("SELECT run_id FROM runs").fetchone()
    conn.execute(
        "CREATE TEMP TABLE tasks AS SELECT * FROM (VALUES "
        + ", ".join(f"({i}, '{n}', '{f}', '{s}')" for i, (n, f, s) in enumerate(tasks))
        + ") t(i, name, family, setting)"
    )
    conn.execute(
        "CREATE TEMP TABLE systems AS SELECT * FROM (VALUES "
        + ", ".join(f"({i}, '{n}')" for i, n in enumerate(systems))
        + ") s(i, name)"
    )
    conn.execute("SELECT setseed(0.42)")
    conn.execute(
        f"""INSERT INTO runs SELECT
            'bench-' || g.i, t.name, t.family, t.setting, s.name, r.system_version, r.config_hash,
            ['vllm:qwen2.5-7b', 'openai:gpt-4o-mini', 'embedded:smollm2', '—'][1 + g.i % 4], ['cpu', 'gpu-small', 'gpu-large'][1 + g.i % 3],
            ['self-reported', 'recomputed', 'reproduced'][1 + g.i % 3], g.i % 10 <> 0, r.n, r.primary_metric,
            g.v, g.v - 0.03, g.v + 0.03, r.metrics, random() * 5, random() * 20000, NULL,
            FALSE, random() < 0.2, NULL, NULL, NULL, r.manifest, r.reasons, r.added
        FROM (SELECT i, 0.2 + 0.7 * random() AS v FROM range({n_runs}) r(i)) g
        JOIN tasks t ON t.i = g.i % {len(tasks)}
        JOIN systems s ON s.i = (g.i // {len(tasks)}) % {len(systems)}
        CROSS JOIN (SELECT * FROM runs WHERE run_id = '{template}') r"""
    )
    conn.execute(
        f"""INSERT INTO samples SELECT 'bench-' || g.i, x.sample_id, x.input, x.gold, x.prediction, x.score, x.label, x.gold_label, x.valid, x.trace
        FROM range({n_runs}) g(i) CROSS JOIN (SELECT * FROM samples WHERE run_id = '{template}' ORDER BY sample_id LIMIT {n_samples}) x"""
    )
    conn.execute("UPDATE runs SET best = FALSE")
    conn.execute(
        "UPDATE runs SET best = TRUE WHERE run_id IN (SELECT arg_max(run_id, primary_value) FROM runs WHERE submittable GROUP BY task)"
    )
    conn.close()


def timed(fn):
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


def app_first_run(app: str, store: Path) -> tuple[float, float, float]:
    env = {**os.environ, "DDIBENCH_BOARD": str(store)}
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", APP_RUN, app], env=env, capture_output=True, text=True, check=True)
    total = time.perf_counter() - start
    imports, script = (float(x) for x in out.stdout.split()[-2:])
    return total, imports, script


def browser_first_render(app: str, store: Path, profile: Path) -> tuple[float, float, float] | None:
    if not (shutil.which("chromium") and shutil.which("chromedriver")):
        return None
    try:
        from selenium import webdriver
        from selenium.webdriver.common.by import By
    except ImportError:
        return None
    port = free_port()
    start = time.perf_counter()
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "streamlit",
            "run",
            app,
            "--server.port",
            str(port),
            "--server.headless",
            "true",
            "--browser.gatherUsageStats",
            "false",
        ],
        env={**os.environ, "DDIBENCH_BOARD": str(store)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium")
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-dev-shm-usage",
        "--window-size=1400,2000",
        f"--user-data-dir={profile}",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(
        service=webdriver.ChromeService(executable_path=shutil.which("chromedriver")), options=options
    )
    try:
        import urllib.request

        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=1).read()
                break
            except OSError:
                time.sleep(0.05)
        served = time.perf_counter() - start
        renders = []
        for _ in range(2):  # the first visit reads the store; the second finds it in Streamlit's cache
            begin = time.perf_counter()
            driver.get(f"http://127.0.0.1:{port}/")
            while "] ★" not in driver.find_element(By.TAG_NAME, "body").text:
                time.sleep(0.05)
            renders.append(time.perf_counter() - begin)
        return served, renders[0], renders[1]
    finally:
        driver.quit()
        server.terminate()
        server.wait(timeout=20)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--samples", type=int, default=200, help="per-sample rows stored for each cloned run")
    args = parser.parse_args()

    import duckdb

    import ddibench.leaderboard
    from ddibench.leaderboard import data as board
    from ddibench.results.store import add_run, update_ties
    from ddibench.submission import verify

    app = str(Path(ddibench.leaderboard.__file__).parent / "app.py")
    with tempfile.TemporaryDirectory(prefix="ddibench-board-bench-") as tmp:
        root = Path(tmp)
        os.environ.setdefault("DDIBENCH_CACHE", str(root / "cache"))
        bundle = template_run(root)
        store = root / "board.duckdb"
        seconds, verdict = timed(lambda: verify(bundle))
        print(
            f"verify the template bundle (1,992 samples, every metric and its bootstrap interval recomputed): {seconds:.2f} s"
        )
        add_run(store, verdict)
        seconds, _ = timed(lambda: fill(store, args.runs, args.samples))
        conn = duckdb.connect(str(store), read_only=True)
        n_runs, n_samples = conn.execute(
            "SELECT (SELECT count(*) FROM runs), (SELECT count(*) FROM samples)"
        ).fetchone()
        conn.close()
        print(
            f"store: {n_runs:,} runs, {n_samples:,} per-sample rows, {store.stat().st_size / 2**20:.0f} MiB (filled in {seconds:.1f} s)"
        )

        summary, frame = timed(lambda: board.runs(store))
        everything, rows = timed(
            lambda: duckdb.connect(str(store), read_only=True).execute("SELECT * FROM samples").df()
        )
        print(f"read the run summaries the board starts from: {summary:.3f} s ({len(frame):,} rows)")
        print(
            f"read every per-sample row instead:            {everything:.3f} s ({len(rows):,} rows; {everything / summary:.0f}x slower)"
        )
        matrix, table = timed(lambda: board.matrix(frame))
        print(
            f"task x system matrix from the summaries:      {matrix:.3f} s ({table.shape[0]} tasks x {table.shape[1] - 1} systems)"
        )

        for label in ("cold", "warm"):
            total, imports, script = app_first_run(app, store)
            print(
                f"app first render, fresh process ({label} OS cache): {total:.2f} s total = imports {imports:.2f} s + script {script:.2f} s + interpreter"
            )

        floor_app = root / "floor.py"
        floor_app.write_text('import streamlit as st\nst.table({"cell": ["0.5 [0.4, 0.6] ★"]})\n')
        for label, path in (("one-table Streamlit app", str(floor_app)), ("leaderboard, 10,001 runs", app)):
            browser = browser_first_render(path, store, root / f"chrome-{len(label)}")
            if browser is None:
                print("headless browser: skipped (needs Debian chromium, chromium-driver and selenium)")
                break
            served, first, second = browser
            print(
                f"{label}: server up {served:.2f} s; Chromium first render {first:.2f} s; second visit {second:.2f} s"
            )

        again = root / "again.tar.gz"
        shutil.copy(bundle, again)
        verdict = verify(again)
        seconds, _ = timed(lambda: add_run(store, verdict))
        print(
            f"add one more (verified) run to the {n_runs:,}-run store (insert, tie update against the best): {seconds:.2f} s"
        )
        conn = duckdb.connect(str(store))
        (n_task,) = conn.execute("SELECT count(*) FROM runs WHERE task = 'drugbank_s2'").fetchone()
        seconds, _ = timed(lambda: update_ties(conn, "drugbank_s2"))
        conn.close()
        print(
            f"full tie recomputation of drugbank_s2 ({n_task:,} runs, only needed when the best run changes): {seconds:.1f} s"
        )


if __name__ == "__main__":
    main()
