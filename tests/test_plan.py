"""``ddibench run --plan`` and the progress counting: a plan that runs nothing and names the work a run does
(checked against a real run on the loopback stub server), bars that count only work done and never pass
100%, and the ``next:`` line every run ends with."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from ddibench.commands.common import LineProgress, Tally
from ddibench.errors import ConfigError
from ddibench.profiles import get_profile
from ddibench.system import TrainingProgress

CBR_PREVIEW = ["run", "-s", "cbr-ddi", "-t", "drugbank_s2", "--limit", "3"]


def _phase_line(out: str, name: str) -> str:
    return next(line for line in out.splitlines() if line.startswith(name))


def test_plan_names_the_phases_and_the_task_budget_epochs_and_runs_nothing(
    cli, tmp_path: Path, fresh_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("torch", reason="cbr-ddi needs the 'ml' extra")
    from ddibench.llm import LLMPool
    from ddibench.systems.emergnn import EmerGNNSystem

    def forbidden(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("--plan started a model or trained")

    monkeypatch.setattr(LLMPool, "start", forbidden)
    monkeypatch.setattr(EmerGNNSystem, "prepare", forbidden)
    monkeypatch.setattr("ddibench.runner.plan.other_work", lambda: 0.1)  # an idle machine: the idle rate is quoted
    runs = tmp_path / "runs"
    code, out, err = cli(*CBR_PREVIEW, "--plan", "--runs-dir", str(runs))
    assert code == 0, err
    cpu = get_profile("cpu")
    epochs = cpu.budget_for("emergnn", "drugbank_s2")["max_epochs"]
    assert epochs != cpu.budget_for("emergnn")["max_epochs"]  # the task's own budget, not the profile's default
    gnn = _phase_line(out, "training the GNN module (EmerGNN)")
    assert f" {epochs} " in gnn and "min" in gnn
    insights = _phase_line(out, "writing case insights").split()
    assert insights[insights.index("describer") + 1] == str(cpu.budget_for("cbr-ddi")["repository_size"])
    described = _phase_line(out, "describing every drug (the GNN module's features)").split()
    assert described[described.index("describer") + 1] == "1,710"  # the catalogue, before the GNN module trains
    for phase in ("refining cases: answers", "answering queries"):
        assert _phase_line(out, phase)
    assert "describing case drugs" not in out and "describing query drugs" not in out  # all described before
    assert "embedded:smollm2-135m-instruct" in out and "377 prompt" in out and "ENVIRONMENT.md" in out
    assert "characters / 4" in out and "total:" in out
    assert not runs.exists(), "--plan wrote a run directory"
    assert not (fresh_cache / "llm-cache.sqlite").exists()
    # the parsed KG may be kept (data, as the pinned files are); nothing trained or built by the system is
    built = {p.name for p in (fresh_cache / "artifacts").iterdir()} if (fresh_cache / "artifacts").exists() else set()
    assert built <= {"hetionet"}, built


@pytest.mark.parametrize("features", ["descriptions", "morgan"])
def test_the_plan_counts_the_calls_a_real_run_makes(
    cli, stub, tmp_path: Path, fresh_cache: Path, features: str
) -> None:
    pytest.importorskip("torch", reason="cbr-ddi needs the 'ml' extra")
    pytest.importorskip("sentence_transformers", reason="cbr-ddi needs the 'embed' extra")
    from ddibench.llm import parse_model_options
    from ddibench.runner.forecast import forecast
    from ddibench.runner.plan import RunRequest

    model = f"vllm:stub-model@{stub.base_url}"
    config = {
        "repository_size": 8,
        "refine_cases": 3,
        "lambda_valid_pairs": 4,
        "min_per_class": 1,
        "gnn": {"max_epochs": 1, "train_pairs_per_epoch": 128, "valid_pairs": 64},
        "gnn_features": features,
    }
    request = RunRequest(
        task="drugbank_s2", system="cbr-ddi", models=parse_model_options([model]), limit=2, config=config
    )
    planned = forecast(request)
    by_name = {c.phase.name: c.phase for c in planned.phases}
    assert by_name["training the GNN module (EmerGNN)"].epochs == 1
    assert by_name["writing case insights"].calls == 8 and by_name["refining cases: answers"].calls == 3
    assert planned.unpriced and planned.usd is None  # no price is known for the stub, so no dollars are made up
    args = ["-C", "repository_size=8", "-C", "refine_cases=3", "-C", "lambda_valid_pairs=4", "-C", "min_per_class=1"]
    args += ["-C", "gnn=" + json.dumps(config["gnn"]), "-C", f"gnn_features={features}"]
    code, out, err = cli(*CBR_PREVIEW[:-1], "2", "-m", model, *args, "--run-dir", str(tmp_path / "run"))
    assert code == 0, err
    session = json.loads((tmp_path / "run" / "sessions.jsonl").read_text().splitlines()[-1])
    usage = session["llm_usage"]
    wrong = json.loads((tmp_path / "run" / "results.json").read_text())["system_info"]["repository"]["refinement"]
    assert usage["generator"]["calls"] == planned.calls("generator")  # refinement answers and queries
    rewrites = by_name["refining cases: rewrites"]
    assert rewrites.upper_bound and wrong["wrong"] <= rewrites.calls
    # descriptions and insights exactly as planned, plus one rewrite per case the refinement answered wrongly
    assert usage["describer"]["calls"] == planned.calls("describer") - rewrites.calls + wrong["wrong"]
    assert out.strip().splitlines()[-1].startswith("next: drop --limit 2")
    again = {c.phase.name: c for c in forecast(request).phases}["training the GNN module (EmerGNN)"]
    if features == "morgan":
        assert again.seconds == 0 and "already trained" in again.phase.note  # the run's GNN is found in the cache
    else:  # its key holds the hash of features the plan cannot make (they need the describer): it says so
        assert again.seconds and "they are made in the run" in again.phase.note
    assert "qwen2.5-coder" not in out.strip().splitlines()[-1]  # not the embedded small model: no reader advice


def test_a_tally_keeps_cache_hits_apart_and_never_passes_100_percent() -> None:
    tally = Tally(10, started=0.0)
    tally.add(4, cached=True)
    tally.add(2)
    assert tally.count() == "2/6 (33%), 4 from cache"
    assert tally.eta(now=10.0) is None  # two items of real work: no ETA yet
    tally.add(1)
    assert tally.eta(now=30.0) == pytest.approx(30.0)  # 3 done in 30 s, 3 to go
    tally.add(9)  # more than the total said: it grows
    assert tally.total == 16 and tally.count() == "12/12 (100%), 4 from cache"
    assert Tally(None).count() == "0 done"


def test_line_progress_counts_cached_items_apart() -> None:
    from rich.console import Console

    buffer = io.StringIO()
    bar = LineProgress(Console(file=buffer, width=200), every=3600.0).task("describing drugs", 110)
    bar.advance(30, cached=True)
    for _ in range(11):
        bar.advance()
    bar.close()
    line = buffer.getvalue().strip()
    assert line.startswith("describing drugs: 11/80 (14%), 30 from cache") and "ETA" in line


class _Recorder:
    """A Progress that records, after every change, the bar's count and total."""

    def __init__(self) -> None:
        self.seen: list[tuple[int, int]] = []
        self.done, self.total = 0, 0

    def task(self, description: str, total: int | None) -> _Recorder:
        self.total = total or 0
        return self

    def note(self, message: str) -> None:
        pass

    def advance(self, n: int = 1, *, cached: bool = False) -> None:
        self.done += n
        self.seen.append((self.done, self.total))

    def update(self, *, total: int | None = None, description: str | None = None) -> None:
        self.total = total if total is not None else self.total
        self.seen.append((self.done, self.total))

    def close(self) -> None:
        pass


