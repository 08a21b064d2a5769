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
    (plugin / "entry_points.txt").write_text("[ddibench.systems]\nmy-majority = ddibench_majority:Majority\nmlp = ddibench_majority:Majority\n")
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
    module.write_text(module.read_text() + '''

class Bare:
    name, version, description = "my-bare", "0.1", "no base class"
    llm_roles, batch_size, max_concurrency = (), 1, 1

    def supports(self, task):
        return True

    async def prepare(self, view, ctx):
        pass

    async def predict(self, samples, ctx):
        return []
''')
    (plugin / "entry_points.txt").write_text("[ddibench.systems]\nmy-bare = ddibench_majority:Bare\n")
    registry.clear_caches()
    sys.modules.pop("ddibench_majority", None)
    assert {"run_info", "deviations"} <= set(SYSTEM_MEMBERS)
    with pytest.raises(ConfigError, match="lacks 'run_info'"):
        registry.get_system_class("my-bare")
