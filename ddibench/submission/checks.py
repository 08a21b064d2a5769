"""The consistency checks of a verdict: the system's identity and registration, the models behind the
traced LLM calls, the cost totals, the label space; and where a bundle's adapter code comes from."""

from __future__ import annotations

import math
from typing import Any

from ddibench.hashing import config_hash
from ddibench.runner.records import Results, RunIdentity
from ddibench.schema import Prediction
from ddibench.submission.verdict import Verdict


def _models(models: dict[str, dict[str, Any]]) -> str:
    return (
        ", ".join(f"{role}={ident.get('provider')}:{ident.get('model')}" for role, ident in sorted(models.items()))
        or "none"
    )


def _spec_matches(spec_text: str, identity: dict[str, Any]) -> bool:
    from ddibench.llm import ModelSpec

    if str(identity.get("provider", "")).startswith(
        "lm-eval:"
    ):  # imported answers: the spec is the text the importer wrote
        return spec_text == f"{identity.get('provider')}:{identity.get('model')}"
    try:
        spec = ModelSpec.parse(spec_text) if not spec_text.startswith("embedded:") else None
    except Exception:  # noqa: BLE001 - a spec this ddibench cannot parse does not name the identity
        return False
    if spec is None:  # embedded: the weights live on the submitter's machine; the identity carries their hash
        return identity.get("provider") == "embedded" and spec_text == f"embedded:{identity.get('model')}"
    return (spec.provider, spec.model, (spec.base_url or "").rstrip("/")) == (
        identity.get("provider"),
        identity.get("model"),
        identity.get("base_url"),
    )


def describe_provenance(provenance: dict[str, Any]) -> str:
    """Where a bundle's adapter code comes from, in one line (what ``verify`` shows)."""
    if not provenance:
        return "the bundle does not say where the adapter's code comes from (made before ddibench recorded it)"
    what = (
        " ".join(str(provenance[k]) for k in ("distribution", "version") if provenance.get(k))
        or "an unnamed distribution"
    )
    source = str(provenance.get("source") or "an unknown source")
    commit = f" at commit {str(provenance['commit'])[:12]}" if provenance.get("commit") else ""
    changed = " with uncommitted changes" if commit and provenance.get("dirty") else ""
    files = f"; its files hash to {str(provenance['files_sha256'])[:12]}…" if provenance.get("files_sha256") else ""
    if provenance.get("distribution") == "ddibench" and source.startswith("a local checkout"):
        # a reference system recorded before ddibench named itself as the source: the path was the runner's
        return f"{provenance.get('entry_point', '?')} from {what} (a reference system shipped with it){commit}{files}"
    if is_local(provenance):
        return f"{provenance.get('entry_point', '?')} from {what}, {source}{commit}{changed} (local, not public){files}"
    return f"{provenance.get('entry_point', '?')} from {what}, {source}{commit}{changed}{files}"


def is_local(provenance: dict[str, Any]) -> bool:
    """Whether an outside adapter's recorded source is on its author's machine only (a folder, a checkout with
    no public remote): others cannot install it, so a pull request cannot be reproduced from it."""
    if provenance.get("distribution") == "ddibench":
        return False
    return bool(provenance.get("local")) or str(provenance.get("source", "")).startswith(("a local", "file:"))


LOCAL_ADAPTER = (
    "a pull request needs the adapter at a public source and commit (push it, then 'pip install "
    "git+https://...@COMMIT' and run again); to try the board first, publish into a folder of your own: "
    "'ddibench board publish --results /tmp/my-results BUNDLE' and 'ddibench board serve --results /tmp/my-results'"
)


def install_hint(provenance: dict[str, Any]) -> str:
    """How to get an adapter that is not installed here, from what its bundle records."""
    name, version, source = (
        provenance.get("distribution"),
        provenance.get("version"),
        str(provenance.get("source") or ""),
    )
    commit = provenance.get("commit")
    if source.startswith(("git+", "https://", "http://", "git@")) and commit:
        url = source if source.startswith("git+") else f"git+{source}"
        return f"install its adapter: pip install '{url}@{commit}' ({name} {version})"
    if provenance.get("index") and name:
        return f"install its adapter: pip install '{name}=={version}' (source: {source})"
    if name:
        return f"install its adapter, {name} {version}, from {source or 'its author'}" + (
            f" at commit {commit}" if commit else ""
        )
    return "install the package that registers it (the bundle does not say which: ask its submitter)"


