"""Analyses over stored runs: scoring, comparison, gating, summaries, the demo and report data."""