def test_training_progress_grows_its_total_when_epochs_run_longer_than_declared() -> None:
    """EmerGNN sizes its bar from the first epoch's pairs; later epochs resample and may be longer (the issue's
    '9511/8400' and '36/30 (120%)'): the count never passes the total, and the bar ends full."""
    shown = _Recorder()
    bar = TrainingProgress(shown, "toy", max_epochs=3, steps_per_epoch=10, metric="macro-F1")
    for epoch, steps in enumerate((10, 13, 12), 1):
        for _ in range(steps):
            bar.step()
        bar.epoch_done(epoch, 1.0)
    bar.finish(3)
    assert all(done <= total for done, total in shown.seen), [s for s in shown.seen if s[0] > s[1]]
    assert shown.done == shown.total


def test_next_line_suits_the_run() -> None:
    from ddibench.commands.run import next_line
    from ddibench.llm import parse_model_options
    from ddibench.runner.plan import RunRequest

    preview = next_line(RunRequest(task="drugbank_s2", system="cbr-ddi", limit=3), Path("runs/x"))
    assert preview.startswith("next: drop --limit 3") and "-m embedded:qwen2.5-coder-1.5b" in preview
    assert len(preview.splitlines()) <= 2
    full = next_line(
        RunRequest(task="drugbank_s2", system="zero-shot", models=parse_model_options(["openai:gpt-4o-mini"])),
        Path("runs/x"),
    )
    assert "--limit" not in full and "qwen" not in full and "ddibench submit runs/x" in full
    quick = next_line(RunRequest(task="drugbank_s2", system="cbr-ddi", profile="quick", limit=3), Path("r"))
    assert "--profile cpu" in quick


