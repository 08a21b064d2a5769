"""ddibench beside the tools its users already run: Hugging Face datasets (export a task's data) and
lm-evaluation-harness (export tasks as lm-eval configs, import lm-eval samples as ddibench runs)."""
