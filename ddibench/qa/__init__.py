"""Free-text question answering: scorers, the LLM judge and SelfCheckGPT."""
