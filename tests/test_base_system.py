"""What BaseSystem gives every system: counters the runner adds up, and the key its artifacts are stored under.

An artifact key must stay what it was byte for byte, or every model and index users have built is built again: the
keys below were computed with the code before ``BaseSystem.artifact_key`` existed (each system built its own)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from ddibench.artifacts import ArtifactStore
from ddibench.hashing import config_hash
from ddibench.profiles import get_profile
from ddibench.registry import get_system_class, get_task
from ddibench.system import Counters, RunContext, TrainingView


def test_counters_add_up_and_keep_the_order_names_were_first_counted() -> None:
    counters = Counters()
    counters.add("answered")
    counters.add("invalid", 2)
    counters.add("answered", 3)
    counters.set("index_built", 1)
    counters.set("index_built", 1)  # a flag: set, not added
    assert counters.as_dict() == {"answered": 4, "invalid": 2, "index_built": 1}
    assert list(counters.as_dict()) == ["answered", "invalid", "index_built"]
    assert counters["answered"] == 4 and counters["never"] == 0
    copy = counters.as_dict()
    copy["answered"] = 0  # a copy: the report cannot change the counts
    assert counters["answered"] == 4


def test_every_system_counts_into_its_own_counters() -> None:
    first, second = (get_system_class("zero-shot").build({}) for _ in range(2))
    first.count("answered")
    first.count("answered", 2)
    assert first.counters.as_dict() == {"answered": 3} and second.counters.as_dict() == {}
    assert first.run_info()["counters"] == {"answered": 3}


def test_an_artifact_key_names_the_system_its_configuration_the_data_and_what_else_it_was_built_from() -> None:
    task = get_task("drugbank_s1")
    system = get_system_class("mlp").build({})
    key = system.artifact_key(task, 0, training_code=1)
    assert key == {
        "system": "mlp",
        "version": system.version,
        "config_hash": key["config_hash"],
        "task": "drugbank_s1",
        "data_sha256": task.data_sha256,
        "seed": 0,
        "training_code": 1,
    }
    assert system.artifact_key(task, 0, training_code=1) == key  # the same inputs, the same key
    other = get_system_class("mlp").build({"max_epochs": 7})
    assert config_hash(other.artifact_key(task, 0, training_code=1)) != config_hash(key)
    # an artifact of a few options only: no configuration hash, and no seed where it does not depend on one
    narrow = system.artifact_key(task, whole_config=False, recipe=2)
    assert narrow == {
        "system": "mlp",
        "version": system.version,
        "task": "drugbank_s1",
        "data_sha256": task.data_sha256,
        "recipe": 2,
    }


def test_a_trained_model_is_stored_under_the_key_it_always_had(tmp_path: Path) -> None:
    """morgan-sklearn on tox_carcinogens (50 trees, seed 0) stores its model where every earlier version did."""
    task = get_task("tox_carcinogens")
    data = task.load()
    view = TrainingView(task, data.split("train"), data.split("valid"), data.resources)
    ctx = RunContext(task=task, profile=get_profile("cpu"), seed=0, artifacts=ArtifactStore(tmp_path))
    system = get_system_class("morgan-sklearn").build({"n_estimators": 50})
    asyncio.run(system.prepare(view, ctx))
    stored = [p.name for p in (tmp_path / "morgan-sklearn").iterdir() if not p.name.startswith(".")]
    assert stored == ["ee4ee9d48f2ed96033661930"]
