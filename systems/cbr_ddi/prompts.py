"""CBR-DDI's prompts: drug description, mechanistic insight, refinement, and the two-tier prediction."""

from __future__ import annotations

DESCRIBE_SYSTEM = "You are a pharmacology reference. Answer factually and concisely."
DESCRIBE = (
    "Write a concise functional description of the drug {name} (DrugBank {drugbank_id}): its class, "
    "mechanism of action, how it is metabolised, and its main effects. At most three sentences."
)

DESCRIBE_NO_ID = (  # a drug without a DrugBank id (TWOSIDES: PubChem compounds)
    "Write a concise functional description of the drug {name}: its class, "
    "mechanism of action, how it is metabolised, and its main effects. At most three sentences."
)

INSIGHT_SYSTEM = "You are an expert clinical pharmacologist who explains drug-drug interactions."
INSIGHT = """Drug A: {head}. {head_description}
Drug B: {tail}. {tail_description}
Associations between them in a biomedical knowledge graph:
{paths}
Known interaction: {interaction}
In one or two sentences, explain the mechanism behind this interaction, using the descriptions and the associations. If they give no grounds for an explanation, answer NONE."""

REFINE = """Your explanation of a drug pair led to a wrong prediction.
Drug A: {head}. {head_description}
Drug B: {tail}. {tail_description}
Associations between them:
{paths}
Your explanation: {insight}
You predicted: {predicted}
The correct interaction is: {interaction}
Write a corrected explanation of the mechanism in one or two sentences, or NONE if there are no grounds."""

PREDICT_SYSTEM = """You are an expert clinical pharmacologist predicting drug-drug interactions.
You are given solved cases of similar drug pairs, then a query pair with its known associations and a list of candidate interaction types. In every candidate, "Drug A" and "Drug B" are the two query drugs in the order given.
Reason from the cases and associations, then answer with JSON only: {"mechanism": "<one or two sentences>", "type": N}, where N is the number of the candidate."""

CASE = """Case {index}: Drug A = {head} ({head_description}) Drug B = {tail} ({tail_description})
Mechanism: {insight}
Interaction: {interaction}"""

QUERY = """{cases}Query pair:
Drug A: {head}. {head_description}
Drug B: {tail}. {tail_description}
{paths}
Candidate interaction types:
{candidates}
Which candidate describes what happens when Drug A is combined with Drug B?"""

NO_PATHS = "No associations between them are known."
NO_INSIGHT = "(no explanation)"


def paths_block(paths: list[str]) -> str:
    return "\n".join(f"- {p}" for p in paths) if paths else NO_PATHS


def clean_insight(text: str) -> str:
    """The insight as stored: stripped, and empty when the LLM declined (NONE) or wrote nothing."""
    text = " ".join(text.split())
    return "" if not text or text.upper().strip(" .") in ("NONE", "N/A", "NO GROUNDS") else text


# -- label sets (TWOSIDES): the pair's side effects instead of one interaction type -------------------

PREDICT_SYSTEM_TOPK = """You are an expert clinical pharmacologist predicting the side effects of drug combinations.
You are given solved cases of similar drug pairs, then a query pair known to interact, with its known associations and a list of candidate side effects.
Reason from the cases and associations, then answer with JSON only: {{"mechanism": "<one or two sentences>", "side_effects": ["...", ...]}}, with exactly {k} different names copied from the candidates, the most likely first."""

QUERY_TOPK = """{cases}Query pair:
Drug A: {head}. {head_description}
Drug B: {tail}. {tail_description}
{paths}
Candidate side effects:
{candidates}
Which {k} of the candidate side effects does taking Drug A together with Drug B most likely cause?"""


def side_effects_text(names: list[str]) -> str:
    """How a case states its label set ("Known interaction: ..." in the insight and refinement prompts)."""
    return "taken together they cause the side effects " + ", ".join(names)
