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
import io
import json
import re
import tarfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ddibench
from ddibench.errors import DataError, RunDirError
from ddibench.hashing import sha256_text
from ddibench.metrics.bootstrap import BootstrapSpec
from ddibench.schema import Prediction

BUNDLE_FORMAT = 1
MEMBER = re.compile(
    r"^(bundle\.json|run\.json|results\.json|sessions\.jsonl|predictions\.jsonl|scores/[A-Za-z0-9._-]+\.jsonl)$"
)
MAX_BUNDLE_BYTES = 512 * 1024 * 1024
TIERS = ("self-reported", "recomputed", "reproduced")


def _sha(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()


def submit(run_dir: Path, out: Path | None = None) -> Path:
    """Pack a finished run into a bundle; returns its path."""
    results_file = run_dir / "results.json"
    if not results_file.exists():
        raise RunDirError(
            f"{run_dir} has no results.json", "finish the run with 'ddibench run' before submitting it"
        )
    members: dict[str, bytes] = {
        "run.json": (run_dir / "run.json").read_bytes(),
        "results.json": results_file.read_bytes(),
        "sessions.jsonl": (run_dir / "sessions.jsonl").read_bytes()
        if (run_dir / "sessions.jsonl").exists()
        else b"",
    }
    predictions = []
    for line in (run_dir / "journal.jsonl").read_text(encoding="utf-8").splitlines():
        if line.strip():
            predictions.append(
                json.dumps(json.loads(line)["prediction"], ensure_ascii=False, separators=(",", ":"))
            )
    members["predictions.jsonl"] = ("\n".join(predictions) + "\n").encode("utf-8")
    for path in sorted((run_dir / "scores").glob("*.jsonl")) if (run_dir / "scores").exists() else []:
        members[f"scores/{path.name}"] = path.read_bytes()
    ident = json.loads(members["run.json"])
    bundle = {
        "format": BUNDLE_FORMAT,
        "created": dt.datetime.now(dt.timezone.utc).isoformat(),
        "ddibench_version": ddibench.__version__,
        "run_id": ident["run_id"],
        "task": ident["task"],
        "system": {k: ident["system"][k] for k in ("name", "version", "config_hash")},
        "hashes": {name: _sha(data) for name, data in sorted(members.items())},
        "trust_tier": "self-reported",
    }
    members["bundle.json"] = json.dumps(bundle, indent=2).encode("utf-8")
    out = (
        out
        or run_dir.parent / f"{ident['task']['name']}--{ident['system']['name']}--{ident['run_id']}.tar.gz"
    )
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
    recomputed: dict[str, Any] = field(default_factory=dict)
    bundle: dict[str, Any] = field(default_factory=dict)
    run: dict[str, Any] = field(default_factory=dict)
    results: dict[str, Any] = field(default_factory=dict)
    predictions: dict[str, Prediction] = field(default_factory=dict)

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


def verify(path: Path, tolerance: float = 1e-9) -> Verdict:
    from ddibench.evaluation import scoring_encoder_of
    from ddibench.registry import get_task

    members = read_bundle(path)
    verdict = Verdict(False, "self-reported")
    try:
        bundle = json.loads(members["bundle.json"])
    except ValueError:
        verdict.check("bundle.json", False, "is not JSON")
        return verdict
    verdict.bundle = bundle
    hashes = bundle.get("hashes", {})
    for name, data in members.items():
        if name != "bundle.json":
            same = hashes.get(name) == _sha(data)
            verdict.check(
                f"hash of {name}",
                same,
                "matches bundle.json" if same else "differs from bundle.json: the file was changed",
            )
    missing = sorted(set(hashes) - set(members))
    verdict.check(
        "members present",
        not missing,
        f"missing {', '.join(missing)}" if missing else "all listed members present",
    )
    for required in ("run.json", "results.json", "predictions.jsonl"):
        if required not in members:
            verdict.check(required, False, "not in the bundle")
            return verdict
    run, results = json.loads(members["run.json"]), json.loads(members["results.json"])
    verdict.run, verdict.results = run, results
    try:
        task = get_task(run["task"]["name"])
    except Exception as exc:  # noqa: BLE001 - an unknown task is a verdict, not a crash
        verdict.check("task", False, str(exc))
        return verdict
    verdict.check(
        "task version",
        run["task"]["version"] == task.version,
        f"bundle {run['task']['version']}, this ddibench {task.version}",
    )
    verdict.check(
        "data sha256",
        run["task"]["data_sha256"] == task.data_sha256,
        f"bundle {run['task']['data_sha256'][:12]}…, pinned data {task.data_sha256[:12]}…",
    )
    verdict.check(
        "no --limit",
        run.get("limit") is None,
        "the full evaluation split" if run.get("limit") is None else f"--limit {run['limit']} was used",
    )
    verdict.check(
        "evaluation split",
        run.get("split") == task.eval_split,
        f"{run.get('split')} (expected {task.eval_split})",
    )
    encoder = scoring_encoder_of(results.get("manifest", {}))
    verdict.check("scoring encoder", encoder is None,
                  "the task's default" if encoder is None else
                  f"free-text scorers used {encoder}; the board compares runs scored with the task's default encoder"
                  " (score again with 'ddibench rescore RUN_DIR --scorer-encoder minilm')")  # fmt: skip
    seeds = 1
    required = getattr(task, "required_seeds", 1)
    verdict.check("seeds", seeds >= required, f"{seeds} run(s), the task asks for {required}")
    if not verdict.check(
        "run id",
        run.get("run_id") == bundle.get("run_id"),
        "bundle.json and run.json agree"
        if run.get("run_id") == bundle.get("run_id")
        else "bundle.json and run.json name different runs",
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
    if verdict.blocking():
        return verdict
    samples = list(task.load().split(task.eval_split))
    if run.get("limit") is not None:  # a preview: its metrics are still recomputed, on the subset --limit draws
        from ddibench.runner.run import stratified_subset

        samples = stratified_subset(samples, int(run["limit"]), int(run.get("seed", 0)))
    wanted = {s.id for s in samples}
    absent = len(wanted - set(predictions))
    extra = len(set(predictions) - wanted)
    verdict.check("every sample once", not absent and not extra and not duplicates,
                  f"{absent} missing, {extra} unknown, {duplicates} repeated of {len(wanted):,}")  # fmt: skip
    verdict.check("sample ids", run.get("sample_ids_sha256") == sha256_text("\n".join(s.id for s in samples)),
                  "the run's samples are the task's evaluation split" if run.get("limit") is None
                  else f"the run's samples are the {len(samples):,} that --limit {run['limit']} draws from the evaluation split")  # fmt: skip
    if verdict.blocking():
        return verdict
    extras = {}
    for name, data in members.items():
        if name.startswith("scores/judge-") and "judge" not in extras:
            extras["judge"] = {
                json.loads(x)["sample_id"]: json.loads(x) for x in data.decode().splitlines() if x.strip()
            }
        if name.startswith("scores/selfcheck-") and "selfcheck" not in extras:
            extras["selfcheck"] = {
                json.loads(x)["sample_id"]: json.loads(x) for x in data.decode().splitlines() if x.strip()
            }
    boot = results.get("evaluation", {}).get("bootstrap", {})
    spec = BootstrapSpec(
        replicates=int(boot.get("replicates", 1000)),
        seed=int(boot.get("seed", 0)),
        method=boot.get("method", "cluster"),
    )
    evaluation = task.evaluator().evaluate(samples, predictions, spec, extras).model_dump(mode="json")
    verdict.recomputed = evaluation
    claimed = results.get("evaluation", {}).get("metrics", {})
    for name, metric in evaluation["metrics"].items():
        mine, theirs = metric["value"], claimed.get(name, {}).get("value")
        same = theirs is not None and (mine == theirs or abs(mine - theirs) <= tolerance)
        verdict.check(
            f"metric {name}",
            same,
            f"recomputed {mine:.6f}, claimed {theirs if theirs is None else f'{theirs:.6f}'}",
        )
    verdict.accepted = not verdict.reasons
    verdict.tier = "self-reported" if verdict.blocking() else "recomputed"
    return verdict


def reproduce(
    verdict: Verdict, workdir: Path, models: dict[str, Any] | None = None, min_agreement: float = 0.99
) -> Verdict:
    """Re-run the bundle's system (registered here) with its configuration and compare predictions."""
    from ddibench.llm.spec import ModelSpec, parse_model_options
    from ddibench.runner.run import RunRequest, execute

    if not verdict.accepted:
        return verdict
    run = verdict.run
    used = {role: m["spec"] for role, m in verdict.results.get("manifest", {}).get("models", {}).items()}
    specs = parse_model_options([used["generator"]] if "generator" in used else [])
    specs.update({role: ModelSpec.parse(spec) for role, spec in used.items()})
    specs.update(models or {})
    request = RunRequest(
        task=run["task"]["name"], system=run["system"]["name"], models=specs, seed=run["seed"], split=run["split"],
        config=run["system"]["config"], run_dir=workdir, judge=False, selfcheck_samples=0,
    )  # fmt: skip
    outcome = execute(request)
    theirs = verdict.predictions
    again = {
        json.loads(x)["prediction"]["sample_id"]: json.loads(x)["prediction"]
        for x in (outcome.run_dir / "journal.jsonl").read_text().splitlines()
        if x.strip()
    }
    same = sum(
        1
        for sid, p in theirs.items()
        if sid in again and (again[sid]["label"], again[sid]["text"]) == (p.label, p.text)
    )
    agreement = same / max(1, len(theirs))
    if verdict.check(
        "reproduction",
        agreement >= min_agreement,
        f"{agreement:.1%} of predictions identical when re-run here",
    ):
        verdict.tier = "reproduced"
    else:
        verdict.accepted = False
    return verdict
