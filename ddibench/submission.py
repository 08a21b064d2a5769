"""Submission bundles: what a method author sends, and how ddibench checks it.

``ddibench submit RUN_DIR`` packs a finished run into one ``.tar.gz``: the per-sample predictions, the
run's identity and self-reported results, its sessions and LLM-judge scores, and ``bundle.json`` with
the sha256 of every member. ``ddibench verify BUNDLE`` treats the bundle as data, never code: members
are read from the archive in memory (regular files with expected names only), parsed as JSON, and
checked —

* every member's hash against ``bundle.json``;
* the task exists here with the same version and the same data sha256;
* the run evaluated the task's evaluation split, without ``--limit``, with every sample exactly once;
* as many seeds as the task asks for;
* the metrics, recomputed from the predictions against the task's own gold labels, equal the
  self-reported ones.

A passing bundle earns the trust tier ``recomputed`` (``self-reported`` is what it claimed);
``--reproduce`` re-runs the registered system with the bundle's configuration and, when its predictions
agree, raises it to ``reproduced``.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import io
import json
import re
import tarfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ddibench._version import __version__
from ddibench.errors import DataError, RunDirError
from ddibench.evaluation import EvaluationResult, Evaluator
from ddibench.hashing import sha256_text
from ddibench.metrics.bootstrap import BootstrapSpec
from ddibench.runner.records import (
    BUNDLE_FORMAT,
    BundleIndex,
    BundleSystem,
    Results,
    RunIdentity,
    read_identity,
    read_results,
)
from ddibench.schema import Prediction

MEMBER = re.compile(r"^(bundle\.json|run\.json|results\.json|sessions\.jsonl|predictions\.jsonl|scores/[A-Za-z0-9._-]+\.jsonl)$")
MAX_BUNDLE_BYTES = 512 * 1024 * 1024
TIERS = ("self-reported", "recomputed", "reproduced")


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def submit(run_dir: Path, out: Path | None = None) -> Path:
    """Pack a finished run into a bundle; returns its path."""
    results_file = run_dir / "results.json"
    if not results_file.exists():
        raise RunDirError(f"{run_dir} has no results.json", "finish the run with 'ddibench run' before submitting it")
    ident = read_identity(run_dir / "run.json")
    read_results(results_file)  # a damaged results.json is refused here, not by the verifier
    members: dict[str, bytes] = {
        "run.json": (run_dir / "run.json").read_bytes(),
        "results.json": results_file.read_bytes(),
        "sessions.jsonl": (run_dir / "sessions.jsonl").read_bytes() if (run_dir / "sessions.jsonl").exists() else b"",
    }
    predictions = []
    for line in (run_dir / "journal.jsonl").read_text(encoding="utf-8").splitlines():
        if line.strip():
            predictions.append(json.dumps(json.loads(line)["prediction"], ensure_ascii=False, separators=(",", ":")))
    members["predictions.jsonl"] = ("\n".join(predictions) + "\n").encode("utf-8")
    for path in sorted((run_dir / "scores").glob("*.jsonl")) if (run_dir / "scores").exists() else []:
        members[f"scores/{path.name}"] = path.read_bytes()
    bundle = BundleIndex(
        format=BUNDLE_FORMAT,
        created=dt.datetime.now(dt.timezone.utc).isoformat(),
        ddibench_version=__version__,
        run_id=ident.run_id,
        task=ident.task,
        system=BundleSystem(name=ident.system.name, version=ident.system.version, config_hash=ident.system.config_hash),
        hashes={name: _sha(data) for name, data in sorted(members.items())},
    )
    members["bundle.json"] = json.dumps(bundle.dump(), indent=2).encode("utf-8")
    out = out or run_dir.parent / f"{ident.task.name}--{ident.system.name}--{ident.run_id}.tar.gz"
    tmp = out.with_name(f".{out.name}.tmp")
    with tarfile.open(tmp, "w:gz") as tar:
        for name, data in sorted(members.items()):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mtime = 0
            tar.addfile(info, io.BytesIO(data))
    tmp.replace(out)
    return out


def read_bundle(path: Path) -> dict[str, bytes]:
    """The bundle's members, read in memory; anything unexpected in the archive is refused."""
    if not path.is_file():
        raise DataError(f"bundle {path} does not exist")
    members: dict[str, bytes] = {}
    total = 0
    try:
        with tarfile.open(path, "r:gz") as tar:
            for info in tar:
                if not info.isreg():
                    raise DataError(
                        f"bundle member '{info.name}' is not a regular file (links and devices are refused)"
                    )
                if not MEMBER.match(info.name):
                    raise DataError(f"bundle member '{info.name}' is not part of the bundle format")
                total += info.size
                if total > MAX_BUNDLE_BYTES:
                    raise DataError(f"bundle is larger than {MAX_BUNDLE_BYTES // 2**20} MiB")
                handle = tar.extractfile(info)
                members[info.name] = handle.read() if handle else b""
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise DataError(f"{path} is not a readable .tar.gz bundle ({exc})") from None
    if "bundle.json" not in members:
        raise DataError(f"{path} has no bundle.json")
    return members


