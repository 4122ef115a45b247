"""Importers for other tools' formats: BEIR datasets (corpus + golden set), OpenTelemetry spans and DeepEval test
cases (traces)."""