def _check_system(verdict: Verdict, run: RunIdentity) -> None:
    """The configuration hash is the hash of the system's identity; a system registered here is the
    registered version, with a configuration it accepts and the LLM roles it declares."""
    from ddibench.errors import UnknownNameError
    from ddibench.registry import get_system_class
    from ddibench.system import BaseSystem

    system = run.system
    expected = config_hash({"system": system.name, "version": system.version, "config": system.config})
    if expected != system.config_hash:
        verdict.check(
            "system",
            False,
            f"config hash {system.config_hash} is not the hash of {system.name} {system.version} and its configuration: "
            "the system identity was edited",
        )
        return
    try:
        cls = get_system_class(system.name)
    except UnknownNameError:
        verdict.check(
            "system",
            True,
            f"{system.name} {system.version} is not registered here: its identity is checked by hash only",
        )
        return
    if cls.version != system.version:
        verdict.check(
            "system",
            False,
            f"{system.name} {system.version} is not the version registered here ({cls.version}); "
            "verify it with the ddibench that has that version",
        )
        return
    roles = set(cls.llm_roles)
    if isinstance(cls, type) and issubclass(cls, BaseSystem):
        try:  # a key added since the run was recorded reads as what the run did (SystemConfig.absent_means)
            config = cls.Config.from_record(system.config)
            accepted = True
        except Exception:  # noqa: BLE001 - any validation failure means: not this system's configuration
            accepted = False
        if not accepted:
            verdict.check(
                "system",
                False,
                f"the configuration is not one {system.name} {system.version} accepts: the bundle names another system",
            )
            return
        roles = set(cls.used_roles(config))  # the roles this configuration calls (an ablation may call none)
    if roles != set(run.models):
        verdict.check(
            "system",
            False,
            f"{system.name} uses LLM roles {sorted(roles) or 'none'}, the run names {sorted(run.models) or 'none'}",
        )
        return
    verdict.check("system", True, f"{system.name} {system.version} as registered here, with a configuration it accepts")


def _check_models(verdict: Verdict, run: RunIdentity, results: Results, predictions: dict[str, Prediction]) -> None:
    """Every traced LLM call was made for a declared role and answered by the model the run names."""
    from ddibench.llm import identity_digest

    digests = {role: identity_digest(identity) for role, identity in run.models.items()}
    calls = foreign = unrecorded = other = 0
    first: str | None = None
    for pred in predictions.values():
        for call in pred.trace.get("llm", []):
            calls += 1
            role, model = call.get("role", "generator"), call.get("model")
            bad = role not in digests or model is None or model != digests.get(role)
            foreign += role not in digests
            unrecorded += role in digests and model is None
            other += role in digests and model is not None and model != digests[role]
            if bad and first is None:
                first = pred.sample_id
    no_tokens = sum(1 for p in predictions.values() for c in p.trace.get("llm", []) if not c.get("prompt_tokens"))
    if foreign:
        detail = f"{foreign} of {calls} traced LLM calls are for roles the run does not declare (first: {first})"
    elif unrecorded:
        detail = f"{unrecorded} of {calls} traced LLM calls do not record which model answered (first: {first}); re-run with this ddibench"
    elif other:
        detail = f"{other} of {calls} traced LLM calls were answered by another model than the manifest names (first: {first})"
    elif no_tokens:
        detail = f"{no_tokens} of {calls} traced LLM calls report no prompt tokens, so their cost cannot be checked"
    else:
        detail = (
            f"all {calls:,} traced LLM calls answered by the models the manifest names" if calls else "no LLM calls"
        )
    verdict.check("models", not (foreign or unrecorded or other or no_tokens), detail)


def _check_cost(verdict: Verdict, results: Results, ordered: list[Prediction]) -> None:
    """The per-role calls, tokens and latency in results.json equal the sums over the traces."""
    from ddibench.runner.scoring import cost_from_predictions

    cost = cost_from_predictions(ordered)
    verdict.cost = cost
    claimed = results.cost
    problems = []
    for role in sorted(set(cost.by_role) | set(claimed.by_role)):
        mine, theirs = cost.by_role.get(role), claimed.by_role.get(role)
        if mine is None or theirs is None:
            problems.append(
                f"{role}: {'no' if mine is None else mine.calls} traced calls, {'none' if theirs is None else theirs.calls} claimed"
            )
            continue
        for key in ("calls", "prompt_tokens", "completion_tokens", "served_from_cache"):
            if getattr(mine, key) != getattr(theirs, key):
                problems.append(f"{role} {key}: {getattr(mine, key):,} in the traces, {getattr(theirs, key):,} claimed")
        if not math.isclose(mine.latency_s, theirs.latency_s, rel_tol=1e-6, abs_tol=1e-6):
            problems.append(f"{role} latency: {mine.latency_s:.3f} s in the traces, {theirs.latency_s:.3f} s claimed")
    per_item = {role: v.dump() for role, v in cost.per_item.items()} == {
        role: v.dump() for role, v in claimed.per_item.items()
    }
    if not problems and not per_item:
        problems.append("the per-item cost differs from the traces")
    verdict.check(
        "cost",
        not problems,
        "calls and tokens per role equal the sums over the traces" if not problems else "; ".join(problems[:3]),
    )


def _check_labels(verdict: Verdict, labels: Any, predictions: dict[str, Prediction]) -> None:
    """Every label id a prediction names (its label, ranked labels, score keys) is in the label space."""
    n = len(labels) if labels is not None else 0
    outside = []
    for pred in predictions.values():
        ids: list[Any] = []
        if pred.label is not None:
            ids.append(pred.label)
        ids.extend(pred.ranked or [])
        for key in pred.scores or {}:
            ids.append(int(key) if key.isdigit() else key)
        if any(isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < n for i in ids):
            outside.append(pred.sample_id)
    verdict.check(
        "label space",
        not outside,
        f"every label id is one of the task's {n} labels"
        if not outside
        else f"{len(outside)} predictions name label ids outside the task's {n} labels (first: {outside[0]})",
    )
