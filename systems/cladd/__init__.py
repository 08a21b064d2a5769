"""``cladd``: CLADD, the collaborative multi-agent RAG system for molecules (Lee et al. 2025), agent by agent.

Every agent is its own LLM role (``--model ROLE=SPEC`` gives each a model), with its own prompt
(:mod:`.prompts`). Per query molecule, in this order:

1. **Planning team.** ``annotation_planner`` reads what the annotation database holds for the molecule
   (:mod:`.annotations`: DrugBank, ChEBI-20 and Repurposing Hub text by InChIKey, standing in for
   PubChem) and decides whether to call the captioning tool (the ChEBI-20 description of the nearest
   Tanimoto neighbour, standing in for MolT5). ``kg_planner`` sees the **anchor drug** (the KG drug
   most similar to the query by Morgan Tanimoto, :mod:`.graph`; never the query itself unless
   ``self_anchor``) and decides whether the KG team is worth calling.
2. **Knowledge-graph team** (when the KG planner says yes). Related drugs = the ``k_related`` KG drugs
   with the most 2-hop paths to the anchor. ``drugrel`` reports on them from their names, structural
   similarity to the query and a line about each; ``biorel`` summarises the 2-hop paths between the
   anchor and them.
3. ``molecule_understanding`` writes a report from the retrieved annotations (and the tool's caption).
4. ``predictor`` combines the reports into the answer the task declares (``task.answer``: yes/no, five targets
   or a caption), under the task's system prompt and budget, with the constrained JSON and strict parsing of
   :mod:`ddibench.toolkit.molecule_answers`; it serves every molecule task that module can answer.

Ablations (``--config``): ``use_kg_team`` (drops the KG planner and both KG agents), ``use_drugrel``,
``use_biorel``, ``use_mu`` (the predictor then reads the raw annotations instead of the MU report),
``use_captioning_tool`` (no tool, so no annotation planner), ``annotations=expert|generated|both``
(database only / captioning tool only, always called / database plus the planner's choice), ``k_related``.
``kg=PATH`` reads a user's PrimeKG ``kg.csv`` (sha256 recorded) and ``pubchem=PATH`` adds a user's
annotation dump.

Leakage rules: on a task built from the Drug Repurposing Hub (the drug-target tasks) the query's own Hub line
(its gold target list) is never retrieved, and a molecule the KG lacks (the "no-overlap" slice) has no target edges there by
construction; the query is never its own anchor or related drug (``self_anchor=false``). Every retrieved
text is in the trace (``retrieved``), so ``scripts/cladd_leak_audit.py`` can count the answers whose
context states the gold label verbatim. Planner decisions are in each trace and tallied in
``system_info``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import Field

from ddibench.errors import ConfigError
from ddibench.hashing import sha256_text
from ddibench.schema import LabelSpace, Molecule, Prediction, Sample
from ddibench.system import BaseSystem, RunContext, SystemConfig, TrainingView, llm_trace
from ddibench.systems.cladd import prompts
from ddibench.systems.cladd.annotations import Annotation, lookup, neighbour_caption
from ddibench.systems.cladd.audit import stated_labels
from ddibench.systems.cladd.graph import Anchor, DrugGraph, Related
from ddibench.task import AnswerSpec, Task
from ddibench.toolkit.molecule_answers import (
    answer_budget,
    answer_schema,
    can_answer,
    describe_molecule,
    instruction_of,
    to_prediction,
)

ROLES = ("annotation_planner", "kg_planner", "drugrel", "biorel", "molecule_understanding", "predictor")


class CLADDConfig(SystemConfig):
    use_kg_team: bool = True
    use_drugrel: bool = True
    use_biorel: bool = True
    use_mu: bool = True
    use_captioning_tool: bool = True
    annotations: Literal["expert", "generated", "both"] = "both"
    k_related: int = Field(5, ge=0)
    paths_per_drug: int = Field(3, ge=0)
    self_anchor: bool = False  # allow the query's own KG entry as anchor (a leak on every task; off by default)
    kg: str | None = None  # path to a PrimeKG kg.csv; default: the project's Hetionet
    pubchem: str | None = None  # path to a TSV of descriptions (inchikey or smiles, description)
    temperature: float = Field(0.0, ge=0, allow_inf_nan=False)
    planner_tokens: int = Field(64, gt=0)
    report_tokens: int = Field(200, gt=0)
    constrained: bool = True


def _decision(text: str) -> tuple[bool | None, str]:
    """A planner's yes/no (None when unreadable) and its reason."""
    for blob in re.findall(r"\{.*?\}", text, re.DOTALL):
        try:
            obj = json.loads(blob)
        except ValueError:
            continue
        if isinstance(obj, dict) and str(obj.get("decision", "")).strip().lower() in ("yes", "no"):
            return str(obj["decision"]).strip().lower() == "yes", str(obj.get("reason", ""))
    words = {w.lower() for w in re.findall(r"\b(yes|no)\b", text, re.IGNORECASE)}
    if len(words) == 1:
        return words.pop() == "yes", text.strip()[:200]
    return None, text.strip()[:200]


