"""Importers for other tools' formats: BEIR datasets (corpus + golden set) and OpenTelemetry spans (traces)."""