@dataclass
class Verdict:
    accepted: bool
    tier: str
    reasons: list[str] = field(default_factory=list)
    checks: list[tuple[str, bool, str]] = field(default_factory=list)
    recomputed: EvaluationResult | None = None
    bundle: BundleIndex | None = None
    run: RunIdentity | None = None
    results: Results | None = None
    predictions: dict[str, Prediction] = field(default_factory=dict)
    evaluator: Evaluator | None = None

    def blocking(self) -> list[str]:
        """The reasons other than --limit: a --limit run whose only reason is that one is a preview, its
        metrics recomputed like any other's, shown on the board but never ranked best."""
        return [r for r in self.reasons if not r.startswith("no --limit")]

    def is_preview(self) -> bool:
        return not self.accepted and bool(self.reasons) and not self.blocking()

    def check(self, name: str, ok: bool, detail: str) -> bool:
        self.checks.append((name, ok, detail))
        if not ok:
            self.reasons.append(f"{name}: {detail}")
        return ok

    @property
    def evaluation(self) -> EvaluationResult:
        """The metrics the board shows: recomputed here when they could be, else the claimed ones."""
        if self.recomputed is not None:
            return self.recomputed
        assert self.results is not None
        return self.results.evaluation


def _parse(verdict: Verdict, model: Any, data: bytes, name: str) -> Any:
    """A bundle member as its record type, or a failed check naming what is wrong."""
    from pydantic import ValidationError

    try:
        return model.model_validate(json.loads(data))
    except UnicodeDecodeError:
        verdict.check(name, False, "is not UTF-8 text")
    except ValueError as exc:
        if isinstance(exc, ValidationError):
            err = exc.errors()[0]
            verdict.check(name, False, f"is not a valid {model.__name__} ({'.'.join(str(p) for p in err['loc']) or 'top level'}: {err['msg']})")
        else:
            verdict.check(name, False, "is not JSON")
    return None