def test_a_busy_machine_gives_the_embedded_server_the_free_cpus_and_the_plan_its_measured_rate(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """llama.cpp's threads wait on each other: on 2 cores under a load of 9, SmolLM2 generated 15-18 tok/s with one
    thread and 0.8-1.4 with two. The server gets the CPUs other work leaves free; the plan times it at that rate."""
    import os

    import ddibench.runner.plan as plan_module
    from ddibench.llm import ModelSpec
    from ddibench.runner.forecast import THROUGHPUT, THROUGHPUT_BUSY, busy, throughput_of
    from ddibench.runner.plan import embedded_threads

    small = ModelSpec.parse("embedded:smollm2-135m-instruct")
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.setattr(plan_module, "other_work", lambda: 9.04)
    assert embedded_threads() == 1 and busy() == "other work keeps 9.0 of 2 CPUs busy"
    assert throughput_of(small, busy=True) == THROUGHPUT_BUSY["smollm2-135m-instruct"]
    monkeypatch.setattr(plan_module, "other_work", lambda: 0.2)
    assert embedded_threads() == 2 and busy() == ""
    assert throughput_of(small) == THROUGHPUT["smollm2-135m-instruct"]
    monkeypatch.setattr(os, "cpu_count", lambda: 16)
    monkeypatch.setattr(plan_module, "other_work", lambda: 3.2)
    assert embedded_threads() == 13
    monkeypatch.setenv("DDIBENCH_THREADS", "2")  # set by hand: whatever the load
    assert embedded_threads() == 2
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.setenv("DDIBENCH_THREADS", "1")  # one thread by hand on an idle machine: fewer threads, not busy
    monkeypatch.setattr(plan_module, "other_work", lambda: 0.0)
    assert embedded_threads() == 1 and busy() == ""
    monkeypatch.setattr(plan_module, "other_work", lambda: 1.6)  # the same under load: busy
    assert embedded_threads() == 1 and busy() == "other work keeps 1.6 of 2 CPUs busy"
    monkeypatch.setenv("DDIBENCH_THREADS", "two")
    with pytest.raises(ConfigError, match="DDIBENCH_THREADS must be a positive whole number"):
        embedded_threads()


def test_other_work_counts_what_other_processes_do_now_not_this_process_or_a_finished_burst(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The server's threads follow the CPUs other processes keep busy now. This process spinning (its own start-up:
    loading the task's data) is not other work; another process spinning is; and the 1-minute load average, which
    still holds both after they stop (a pip install just before a first run), is not read."""
    import os
    import subprocess
    import sys
    import threading
    import time

    import ddibench.runner.plan as plan_module

    def measured() -> float:
        monkeypatch.setattr(plan_module, "_other_work", None)  # no measurement kept from before
        return plan_module.other_work()

    monkeypatch.setattr(os, "getloadavg", lambda: (5.0, 5.0, 5.0))  # a burst that has ended, still in the average
    monkeypatch.delenv("DDIBENCH_THREADS", raising=False)
    cpus = os.cpu_count() or 1
    baseline = measured()
    if baseline > cpus - 1.5:
        pytest.skip(f"other work keeps {baseline:.1f} of {cpus} CPUs busy: no CPU is free to measure one more")
    assert plan_module.embedded_threads() == cpus - round(baseline)  # not cpus - 5: the stale average is not read
    stop = threading.Event()
    spinner = threading.Thread(target=lambda: [None for _ in iter(stop.is_set, True)], daemon=True)
    spinner.start()
    try:
        time.sleep(0.1)
        assert measured() < baseline + 0.5  # this process's own work
    finally:
        stop.set()
        spinner.join()
    other = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.5)
        assert measured() > baseline + 0.5  # another process keeps a CPU busy
    finally:
        other.kill()
        other.wait()


def test_the_default_plan_is_one_call_per_item_and_a_model_free_system_plans_nothing() -> None:
    from ddibench.registry import get_task
    from ddibench.runner.forecast import forecast, render
    from ddibench.runner.plan import RunRequest

    planned = forecast(RunRequest(task="drugbank_s2", system="zero-shot", limit=5))
    (answering,) = [c.phase for c in planned.phases]
    assert answering.role == "generator" and answering.calls == 5
    assert answering.prompt_tokens > 5 * len(get_task("drugbank_s2").label_space)  # the options are in each prompt
    assert render(forecast(RunRequest(task="drugbank_s2", system="majority", limit=5)))[-1] == (
        "total: no training and no LLM calls"
    )


def test_a_line_progress_task_that_ends_on_a_periodic_line_is_reported_once() -> None:
    from rich.console import Console

    buffer = io.StringIO()
    bar = LineProgress(Console(file=buffer, width=200), every=0.0).task("writing case insights", 2)
    bar.advance()
    bar.advance()  # the periodic line says 2/2 (100%) ...
    bar.close()  # ... and the closing line would say the same
    lines = buffer.getvalue().splitlines()
    assert len(lines) == 2 and lines[-1].startswith("writing case insights: 2/2 (100%)")


def test_the_shipped_price_table_is_dated_and_sourced_and_ddibench_prices_overrides_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import re

    from ddibench.errors import ConfigError
    from ddibench.prices import load_prices, price_for, shipped_prices

    monkeypatch.delenv("DDIBENCH_PRICES", raising=False)
    shipped = shipped_prices()
    assert {"openai:gpt-4o-mini", "openai:gpt-4o", "openai:gpt-4.1-mini", "openai:gpt-4.1"} <= set(shipped)
    for model, price in shipped.items():
        assert price.source.startswith("https://") and re.fullmatch(r"\d{4}-\d\d-\d\d", price.read), model
        assert 0 < price.prompt <= price.completion < 1, model  # USD per 1,000 tokens, output dearer than input
    assert load_prices() == shipped
    # the format $DDIBENCH_PRICES has always had: a row replaces the shipped one, another adds a model
    path = tmp_path / "prices.json"
    path.write_text(
        json.dumps(
            {"openai:gpt-4o-mini": {"prompt": 1.0, "completion": 2.0}, "my-model": {"prompt": 0.5, "completion": 0.5}}
        )
    )
    monkeypatch.setenv("DDIBENCH_PRICES", str(path))
    prices = load_prices()
    assert (prices["openai:gpt-4o-mini"].prompt, prices["openai:gpt-4o-mini"].completion) == (1.0, 2.0)
    assert str(path) in prices["openai:gpt-4o-mini"].source and prices["openai:gpt-4.1"] == shipped["openai:gpt-4.1"]
    assert price_for("openai:gpt-4o-mini@https://api.openai.com/v1#json=schema", prices) == prices["openai:gpt-4o-mini"]
    assert price_for("vllm:my-model@http://127.0.0.1:8000/v1", prices) == prices["my-model"]
    assert price_for("vllm:gpt-4o-mini@http://127.0.0.1:8000/v1", shipped) is None  # a served model is not OpenAI's
    path.write_text(json.dumps({"openai:gpt-4o": {"prompt": "cheap"}}))
    with pytest.raises(ConfigError, match="openai:gpt-4o"):
        load_prices()


def test_the_plan_prices_an_api_model_from_the_shipped_table_and_times_it_at_a_declared_throughput(
    cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ddibench.prices import shipped_prices
    from ddibench.runner.forecast import dollars

    monkeypatch.delenv("DDIBENCH_PRICES", raising=False)
    args = ["run", "-s", "zero-shot", "-t", "drugbank_s2", "-m", "openai:gpt-4o-mini", "--limit", "7", "--plan"]
    code, out, err = cli(*args)
    assert code == 0, err
    calls, prompt, generated = (int(x.replace(",", "")) for x in _phase_line(out, "answering").split()[2:5])
    assert calls == 7
    price = shipped_prices()["openai:gpt-4o-mini"]
    usd = (prompt * price.prompt + generated * price.completion) / 1000
    total = _phase_line(out, "total:")
    assert total.endswith(f", {dollars(usd)}") and dollars(usd) != "$0.00"
    cited = _phase_line(out, "price: openai:gpt-4o-mini")
    assert price.source in cited and f"read {price.read}" in cited
    assert "not timed" in out and "GPU hours" not in out  # the cpu profile; no rate known for the API model
    # a declared rate times its calls; on a GPU profile the plan gives GPU hours (hours x accelerators)
    code, out, err = cli(*args, "--throughput", "1000,50", "-p", "2xa100-80g")
    assert code == 0, err
    seconds = prompt / 1000 + generated / 50
    assert "declared with --throughput" in out and "not timed" not in out
    assert f"GPU hours: about {seconds / 3600 * 2:,.2f} ({round(seconds)} s x 2 accelerators" in out
    code, out, err = cli(*args, "-p", "2xa100-80g")  # no rate declared: no figure, never 'about 0.00'
    assert code == 0, err
    assert "GPU hours: unknown" in out and "GPU hours: about" not in out
    code, _, err = cli(*args[:-1], "--throughput", "1000")
    assert code != 0 and "--plan" in err
    code, _, err = cli(*args, "--throughput", "fast")
    assert code != 0 and "PROMPT,GEN" in err
