"""A task family and a system from an outside package, registered through entry points only.

The package is written into a temporary directory with its own ``.dist-info`` (the way ``pip install``
leaves one), so discovery goes through ``importlib.metadata`` exactly as for a real install. Its task
has molecule inputs and a ranking evaluator; it runs, scores, is submitted and lands on the board —
and no file of the core is touched to get there. A second family (yes/no about a molecule) is answered by
the reference systems through what its task declares (``task.answer``): its system prompt, budget and
closing line reach the model, and a trained model learns its labels.
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

TOY_PACKAGE = '''
"""toyfam: a throwaway task family (molecules -> top-3 of six labels) and a system for it."""

from collections.abc import Sequence
from types import MappingProxyType

from ddibench import AnswerSpec, BaseSystem, Label, LabelSpace, Molecule, Prediction, Sample, SystemConfig, Task, TaskData
from ddibench.evaluation import RankingEvaluator
from ddibench.schema import sample_id

LABELS = LabelSpace(tuple(Label(id=i, template=name, name=name) for i, name in enumerate(
    ["oxygen", "alcohol", "nitrogen", "ring", "aromatic", "plain"])))
SMILES = ["CCO", "CCCO", "CCN", "CCCN", "c1ccccc1", "c1ccccc1O", "C1CCCCC1", "CC", "CCC", "CCCC", "OCCO", "NCCN",
          "c1ccncc1", "CC(=O)O", "CCOC", "C1CCNCC1", "CCCCC", "c1ccc(N)cc1", "OC1CCCCC1", "CCCCO", "CN", "CO",
          "c1ccoc1", "CCCCN", "C1CC1", "OCC(O)CO", "CCCCCC", "NC1CCCCC1", "c1ccc2ccccc2c1", "CCOCC"]


def gold(smiles):
    out = set()
    if "O" in smiles or "o" in smiles:
        out |= {0, 1} if "O" in smiles and "=" not in smiles else {0}
    if "N" in smiles or "n" in smiles:
        out.add(2)
    if "1" in smiles:
        out.add(3)
        if smiles[0] == "c":
            out.add(4)
    return tuple(sorted(out)) or (5,)


class ToyTask(Task):
    name = "toy_molecules"
    version = "0.1.0"
    family = "toy"
    setting = "molecule"
    title = "toy: which of six labels describe a small molecule (top 3)"
    input_kind = "molecule"
    answer = AnswerSpec(kind="top_k", k=3)

    @property
    def sources(self):
        return ()

    @property
    def label_space(self):
        return LABELS

    def evaluator(self):
        return RankingEvaluator(LABELS, k=self.answer.k, primary="recall")

    def build(self):
        samples = [
            Sample(id=sample_id("toy", s), input=Molecule(smiles=s, name=s), target=gold(s),
                   clusters=("ring" if "1" in s else "chain",), meta=MappingProxyType({}))
            for s in SMILES
        ]
        return TaskData(splits={"train": tuple(samples[:12]), "valid": tuple(samples[12:18]), "test": tuple(samples[18:])})


TASKS = {"toy_molecules": ToyTask()}


class RankerConfig(SystemConfig):
    k: int = 3


class ToyRanker(BaseSystem):
    """Ranks labels by simple SMILES features, then by training popularity."""

    name = "toy-ranker"
    version = "0.1.0"
    description = "SMILES features, then training popularity"
    Config = RankerConfig
    families = ("toy",)
    batch_size = 8

    async def prepare(self, view, ctx):
        counts = [0] * len(view.task.label_space)
        for s in view.train:
            for label in s.target:
                counts[label] += 1
        self.popular = sorted(range(len(counts)), key=lambda i: -counts[i])

    async def predict(self, samples: Sequence[Sample], ctx):
        out = []
        for s in samples:
            smi = s.input.smiles
            first = [i for i, hit in ((2, "N" in smi or "n" in smi), (0, "O" in smi), (3, "1" in smi)) if hit]
            ranked = list(dict.fromkeys(first + self.popular))[: self.config.k]
            out.append(Prediction(sample_id=s.id, ranked=ranked, trace={"features": first}))
        return out
'''

ENTRY_POINTS = """
[ddibench.tasks]
toy = toyfam:TASKS

