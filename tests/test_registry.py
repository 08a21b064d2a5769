"""Outside packages register systems through the same entry-point group as the reference systems."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from ddibench import registry
from ddibench.errors import ConfigError, UnknownNameError

PLUGIN = '''
from collections import Counter
from ddibench import BaseSystem, Prediction, SystemConfig


class Config(SystemConfig):
    fallback: int = 0


class Majority(BaseSystem):
    """Predicts the most frequent training label: a floor every real system must beat."""

    name = "my-majority"
    version = "0.1"
    description = "most frequent training label"
    Config = Config
    families = ("drugbank_ddi",)
    batch_size = 256

    async def prepare(self, view, ctx):
        self.label = Counter(s.target for s in view.train).most_common(1)[0][0]

    async def predict(self, samples, ctx):
        return [Prediction(sample_id=s.id, label=self.label) for s in samples]
'''


@pytest.fixture
def plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    pkg = tmp_path / "site"
    (pkg / "ddibench_majority").mkdir(parents=True)
    (pkg / "ddibench_majority" / "__init__.py").write_text(PLUGIN)
    dist = pkg / "ddibench_majority-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: ddibench-majority\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[ddibench.systems]\nmy-majority = ddibench_majority:Majority\n")
    monkeypatch.syspath_prepend(str(pkg))
    registry.clear_caches()
    yield dist
    registry.clear_caches()
    sys.modules.pop("ddibench_majority", None)


def test_outside_system_is_discovered_and_runs(plugin: Path, cli, tmp_path: Path) -> None:
    assert "my-majority" in registry.system_names()
    code, out, _ = cli("list", "systems")
    assert code == 0 and "my-majority" in out and "zero-shot" in out
    code, _, err = cli("run", "-s", "my-majority", "-t", "drugbank_s2", "--run-dir", str(tmp_path / "run"))
    assert code == 0, err
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results["manifest"]["system"]["name"] == "my-majority"
    accuracy = results["evaluation"]["metrics"]["accuracy"]["value"]
    assert 0.05 < accuracy < 0.6


def test_conflicting_registrations_are_refused(plugin: Path) -> None:
    (plugin / "entry_points.txt").write_text(
        "[ddibench.systems]\nmy-majority = ddibench_majority:Majority\nmlp = ddibench_majority:Majority\n"
    )
    registry.clear_caches()
    with pytest.raises(ConfigError, match="system 'mlp' is registered twice"):
        registry.system_names()


def test_unknown_names_suggest_close_ones() -> None:
    with pytest.raises(UnknownNameError, match="did you mean 'mlp'"):
        registry.get_system_class("mpl")
    with pytest.raises(UnknownNameError, match="did you mean 'drugbank_s1_emergnn'"):
        registry.get_task("drugbank_s1_emergn")


def test_a_class_that_lacks_a_protocol_member_is_refused_at_once(plugin: Path) -> None:
    """The runner uses every member of the System protocol without a default: a class without one of them is
    refused when it is looked up, naming the member, not mid-run."""
    from ddibench.system import SYSTEM_MEMBERS

    module = plugin.parent / "ddibench_majority" / "__init__.py"
    module.write_text(
        module.read_text()
        + """

class Bare:
    name, version, description = "my-bare", "0.1", "no base class"
    llm_roles, batch_size, max_concurrency = (), 1, 1

    def supports(self, task):
        return True

    async def prepare(self, view, ctx):
        pass

    async def predict(self, samples, ctx):
        return []
"""
    )
    (plugin / "entry_points.txt").write_text("[ddibench.systems]\nmy-bare = ddibench_majority:Bare\n")
    registry.clear_caches()
    sys.modules.pop("ddibench_majority", None)
    assert {"run_info", "deviations"} <= set(SYSTEM_MEMBERS)
    with pytest.raises(ConfigError, match="lacks 'run_info'"):
        registry.get_system_class("my-bare")


FLOOR = """

