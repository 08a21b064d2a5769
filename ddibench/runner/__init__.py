"""Runs: journal, resume, scoring, results and their manifest."""