class CLADDSystem(BaseSystem):
    name = "cladd"
    version = "1.0.0"
    description = "CLADD multi-agent RAG for molecules: planners, KG team (anchor, related drugs, 2-hop paths), molecule understanding, predictor"
    paper = "Lee et al. 2025, CLADD: RAG-enhanced collaborative LLM agents for drug discovery"
    Config = CLADDConfig
    llm_roles = ROLES
    # the paper's ablations (Table 6): a run without a component is shown apart from the full system
    variant_keys = (
        "use_kg_team",
        "use_drugrel",
        "use_biorel",
        "use_mu",
        "use_captioning_tool",
        "annotations",
        "k_related",
    )
    batch_size = 1
    max_concurrency = 8
    config: CLADDConfig

    def __init__(self, config: CLADDConfig | None = None) -> None:
        super().__init__(config)
        cfg = self.config
        if cfg.annotations == "generated" and not cfg.use_captioning_tool:
            raise ConfigError(
                "annotations=generated needs the captioning tool",
                "drop use_captioning_tool=false or choose annotations=expert|both",
            )
        self.answer: AnswerSpec | None = None  # how the task is answered, from prepare()
        self.hub_is_gold = False  # the task's labels come from the Repurposing Hub (its MoA line names them)
        self.instruction = ""
        self.labels: LabelSpace | None = None  # the answer's label space where the answer names labels (targets)
        self.label_space: LabelSpace | None = None
        self.graph: DrugGraph | None = None

    def run_info(self) -> dict[str, Any]:
        from ddibench.systems.cladd.annotations import annotation_sources

        return {
            "counters": dict(sorted(self.counters.as_dict().items())),
            "kg": self.graph.card() if self.graph else None,
            "annotation_sources": [s.describe() for s in annotation_sources()],
        }

    def deviations(self) -> list[str]:
        cfg = self.config
        out = [
            "annotation database: DrugBank 4.2 descriptions, ChEBI-20 descriptions (MolT5 validation and test splits) and the Drug "
            "Repurposing Hub MoA line, looked up by standard InChIKey, stand in for the paper's PubChem descriptions"
            + (" (plus the user's dump given as pubchem)" if cfg.pubchem else ""),
        ]
        if cfg.use_captioning_tool and cfg.annotations != "expert":
            out.append(
                "captioning tool: the ChEBI-20 description of the nearest Morgan-Tanimoto neighbour (its own structure left out) stands "
                "in for MolT5, whose weights are not available offline; it is labelled as a similar molecule's description"
            )
        if cfg.use_kg_team:
            out.append(
                "knowledge graph: the user's PrimeKG file (drug structures from DrugBank 4.2 InChI)"
                if cfg.kg
                else "knowledge graph: the project's Hetionet (DrugBank id space, 1,710 drugs with catalog SMILES) stands in for PrimeKG"
            )
        out.append(
            "prompts are written in our own words after the structure of the paper's appendix G; answers are parsed strictly"
        )
        return out

    # -- preparation -------------------------------------------------------------------------

    @property
    def task_answer(self) -> AnswerSpec:
        """The task's answer (set by prepare())."""
        if self.answer is None:
            raise RuntimeError("CLADD answers only after prepare()")
        return self.answer

    def supports(self, task: Task) -> bool:
        """Every molecule task whose declared answer the predictor can give (:func:`ddibench.toolkit.molecule_answers.can_answer`)."""
        return can_answer(task)

    async def prepare(self, view: TrainingView, ctx: RunContext) -> None:
        from ddibench.data.repurposing import hub_sources
        from ddibench.systems.cladd.annotations import build_index, index_key, use_index
        from ddibench.systems.cladd.graph import hetionet_graph, primekg_graph

        self.answer = view.task.answer
        self.hub_is_gold = bool(set(view.task.sources) & set(hub_sources()))
        self.instruction = instruction_of(view.resources, view.task.name)
        self.labels = view.task.label_space if view.task.answer.kind == "top_k" else None
        self.label_space = view.task.label_space
        # the user's own files first (read whole and checked), so a damaged one fails before the index is built
        if self.config.pubchem and self.config.annotations != "generated":
            from ddibench.systems.cladd.annotations import user_index

            ctx.progress.note("CLADD: reading the annotation dump given as pubchem")
            user_index(self.config.pubchem)
        if self.config.use_kg_team:
            ctx.progress.note("CLADD: loading the knowledge graph")
            self.graph = primekg_graph(self.config.kg) if self.config.kg else hetionet_graph()
            _ = self.graph.bit_counts, self.graph.drug_csr
        ctx.progress.note("CLADD: the annotation index (built once, then a cached artifact)")
        path, built = ctx.artifacts.get_or_build("cladd-annotations", index_key(), build_index)
        use_index(path)
        self.counters.set("annotation_index_built", int(built))
        for text in (
            prompts.ANNOTATION_PLANNER_SYSTEM,
            prompts.KG_PLANNER_SYSTEM,
            prompts.DRUGREL_SYSTEM,
            prompts.BIOREL_SYSTEM,
            prompts.MU_SYSTEM,
            self._predictor_system(),
        ):
            ctx.remember_text(text)

    def _predictor_system(self) -> str:
        return prompts.PREDICTOR_PREFIX + self.task_answer.system_prompt

    # -- agents ------------------------------------------------------------------------------

    async def _call(
        self,
        ctx: RunContext,
        role: str,
        system: str,
        user: str,
        trace: dict[str, Any],
        max_tokens: int,
        schema: dict[str, Any] | None = None,
    ) -> str:
        messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
        result = await ctx.model(role).chat(
            messages,
            temperature=self.config.temperature,
            max_tokens=max_tokens,
            seed=ctx.seed,
            json_schema=schema if self.config.constrained else None,
        )
        trace["llm"].append(llm_trace(role, messages, result))
        trace["calls"].append(role)
        self.count(f"calls.{role}")
        return result.text

    async def _plan(self, ctx: RunContext, role: str, system: str, user: str, trace: dict[str, Any]) -> bool:
        text = await self._call(ctx, role, system, user, trace, self.config.planner_tokens, prompts.DECISION_SCHEMA)
        decision, reason = _decision(text)
        unreadable = decision is None
        if unreadable:
            decision = True  # an unreadable plan gathers the evidence rather than skipping it (counted)
            self.count(f"{role}.unreadable")
        trace["planner"][role] = {"decision": "yes" if decision else "no", "reason": reason, "unreadable": unreadable}
        return bool(decision)

    async def _annotate(self, ctx: RunContext, molecule: Molecule, trace: dict[str, Any]) -> list[str]:
        """The annotation lines the molecule-understanding agent (or the predictor) reads."""
        cfg = self.config
        # on a task built from the Hub, the query's own Hub line (its MoA terms and targets) is its gold
        exclude = ("repurposing-hub",) if self.hub_is_gold else ()
        found: list[Annotation] = (
            lookup(molecule.inchikey, exclude, cfg.pubchem) if cfg.annotations != "generated" else []
        )
        lines = [f"[{a.source}] {a.text}" for a in found]
        trace["annotations"] = [{"source": a.source, "text": a.text} for a in found]
        trace["retrieved"].extend(a.text for a in found)
        call_tool = False
        if cfg.use_captioning_tool and cfg.annotations == "generated":
            call_tool = True
        elif cfg.use_captioning_tool and cfg.annotations == "both":
            user = prompts.ANNOTATION_PLANNER.format(
                task=self.instruction,
                molecule=describe_molecule(molecule),
                n=len(found),
                annotations=prompts.bullet(lines),
            )
            call_tool = await self._plan(ctx, "annotation_planner", prompts.ANNOTATION_PLANNER_SYSTEM, user, trace)
        self.count(f"captioning_tool.{'called' if call_tool else 'not_called'}")
        if call_tool:
            caption = neighbour_caption(molecule.smiles, molecule.inchikey)
            trace["caption_tool"] = None
            if caption is not None:
                trace["caption_tool"] = {
                    "kind": "nearest ChEBI-20 neighbour's description",
                    "neighbour_chebi": caption.neighbour,
                    "similarity": caption.similarity,
                    "text": caption.text,
                }
                trace["retrieved"].append(caption.text)
                lines.append(
                    f"[captioning tool: description of a similar molecule, ChEBI {caption.neighbour}, Tanimoto {caption.similarity:.2f}; "
                    f"not of the query itself] {caption.text}"
                )
        return lines

    async def _kg_team(self, ctx: RunContext, molecule: Molecule, trace: dict[str, Any]) -> list[str]:
        """The KG team's reports as context lines: none without an anchor or when the KG planner says no."""
        cfg = self.config
        graph = self.graph
        assert graph is not None
        own = [] if cfg.self_anchor else graph.same_structure(molecule.inchikey, molecule.name)
        sims = graph.similarities(molecule.smiles)
        anchor = graph.anchor(molecule.smiles, own, sims)
        trace["kg"] = {"excluded_self": own}
        if anchor is None:
            self.count("kg_team.no_anchor")
            return []
        trace["kg"]["anchor"] = {"drug": anchor.drug, "name": anchor.name, "similarity": anchor.similarity}
        mol = describe_molecule(molecule)
        user = prompts.KG_PLANNER.format(
            task=self.instruction, molecule=mol, anchor=anchor.name, similarity=anchor.similarity
        )
        if not await self._plan(ctx, "kg_planner", prompts.KG_PLANNER_SYSTEM, user, trace):
            self.count("kg_team.not_called")
            return []
        self.count("kg_team.called")
        related = graph.related(anchor.drug, cfg.k_related, own, sims)
        trace["kg"]["related"] = [
            {"drug": r.drug, "name": r.name, "paths": r.paths, "similarity": r.similarity} for r in related
        ]
        reports = []
        if cfg.use_drugrel:
            reports.append(await self._drugrel_report(ctx, mol, anchor, related, trace))
        if cfg.use_biorel:
            reports.append(await self._biorel_report(ctx, mol, anchor, related, trace))
        return reports

    async def _drugrel_report(
        self, ctx: RunContext, mol: str, anchor: Anchor, related: list[Related], trace: dict[str, Any]
    ) -> str:
        """The drugrel agent's report on the related drugs (names, similarity, a line about each), as a context line."""
        from ddibench.systems.cladd.annotations import drug_line

        lines = []
        for r in related:
            about = drug_line(r.name)
            lines.append(
                f"{r.name} (Tanimoto to the query {r.similarity:.2f}; {r.paths} two-step connections with the anchor)"
                + (f": {about}" if about else "")
            )
            if about:
                trace["retrieved"].append(about)
        user = prompts.DRUGREL.format(
            task=self.instruction,
            molecule=mol,
            anchor=anchor.name,
            similarity=anchor.similarity,
            related=prompts.bullet(lines),
        )
        text = await self._call(ctx, "drugrel", prompts.DRUGREL_SYSTEM, user, trace, self.config.report_tokens)
        trace["reports"]["drugrel"] = text.strip()
        return f"Related-drug report (anchor {anchor.name}): {' '.join(text.split()) or '(empty)'}"

    async def _biorel_report(
        self, ctx: RunContext, mol: str, anchor: Anchor, related: list[Related], trace: dict[str, Any]
    ) -> str:
        """The biorel agent's summary of the 2-hop paths from the anchor to the related drugs, as a context line."""
        graph = self.graph
        assert graph is not None
        paths = graph.paths(anchor.drug, related, self.config.paths_per_drug)
        trace["kg"]["paths"] = paths
        trace["retrieved"].extend(paths)
        user = prompts.BIOREL.format(
            task=self.instruction,
            molecule=mol,
            anchor=anchor.name,
            similarity=anchor.similarity,
            paths=prompts.bullet(paths),
        )
        text = await self._call(ctx, "biorel", prompts.BIOREL_SYSTEM, user, trace, self.config.report_tokens)
        trace["reports"]["biorel"] = text.strip()
        return f"Knowledge-graph report (anchor {anchor.name}): {' '.join(text.split()) or '(empty)'}"

    # -- answering ---------------------------------------------------------------------------

    async def predict(self, samples: Sequence[Sample], ctx: RunContext) -> list[Prediction]:
        cfg = self.config
        out = []
        for sample in samples:
            molecule = sample.input
            assert isinstance(molecule, Molecule)
            trace: dict[str, Any] = {"llm": [], "calls": [], "planner": {}, "reports": {}, "retrieved": []}
            lines = await self._annotate(ctx, molecule, trace)
            context: list[str] = []
            if cfg.use_kg_team:
                context += await self._kg_team(ctx, molecule, trace)
            if cfg.use_mu:
                user = prompts.MU.format(
                    task=self.instruction, molecule=describe_molecule(molecule), annotations=prompts.bullet(lines)
                )
                text = await self._call(
                    ctx, "molecule_understanding", prompts.MU_SYSTEM, user, trace, cfg.report_tokens
                )
                trace["reports"]["molecule_understanding"] = text.strip()
                context.insert(0, f"Molecule report: {' '.join(text.split()) or '(empty)'}")
            else:
                context = lines + context
            system = self._predictor_system()
            user = self._question(molecule, context)
            schema = answer_schema(self.task_answer, self.labels) if cfg.constrained else None
            messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
            result = await ctx.model("predictor").chat(
                messages,
                temperature=cfg.temperature,
                max_tokens=answer_budget(self.task_answer),
                json_schema=schema,
                seed=ctx.seed,
            )
            trace["llm"].append(llm_trace("predictor", messages, result))
            trace["calls"].append("predictor")
            self.count("calls.predictor")
            trace["predictor_system_sha256"] = sha256_text(system)
            trace["max_tokens"] = answer_budget(self.task_answer)
            stated = (
                stated_labels(self.task_answer.kind, self.label_space, trace["retrieved"])
                if self.label_space is not None
                else None
            )
            if stated is not None:  # what the retrieved texts state (report --ceilings), gold unseen
                trace["context_labels"] = stated
            pred = to_prediction(self.task_answer, sample, result, self.labels, trace)
            self.count("answered" if pred.valid else "invalid")
            out.append(pred)
        return out

    def _question(self, molecule: Molecule, context: list[str]) -> str:
        from ddibench.toolkit.molecule_answers import question

        return question(self.task_answer, molecule, self.instruction, context)