class Floor(Majority):
    name = "my-floor"
    variant_keys = ("fallback",)  # a run with another fallback is shown apart
    constant_answer = True  # one answer for every sample, on purpose
"""


def test_an_outside_systems_bundle_gives_the_same_board_row_where_the_system_is_not_installed(
    plugin: Path, cli, tmp_path: Path
) -> None:
    """A run records its variant and whether its system answers the same for every sample by design, and the board
    reads both from the bundle: built where the system is not installed, it shows the run as it does where the
    system is (under its variant, its collapsed answers not flagged), not as a plain run of a collapsed system."""
    duckdb = pytest.importorskip("duckdb", reason="the board needs the 'board' extra")
    from ddibench.results.store import add_run
    from ddibench.submission import submit, verify

    module = plugin.parent / "ddibench_majority" / "__init__.py"
    module.write_text(module.read_text() + FLOOR)
    (plugin / "entry_points.txt").write_text("[ddibench.systems]\nmy-floor = ddibench_majority:Floor\n")
    registry.clear_caches()
    sys.modules.pop("ddibench_majority", None)
    run_dir = tmp_path / "run"
    args = ("run", "-s", "my-floor", "-t", "drugbank_s2", "--limit", "60", "-C", "fallback=3")
    code, _, err = cli(*args, "--run-dir", str(run_dir))
    assert code == 0, err
    card = json.loads((run_dir / "results.json").read_text())["manifest"]["system"]
    assert (card["variant"], card["constant_answer"]) == ("fallback=3", True)
    bundle = submit(run_dir, tmp_path / "run.tar.gz")

    def board_row(store: Path) -> tuple:
        verdict = verify(bundle)
        assert verdict.evaluation.answers is not None and verdict.evaluation.answers.collapsed
        add_run(store, verdict)
        with duckdb.connect(str(store), read_only=True) as conn:
            return conn.execute("SELECT * EXCLUDE (added) FROM runs").fetchone()

    installed = board_row(tmp_path / "installed.duckdb")
    (plugin / "entry_points.txt").write_text("[ddibench.systems]\n")  # uninstalled
    registry.clear_caches()
    with pytest.raises(UnknownNameError):
        registry.get_system_class("my-floor")
    assert board_row(tmp_path / "elsewhere.duckdb") == installed
    with duckdb.connect(str(tmp_path / "elsewhere.duckdb"), read_only=True) as conn:
        assert conn.execute("SELECT variant, collapsed FROM runs").fetchone() == ("fallback=3", False)


def test_every_task_declares_the_answer_its_evaluator_scores() -> None:
    """What a task declares about its answer (systems read it) agrees with what its evaluator scores: one label or
    yes/no for a classification, k labels for a ranking (the same k), text for a text or probe scorer."""
    scored_by = {"label": "classification", "yes_no": "classification", "top_k": "ranking", "text": "text"}
    for name in registry.task_names():
        task = registry.get_task(name)
        answer, evaluator = task.answer, task.evaluator()
        if answer.kind == "text":
            assert evaluator.kind in ("text", "probe"), name
        else:
            assert evaluator.kind == scored_by[answer.kind], name
        if answer.kind == "top_k":
            assert answer.k == evaluator.k, name  # type: ignore[attr-defined]
        if answer.kind == "yes_no":  # 0 is no, 1 is yes, whatever each answer's text says
            assert [label.name for label in task.label_space] == ["no", "yes"], name
        if answer.kind == "label":
            assert len(task.label_space) > 2 and task.input_kind == "drug_pair", name


def test_no_code_outside_a_familys_own_folder_decides_by_the_familys_name() -> None:
    """Systems and the core read a task's declared answer, never its family's name: outside tasks/, a family's name
    (a constant of ddibench.families, or the name itself in quotes beside the word family) appears only where a
    system declares the families whose data it is written for (``families = (...)``)."""
    import re

    from ddibench import families

    names = [value for key, value in vars(families).items() if key.isupper()]
    constant = re.compile(r"\bfamilies\.[A-Z_]+\b")
    literal = re.compile(r"""\bfamil(y|ies)\b[^#\n]*?(==|!=|\bin\b|=)\s*\(?\s*["'](""" + "|".join(names) + r""")["']""")
    declaration = re.compile(r"^\s*families(: ClassVar\[.*\])? = \(families\.[A-Z_]+(, families\.[A-Z_]+)*,?\)$")

    def decides_by_name(line: str) -> bool:
        return bool(literal.search(line) or (constant.search(line) and not declaration.match(line)))

    # the rule bites on the comparisons it replaced, and lets a declaration through
    assert decides_by_name("        self.multilabel = view.task.family == families.DRUG_TARGETS")
    assert decides_by_name('    if family == "toxicity":')
    assert decides_by_name("FAMILIES = (families.TOXICITY, families.DRUG_TARGETS)")
    assert not decides_by_name("    families = (families.DRUGBANK_DDI, families.TWOSIDES)")
    root = Path(__file__).resolve().parent.parent
    found = [
        f"{p.relative_to(root)}:{i}: {line.strip()}"
        for folder in ("ddibench", "systems", "leaderboard", "scripts")
        for p in (root / folder).rglob("*.py")
        if p != root / "ddibench" / "families.py"
        for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
        if decides_by_name(line)
    ]
    assert found == [], found


def test_a_task_that_does_not_declare_its_answer_is_refused(plugin: Path) -> None:
    """Systems decide what to answer from ``task.answer``: a plug-in task without one is refused when the tasks are
    discovered, naming the task and the fix, not mid-run."""
    module = plugin.parent / "ddibench_majority" / "__init__.py"
    module.write_text(
        module.read_text()
        + """

from ddibench import Task


class Unanswered(Task):
    name, version, family, setting, title = "my_unanswered", "0.1", "mine", "S0", "no answer declared"
    sources, label_space = (), None

    def build(self):
        raise NotImplementedError

    def evaluator(self):
        raise NotImplementedError


TASKS = {"my_unanswered": Unanswered()}
"""
    )
    (plugin / "entry_points.txt").write_text("[ddibench.tasks]\nmine = ddibench_majority:TASKS\n")
    registry.clear_caches()
    sys.modules.pop("ddibench_majority", None)
    with pytest.raises(ConfigError, match="task 'my_unanswered' .* does not declare how it is answered"):
        registry.task_names()


def test_a_tasks_toml_table_with_an_unknown_or_missing_key_fails_the_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each family's tasks.toml is validated against its spec: a misspelt key is an error naming the table and the
    key, not a silently ignored setting."""
    from ddibench.errors import DataError
    from ddibench.task import FamilySpec, load_task_specs
    from ddibench.tasks import drugbank
    from ddibench.tasks.drugbank import SPECS, DrugBankSpec
    from ddibench.tasks.molecular import FAMILY_SPEC, AnySpec, MolecularFamilySpec
    from ddibench.tasks.molecular.targets import TargetSpec

    assert SPECS["drugbank_s2"].unseen["test"] == (0, 0, 1992)
    assert isinstance(registry.get_task("targets_inhibit").spec, TargetSpec) and FAMILY_SPEC.target_polarity[
        "neither"
    ] == ("inverse agonist",)
    good = (Path(drugbank.__file__).parent / "tasks.toml").read_text(encoding="utf-8")
    package = tmp_path / "planted_family"
    package.mkdir()
    (package / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    cases = [
        (
            good.replace("sizes = { train = 99283, valid = 1606", "size = { train = 99283, valid = 1606", 1),
            r"\[tasks.drugbank_s2\] (size: Extra inputs|sizes: Field required)",
        ),
        (
            good.replace('setting = "S2"', 'setting = "S3"', 1),
            r"\[tasks.drugbank_s2\] setting: Input should be 'S0', 'S1' or 'S2'",
        ),
        (good.replace("recipe_version = 1", "recipe_version = 'one'", 1), r"\[family\] recipe_version"),
    ]
    for text, message in cases:
        (package / "tasks.toml").write_text(text, encoding="utf-8")
        with pytest.raises(DataError, match=message):
            load_task_specs("planted_family", FamilySpec, DrugBankSpec)
    (package / "tasks.toml").write_text(
        '[family]\ntarget_polarity = {}\n[tasks.x]\nkind = "toxcity"\n', encoding="utf-8"
    )
    with pytest.raises(DataError, match=r"\[tasks.x\]: Input tag 'toxcity' found using 'kind'"):
        load_task_specs("planted_family", MolecularFamilySpec, AnySpec)


# -- where an adapter's code comes from -------------------------------------------------------------------


def _git(where: Path, *args: str) -> str:
    import subprocess

    return subprocess.run(
        ["git", "-C", str(where), "-c", "user.name=t", "-c", "user.email=t@t", *args],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()


def test_a_folder_a_checkout_merely_contains_is_not_that_checkout(tmp_path: Path) -> None:
    """An adapter installed into a venv inside a git checkout (the README's .venv sits in the ddibench clone) is
    not that checkout's code; a tracked folder is, and its dirty flag covers its own files only."""
    repo = tmp_path / "repo"
    (repo / "pkg").mkdir(parents=True)
    (repo / ".gitignore").write_text(".venv/\n")
    (repo / "pkg" / "a.py").write_text("x = 1\n")
    (repo / "other.txt").write_text("1\n")
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "one")
    venv_module = repo / ".venv" / "lib" / "adapter"
    venv_module.mkdir(parents=True)
    (venv_module / "__init__.py").write_text("y = 2\n")
    assert registry._git_checkout(venv_module) is None
    (repo / "other.txt").write_text("2\n")  # a change elsewhere in the checkout
    tracked = registry._git_checkout(repo / "pkg")
    assert tracked is not None and tracked["commit"] == _git(repo, "rev-parse", "HEAD") and not tracked["dirty"]
    (repo / "pkg" / "a.py").write_text("x = 3\n")
    assert registry._git_checkout(repo / "pkg")["dirty"]


def test_an_adapter_installed_from_a_local_folder_is_recorded_as_local_and_verify_says_so(tmp_path: Path) -> None:
    from ddibench.submission.checks import LOCAL_ADAPTER, describe_provenance, is_local

    class Dist:  # what importlib.metadata gives for 'pip install -e ./my-adapter' (PEP 610 dir_info)
        def read_text(self, name: str) -> str | None:
            folder = (tmp_path / "my-adapter").as_uri()
            return json.dumps({"url": folder, "dir_info": {"editable": True}}) if name == "direct_url.json" else None

    local = registry._local_install(Dist(), None)
    assert local == {"source": f"a local folder {tmp_path / 'my-adapter'}", "local": True}
    provenance = {"entry_point": "mine:System", "distribution": "mine", "version": "0.1", **local}
    text = describe_provenance(provenance)
    assert is_local(provenance) and "(local, not public)" in text and "ddibench" not in text
    assert "public source and commit" in LOCAL_ADAPTER and "board publish --results" in LOCAL_ADAPTER
    public = {
        "entry_point": "mine:System",
        "distribution": "mine",
        "source": "https://example.org/m.git",
        "commit": "ab",
    }
    assert not is_local(public)


def test_a_reference_system_records_the_ddibench_release_it_ships_with() -> None:
    provenance = registry.system_provenance("majority")
    assert provenance["distribution"] == "ddibench" and provenance["source"].startswith("ddibench ")
    assert "local checkout" not in provenance["source"] and str(Path.cwd()) not in provenance["source"]