[ddibench.systems]
toy-ranker = toyfam:ToyRanker
"""


TOY_SOURCE = "https://example.org/toyfam.git"
TOY_COMMIT = "0123456789abcdef0123456789abcdef01234567"


RING_PACKAGE = '''
"""ringfam: a throwaway yes/no family about molecules (does it have a ring?), with no system of its own."""

from types import MappingProxyType

from ddibench import AnswerSpec, Label, LabelSpace, Molecule, Sample, Task, TaskData
from ddibench.evaluation import ClassificationEvaluator
from ddibench.schema import sample_id

# train 12, valid 6, test 12; each split holds molecules with and without a ring
SMILES = ["CCO", "CCCO", "CCN", "CCCN", "c1ccccc1", "c1ccccc1O", "C1CCCCC1", "CC", "CCC", "CCCC", "OCCO", "NCCN",
          "c1ccncc1", "CC(=O)O", "CCOC", "C1CCNCC1", "CCCCC", "c1ccc(N)cc1", "OC1CCCCC1", "CCCCO", "CN", "CO",
          "c1ccoc1", "CCCCN", "C1CC1", "OCC(O)CO", "CCCCCC", "NC1CCCCC1", "c1ccc2ccccc2c1", "CCOCC"]
LABELS = LabelSpace((Label(0, "has no ring", "no"), Label(1, "has a ring", "yes")))
SYSTEM_PROMPT = 'You count rings. Answer with JSON only: {"answer": "yes"} or {"answer": "no"}.'


class RingTask(Task):
    name = "ring_molecules"
    version = "0.1.0"
    family = "rings"
    setting = "molecule"
    title = "rings: does the molecule have a ring? (yes/no)"
    input_kind = "molecule"
    cluster_unit = "molecules"
    resource_keys = ("instruction",)
    answer = AnswerSpec(kind="yes_no", max_tokens=17, system_prompt=SYSTEM_PROMPT, closing="Say yes or no.")

    @property
    def sources(self):
        return ()

    @property
    def label_space(self):
        return LABELS

    def evaluator(self):
        return ClassificationEvaluator(LABELS, breakdown_key=None, positive_label=1)

    def build(self):
        samples = [
            Sample(id=sample_id("ring", s), input=Molecule(smiles=s, name=s), target=int("1" in s), clusters=(s,),
                   meta=MappingProxyType({}))
            for s in SMILES
        ]
        return TaskData(
            splits={"train": tuple(samples[:12]), "valid": tuple(samples[12:18]), "test": tuple(samples[18:])},
            resources={"instruction": "Does the molecule contain a ring?"},
        )


TASKS = {"ring_molecules": RingTask()}
'''


def install(site: Path, package: str, source: str, entry_points: str) -> Path:
    """Write ``package`` with its ``.dist-info`` under ``site``, as ``pip install`` leaves one; its dist-info folder."""
    (site / package).mkdir(parents=True)
    (site / package / "__init__.py").write_text(textwrap.dedent(source))
    info = site / f"{package}-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {package}\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text(entry_points)
    return info


@pytest.fixture
def toy_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from ddibench import registry

    site = tmp_path / "site"
    info = install(site, "toyfam", TOY_PACKAGE, ENTRY_POINTS)
    # as 'pip install git+https://...@commit' records it (PEP 610): the adapter's provenance comes from here
    (info / "direct_url.json").write_text(
        json.dumps({"url": TOY_SOURCE, "vcs_info": {"vcs": "git", "commit_id": TOY_COMMIT}})
    )
    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    registry.clear_caches()
    yield site
    registry.clear_caches()
    sys.modules.pop("toyfam", None)


@pytest.fixture
def ring_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from ddibench import registry

    site = tmp_path / "ring-site"
    install(site, "ringfam", RING_PACKAGE, "[ddibench.tasks]\nrings = ringfam:TASKS\n")
    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    registry.clear_caches()
    yield site
    registry.clear_caches()
    sys.modules.pop("ringfam", None)


def test_an_outside_family_runs_scores_and_reaches_the_board(cli, toy_package: Path, tmp_path: Path) -> None:
    status_before = subprocess.run(
        ["git", "-C", str(REPO), "status", "--porcelain"], capture_output=True, text=True
    ).stdout

    code, out, err = cli("list", "tasks")
    assert code == 0 and "toy_molecules" in out, err
    code, out, err = cli("list", "systems")
    assert code == 0 and "toy-ranker" in out, err

    run_dir = tmp_path / "run"
    code, out, err = cli("run", "-s", "toy-ranker", "-t", "toy_molecules", "--run-dir", str(run_dir))
    assert code == 0, err
    assert "recall@3 (%) *" in out and "ceiling" in out
    results = json.loads((run_dir / "results.json").read_text())
    evaluation = results["evaluation"]
    assert evaluation["primary_metric"] == "recall@3" and evaluation["n"] == 12
    assert [m["name"] for m in evaluation["metric_specs"]] == ["precision@3", "recall@3", "ndcg@3"]

    # the metric is what a direct computation gives on the journalled predictions
    from ddibench.evaluation import ranking_scores
    from ddibench.registry import get_task

    task = get_task("toy_molecules")
    preds = {}
    for line in (run_dir / "journal.jsonl").read_text().splitlines():
        pred = json.loads(line)["prediction"]
        preds[pred["sample_id"]] = pred["ranked"]
    direct = [ranking_scores(set(s.target), preds[s.id], 3)["recall"] for s in task.load().split("test")]
    assert evaluation["metrics"]["recall@3"]["value"] == pytest.approx(sum(direct) / len(direct))

    bundle = tmp_path / "toy.tar.gz"
    code, _, err = cli("submit", str(run_dir), "--out", str(bundle))
    assert code == 0, err
    store = tmp_path / "board.duckdb"
    code, out, err = cli("board", "add", "--store", str(store), str(bundle))
    assert code == 0 and "added (recomputed)" in out, out + err

    from ddibench.leaderboard.data import cell, runs

    frame = runs(store)
    row = frame[frame["task"] == "toy_molecules"].iloc[0]
    assert (row["system"], row["primary_metric"], row["primary_unit"], bool(row["best"])) == (
        "toy-ranker",
        "recall@3",
        "fraction",
        True,
    )
    assert cell(row).startswith(f"{100 * row['primary_value']:.1f} [")

    # the generic floor serves the outside family too: the labels most frequent in its training targets
    code, out, err = cli(
        "run", "-s", "popularity", "-t", "toy_molecules", "-C", "k=3", "--run-dir", str(tmp_path / "popular")
    )
    assert code == 0, err
    popular = json.loads((tmp_path / "popular" / "results.json").read_text())
    train_counts: dict[int, int] = {}
    for s in task.load().split("train"):
        for label in s.target:
            train_counts[label] = train_counts.get(label, 0) + 1
    top = sorted(train_counts, key=lambda k: (-train_counts[k], k))[:3]
    assert popular["system_info"]["ranked"] == top
    expected = [ranking_scores(set(s.target), top, 3)["recall"] for s in task.load().split("test")]
    assert popular["evaluation"]["metrics"]["recall@3"]["value"] == pytest.approx(sum(expected) / len(expected))

    status_after = subprocess.run(
        ["git", "-C", str(REPO), "status", "--porcelain"], capture_output=True, text=True
    ).stdout
    assert status_after == status_before  # no file of the repository was written


def test_an_outside_adapter_is_traced_to_its_source_and_reproduced(cli, toy_package: Path, tmp_path: Path) -> None:
    """The route of an outside author: the bundle records where the adapter's code comes from; verify shows
    it; board add --reproduce stores the reproduced tier; without the adapter, --reproduce says where to get it."""
    import hashlib

    from ddibench import registry

    run_dir = tmp_path / "run"
    code, _, err = cli("run", "-s", "toy-ranker", "-t", "toy_molecules", "--run-dir", str(run_dir))
    assert code == 0, err
    provenance = json.loads((run_dir / "results.json").read_text())["manifest"]["system"]["provenance"]
    source_file = toy_package / "toyfam" / "__init__.py"
    files = hashlib.sha256(b"__init__.py\0" + hashlib.sha256(source_file.read_bytes()).digest()).hexdigest()
    assert provenance == {
        "entry_point": "toyfam:ToyRanker",
        "distribution": "toyfam",
        "version": "0.1.0",
        "source": TOY_SOURCE,
        "commit": TOY_COMMIT,
        "files_sha256": files,
    }
    bundle = tmp_path / "toy.tar.gz"
    code, _, err = cli("submit", str(run_dir), "--out", str(bundle))
    assert code == 0, err

    code, out, err = cli("verify", str(bundle))
    assert code == 0, out + err
    adapter = next(line for line in out.splitlines() if "adapter:" in line)
    assert (
        f"toyfam:ToyRanker from toyfam 0.1.0, {TOY_SOURCE} at commit {TOY_COMMIT[:12]}" in adapter
        and files[:12] in adapter
    )

    store = tmp_path / "board.duckdb"
    code, out, err = cli("board", "add", "--reproduce", "--store", str(store), str(bundle))
    assert code == 0 and "added (reproduced)" in out, out + err
    from ddibench.leaderboard.data import runs

    assert list(runs(store)["tier"]) == ["reproduced"]

    # the documented route onto the shipped board: a compact bundle, published into a results folder, checked
    compact, results = tmp_path / "toy-compact.tar.gz", tmp_path / "results"
    code, _, err = cli("submit", "--compact", str(run_dir), "--out", str(compact))
    assert code == 0, err
    code, out, err = cli("board", "publish", "--results", str(results), str(compact))
    assert code == 0 and "1 of 1 bundles published" in out, out + err
    [entry] = json.loads((results / "index.json").read_text())["runs"]
    assert entry["path"] == f"toy_molecules/toy-ranker/{entry['run_id']}.tar.gz" and entry["tier"] == "reproduced"
    assert f"{TOY_SOURCE} at commit {TOY_COMMIT[:12]}" in entry["adapter"]
    assert "toy-ranker" in (results / "README.md").read_text()
    code, out, err = cli("board", "check", "--results", str(results))
    assert code == 0 and "1 of 1 shipped bundles verified" in out, out + err

    # the adapter is uninstalled (its task stays): the bundle still verifies by hash, and a re-run names the source
    (toy_package / "toyfam-0.1.0.dist-info" / "entry_points.txt").write_text("[ddibench.tasks]\ntoy = toyfam:TASKS\n")
    registry.clear_caches()
    code, out, err = cli("verify", "--reproduce", str(bundle))
    assert code == 2, out + err
    assert (
        f"system 'toy-ranker' is not installed here, so it cannot be re-run; install its adapter: pip install 'git+{TOY_SOURCE}@{TOY_COMMIT}'"
        in err
    ), err
    code, out, err = cli("board", "add", "--reproduce", "--store", str(store), str(bundle))
    assert code == 1 and "not reproduced: system 'toy-ranker' is not installed here" in out, out + err
    code, out, err = cli("board", "check", "--results", str(results))  # its reproduced tier cannot be checked here
    assert code == 1 and f"pip install 'git+{TOY_SOURCE}@{TOY_COMMIT}'" in out, out + err


def test_an_outside_family_is_answered_through_what_its_task_declares(
    cli, stub, ring_package: Path, tmp_path: Path
) -> None:
    """No reference system names the outside family; zero-shot asks the model under the task's own system prompt,
    budget and closing line and reads the yes/no it declares, and morgan-sklearn trains a yes/no classifier on it."""
    from ddibench.registry import get_system_class, get_task

    task = get_task("ring_molecules")
    served = {
        name
        for name in ("zero-shot", "cladd", "morgan-sklearn", "gin", "majority", "popularity", "only-smiles")
        if get_system_class(name)().supports(task)
    }
    assert served == {"zero-shot", "cladd", "morgan-sklearn", "gin", "majority"}

    run_dir = tmp_path / "zero-shot"
    model = f"vllm:stub-model@{stub.base_url}"
    code, out, err = cli(
        "run", "-s", "zero-shot", "-t", "ring_molecules", "-m", model, "--run-dir", str(run_dir), "--no-cache"
    )
    assert code == 0, out + err
    preds = {
        json.loads(line)["prediction"]["sample_id"]: json.loads(line)["prediction"]
        for line in (run_dir / "journal.jsonl").read_text().splitlines()
    }
    assert len(preds) == 12 and all(p["valid"] and p["label"] in (0, 1) for p in preds.values()), preds
    asked = [r for r in stub.requests if r.get("messages")]
    assert len(asked) == 12
    for request in asked:
        system, user = request["messages"][0]["content"], request["messages"][-1]["content"]
        assert system == task.answer.system_prompt and request["max_tokens"] == 17
        assert user.endswith("Does the molecule contain a ring?\n\nSay yes or no.") and "SMILES: " in user
        fmt = request.get("response_format") or {}
        schema = fmt.get("schema") or (fmt.get("json_schema") or {}).get("schema")
        assert schema["properties"]["answer"]["enum"] == ["yes", "no"]
    trace = next(iter(preds.values()))["trace"]
    assert trace["max_tokens"] == 17 and trace["constrained"] is True

    run_dir = tmp_path / "morgan"
    code, out, err = cli(
        "run", "-s", "morgan-sklearn", "-t", "ring_molecules", "--config", "n_estimators=20", "--run-dir", str(run_dir)
    )
    assert code == 0, out + err
    results = json.loads((run_dir / "results.json").read_text())
    assert results["system_info"]["estimator"] == "rf"  # a yes/no answer: one classifier, not one model per label
    assert "auroc" in results["evaluation"]["metrics"] and results["evaluation"]["n"] == 12
