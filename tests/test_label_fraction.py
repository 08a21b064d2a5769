"""``train_fraction`` of the trained molecular baselines (morgan-sklearn, gin): the CLADD paper fine-tunes its
trained baselines with 10% of the training labels, and these options declare that setting.

On the real tasks: how many molecules a fraction keeps (rounded half up, per label on yes/no tasks, at
least one of each), the same subset for the same seed and another for another seed, the default's
config hash and answers unchanged (shipped runs still verify), a fitted run's record of what it trained on,
and bad fractions refused in one line.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

import pytest

from ddibench.registry import get_system_class, get_task
from ddibench.system import BaseSystem, system_config_hash
from ddibench.systems.fingerprint import MorganSklearnSystem, label_fraction
from ddibench.systems.gin import GINSystem

REPO = Path(__file__).resolve().parent.parent
SYSTEMS = ("morgan-sklearn", "gin")
CLASSES: dict[str, type[BaseSystem]] = {"morgan-sklearn": MorganSklearnSystem, "gin": GINSystem}


def expected_size(n: int, fraction: float) -> int:
    """The rule, written out again: fraction * n rounded half up, at least one."""
    return max(1, math.floor(fraction * n + 0.5))


def journal(run_dir: Path) -> dict[str, dict]:
    return {
        (p := json.loads(line)["prediction"])["sample_id"]: p
        for line in (run_dir / "journal.jsonl").read_text().splitlines()
        if line.strip()
    }


def test_a_tenth_of_a_yes_no_split_keeps_a_tenth_of_each_label() -> None:
    train = get_task("tox_carcinogens").load().splits["train"]
    counts = Counter(s.label for s in train)
    subset = label_fraction(train, 0.1, 0, stratify=True)
    kept = Counter(s.label for s in subset)
    assert kept == {label: expected_size(n, 0.1) for label, n in counts.items()}
    assert set(kept) == {0, 1} and len(subset) == 20  # 157 no -> 16, 36 yes -> 4, of 193
    ids = [s.id for s in train]
    assert [s.id for s in subset] == [i for i in ids if i in {s.id for s in subset}]  # the split's order
    # the smallest fraction still keeps one molecule of each label
    assert Counter(s.label for s in label_fraction(train, 1e-6, 0, stratify=True)) == {0: 1, 1: 1}


def test_a_tenth_of_a_target_split_is_a_plain_random_subset() -> None:
    train = get_task("targets_activate").load().splits["train"]
    subset = label_fraction(train, 0.1, 0, stratify=False)
    assert len(subset) == expected_size(len(train), 0.1) == 63
    assert len({s.id for s in subset}) == 63 and {s.id for s in subset} <= {s.id for s in train}
    assert len(label_fraction(train, 1e-6, 0, stratify=False)) == 1


def test_the_subset_is_fixed_by_the_seed_and_the_split() -> None:
    train = get_task("tox_herg").load().splits["train"]
    once = [s.id for s in label_fraction(train, 0.1, 0, stratify=True)]
    assert once == [s.id for s in label_fraction(train, 0.1, 0, stratify=True)]
    assert once != [s.id for s in label_fraction(train, 0.1, 1, stratify=True)]
    assert once != [s.id for s in label_fraction(train, 0.1, 0, stratify=True, split="valid")]
    assert label_fraction(train, 1.0, 0, stratify=True) == list(train)


@pytest.mark.parametrize("name", SYSTEMS)
def test_the_default_leaves_config_hashes_and_shipped_runs_as_they_were(name: str) -> None:
    cls = CLASSES[name]
    assert get_system_class(name) is cls
    default, explicit = cls.build({}), cls.build({"train_fraction": 1.0})
    assert system_config_hash(default) == system_config_hash(explicit)
    assert "train_fraction" not in default.config.model_dump(mode="json")
    assert cls.variant(explicit.config.model_dump(mode="json")) == ""
    tenth = cls.build({"train_fraction": 0.1})
    assert system_config_hash(tenth) != system_config_hash(default)
    assert cls.variant(tenth.config.model_dump(mode="json")) == "train_fraction=0.1"
    # every shipped run of the system: its recorded configuration is still the dump of itself (what verify
    # checks) and hashes to its recorded config hash
    runs = [r for r in json.loads((REPO / "results" / "index.json").read_text())["runs"] if r["system"] == name]
    assert runs
    for run in runs:
        config = cls.Config.model_validate(run["config"])
        assert config.model_dump(mode="json") == run["config"], run["task"]
        assert system_config_hash(cls(config)) == run["config_hash"], run["task"]


def test_morgan_sklearn_fits_a_tenth_the_same_way_twice_and_the_default_as_before(cli, tmp_path: Path) -> None:
    def run(name: str, *options: str) -> tuple[dict, dict]:
        run_dir = tmp_path / name
        args = ("run", "-s", "morgan-sklearn", "-t", "tox_carcinogens", "--run-dir", str(run_dir))
        code, out, err = cli(*args, "-C", "n_estimators=20", *options)
        assert code == 0, out + err
        return json.loads((run_dir / "results.json").read_text()), journal(run_dir)

    first, answers = run("tenth", "-C", "train_fraction=0.1")
    info = first["system_info"]
    assert (info["n_train"], info["n_train_available"], info["train_fraction"]) == (20, 193, 0.1)
    assert info["positives"] == 4
    assert first["manifest"]["system"]["config"]["train_fraction"] == 0.1
    again, answers_again = run("tenth-again", "-C", "train_fraction=0.1")
    assert again["manifest"]["system"]["config_hash"] == first["manifest"]["system"]["config_hash"]
    assert answers_again == answers
    # 1.0 is the default: the same config hash, the same model and the same answers as a run without it
    plain, plain_answers = run("plain")
    whole, whole_answers = run("whole", "-C", "train_fraction=1.0")
    assert whole["manifest"]["system"]["config_hash"] == plain["manifest"]["system"]["config_hash"]
    assert whole_answers == plain_answers and whole["system_info"]["loaded_from_cache"] is True
    assert plain["system_info"]["n_train"] == 193 and "train_fraction" not in plain["system_info"]


def test_gin_cuts_training_and_validation_to_the_fraction(cli, tmp_path: Path) -> None:
    run_dir = tmp_path / "gin"
    args = ("run", "-s", "gin", "-t", "tox_carcinogens", "--run-dir", str(run_dir))
    code, out, err = cli(*args, "-C", "train_fraction=0.1", "-C", "max_epochs=1", "-C", "hidden=16")
    assert code == 0, out + err
    info = json.loads((run_dir / "results.json").read_text())["system_info"]
    splits = get_task("tox_carcinogens").load().splits
    for split in ("train", "valid"):
        counts = Counter(s.label for s in splits[split])
        assert info[f"n_{split}_available"] == len(splits[split])
        assert info[f"n_{split}"] == sum(expected_size(n, 0.1) for n in counts.values())
    assert info["train_fraction"] == 0.1 and info["epochs_run"] == 1


@pytest.mark.parametrize("value", ["0", "1.5"])
@pytest.mark.parametrize("name", SYSTEMS)
def test_a_fraction_outside_0_to_1_is_refused_in_one_line(cli, tmp_path: Path, name: str, value: str) -> None:
    run_dir = tmp_path / "refused"
    code, out, err = cli(
        "run", "-s", name, "-t", "tox_carcinogens", "--run-dir", str(run_dir), "-C", f"train_fraction={value}"
    )
    assert code == 2 and not run_dir.exists()
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "train_fraction" in lines[0] and "Traceback" not in out + err, out + err
