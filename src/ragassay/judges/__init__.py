"""Judges: typed verdicts with counted outcomes (``protocol``), LLM judge clients (``providers``) and the
offline lexical judge (``local``). See docs/judges.md."""