def verify(path: Path, tolerance: float = 1e-9) -> Verdict:
    from ddibench.errors import DdibenchError
    from ddibench.registry import get_task

    members = read_bundle(path)
    verdict = Verdict(False, "self-reported")
    bundle = _parse(verdict, BundleIndex, members["bundle.json"], "bundle.json")
    if bundle is None:
        return verdict
    verdict.bundle = bundle
    for name, data in members.items():
        if name != "bundle.json":
            same = bundle.hashes.get(name) == _sha(data)
            verdict.check(f"hash of {name}", same, "matches bundle.json" if same else "differs from bundle.json: the file was changed")
    missing = sorted(set(bundle.hashes) - set(members))
    verdict.check("members present", not missing, f"missing {', '.join(missing)}" if missing else "all listed members present")
    for required in ("run.json", "results.json", "predictions.jsonl"):
        if required not in members:
            verdict.check(required, False, "not in the bundle")
            return verdict
    run = _parse(verdict, RunIdentity, members["run.json"], "run.json")
    results = _parse(verdict, Results, members["results.json"], "results.json")
    if run is None or results is None:
        return verdict
    verdict.run, verdict.results = run, results
    try:
        task = get_task(run.task.name)
    except DdibenchError as exc:
        verdict.check("task", False, str(exc))
        return verdict
    verdict.check("task version", run.task.version == task.version, f"bundle {run.task.version}, this ddibench {task.version}")
    verdict.check("data sha256", run.task.data_sha256 == task.data_sha256, f"bundle {run.task.data_sha256[:12]}…, pinned data {task.data_sha256[:12]}…")
    verdict.check("no --limit", run.limit is None, "the full evaluation split" if run.limit is None else f"--limit {run.limit} was used")
    verdict.check("evaluation split", run.split == task.eval_split, f"{run.split} (expected {task.eval_split})")
    evaluator: Evaluator | None = None
    try:
        evaluator = task.evaluator().configure(results.manifest.scoring.options)
    except DdibenchError as exc:
        verdict.check("scoring options", False, f"{exc} (score again with 'ddibench rescore RUN_DIR' and the defaults)")
    if evaluator is not None:
        local = evaluator.non_portable()
        verdict.check("scoring options", not local,
                      "the task's default scorers" if not local and not evaluator.settings() else
                      (f"{', '.join(f'{k}={v}' for k, v in evaluator.settings().items())}" if not local else
                       f"scored with {', '.join(local)} set to something only the submitter's machine has; the board compares runs scored "
                       "with the task's default scorers (score again with 'ddibench rescore RUN_DIR --scorer-encoder minilm')"))  # fmt: skip
    verdict.evaluator = evaluator
    seeds = 1
    verdict.check("seeds", seeds >= task.required_seeds, f"{seeds} run(s), the task asks for {task.required_seeds}")
    if not verdict.check(
        "run id",
        run.run_id == bundle.run_id == run.with_id().run_id,
        "bundle.json and run.json agree, and the id is the hash of the run's identity"
        if run.run_id == bundle.run_id == run.with_id().run_id
        else ("bundle.json and run.json name different runs" if run.run_id != bundle.run_id else "run.json's run id is not the hash of its identity: the identity was edited"),
    ):
        return verdict
    predictions: dict[str, Prediction] = {}
    duplicates = 0
    try:
        for line in members["predictions.jsonl"].decode("utf-8").splitlines():
            if line.strip():
                pred = Prediction.model_validate_json(line)
                duplicates += pred.sample_id in predictions
                predictions[pred.sample_id] = pred
    except ValueError as exc:
        verdict.check("predictions", False, f"not valid prediction records ({str(exc).splitlines()[0]})")
        return verdict
    verdict.predictions = predictions
    if verdict.blocking() or evaluator is None:
        return verdict
    from ddibench.runner.plan import select_samples

    # the samples the run was asked about (a task may predict several splits); a preview's metrics are
    # still recomputed, on the subset --limit draws
    samples = select_samples(task, task.load(), task.eval_split, run.limit, int(run.seed))
    wanted = {s.id for s in samples}
    absent = len(wanted - set(predictions))
    extra = len(set(predictions) - wanted)
    verdict.check("every sample once", not absent and not extra and not duplicates,
                  f"{absent} missing, {extra} unknown, {duplicates} repeated of {len(wanted):,}")  # fmt: skip
    verdict.check("sample ids", run.sample_ids_sha256 == sha256_text("\n".join(s.id for s in samples)),
                  "the run's samples are the task's evaluation split (and the splits it predicts)" if run.limit is None
                  else f"the run's samples are the {len(samples):,} that --limit {run.limit} draws from the evaluation split")  # fmt: skip
    if verdict.blocking():
        return verdict
    extras = evaluator.read_extras(members)
    boot = results.evaluation.bootstrap
    spec = BootstrapSpec(replicates=int(boot.get("replicates", 1000)), seed=int(boot.get("seed", 0)), method=str(boot.get("method", "cluster")))
    from ddibench.evaluation import EvaluationInputError

    try:
        evaluation = evaluator.evaluate(samples, predictions, spec, extras)
    except EvaluationInputError as exc:
        verdict.check("prediction format", False, str(exc))
        return verdict
    verdict.recomputed = evaluation
    claimed = results.evaluation.metrics
    for name, metric in evaluation.metrics.items():
        mine, theirs = metric.value, (claimed[name].value if name in claimed else None)
        same = theirs is not None and (mine == theirs or abs(mine - theirs) <= tolerance or (mine != mine and theirs != theirs))
        verdict.check(f"metric {name}", same, f"recomputed {mine:.6f}, claimed {theirs if theirs is None else f'{theirs:.6f}'}")
    verdict.accepted = not verdict.reasons
    verdict.tier = "self-reported" if verdict.blocking() else "recomputed"
    return verdict


def reproduce(verdict: Verdict, workdir: Path, models: dict[str, Any] | None = None, min_agreement: float = 0.99) -> Verdict:
    """Re-run the bundle's system (registered here) with its configuration and compare predictions."""
    from ddibench.llm import ModelSpec, parse_model_options
    from ddibench.runner.execute import execute
    from ddibench.runner.plan import RunRequest

    if not verdict.accepted or verdict.run is None or verdict.results is None:
        return verdict
    run = verdict.run
    used = {role: m.spec for role, m in verdict.results.manifest.models.items()}
    specs = parse_model_options([used["generator"]] if "generator" in used else [])
    specs = specs.with_roles({role: ModelSpec.parse(spec) for role, spec in used.items()})
    specs = specs.with_roles(dict(models or {}))
    request = RunRequest(
        task=run.task.name, system=run.system.name, models=specs, seed=run.seed, split=run.split,
        config=run.system.config, run_dir=workdir, score_with_models=False,
    )  # fmt: skip
    outcome = execute(request)
    theirs = verdict.predictions
    again = {
        json.loads(x)["prediction"]["sample_id"]: json.loads(x)["prediction"]
        for x in (outcome.run_dir / "journal.jsonl").read_text().splitlines()
        if x.strip()
    }
    same = sum(1 for sid, p in theirs.items() if sid in again and (again[sid]["label"], again[sid]["text"]) == (p.label, p.text))
    agreement = same / max(1, len(theirs))
    if verdict.check("reproduction", agreement >= min_agreement, f"{agreement:.1%} of predictions identical when re-run here"):
        verdict.tier = "reproduced"
    else:
        verdict.accepted = False
    return verdict
