"""The judge config (``judge.yaml``): which judge, which metrics, prices, limits. Strict: unknown keys, wrong
types and out-of-range values are errors naming the file, the field and its line.

```yaml
provider: openai            # openai | anthropic | local
model: gpt-5-mini           # for provider local: lexical | embedding
base_url: null              # any OpenAI-compatible server (vLLM, Ollama, llama.cpp) for provider openai
max_tokens: 1024
effort: low                 # optional; temperature, top_p and thinking_budget likewise (each a pin)
concurrency: 16
spend_cap: 5.0              # USD; null for none
metrics: [faithfulness, answer_relevance, correctness, citations, nuggets]
criteria:                   # rubric correctness; default: central_fact, no_contradiction, complete
  - {name: central_fact, description: "States the reference's central fact.", weight: 2}
prices:                     # USD per million tokens
  gpt-5-mini: {input: 0.25, output: 2.0, cached_input: 0.025, batch_input: 0.125, batch_output: 1.0}
mode: sync                  # batch: the provider's batch API at batch prices (needs batch_input/batch_output)
batch: {poll_interval_s: 30, max_poll_interval_s: 300, max_wait_s: 3600}
cascade:                    # optional: this judge becomes tier 2 of a cascade for faithfulness and citations
  tier1: {model: lexical, threshold: 0.7}   # a local judge that emits a score (lexical | embedding)
  band: {lo: 0.2, hi: 0.8}  # on tier 1's P(bad) = 1 - score: < lo auto-pass, > hi auto-fail, else tier 2
claims: {relevance: claims}  # optional: `judge claims` relevance rule (claims | spans), see judges/claims.py
```
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from ragassay.errors import InputError
from ragassay.judges.metrics import DEFAULT_CRITERIA, METRICS, Criterion, suite_pins
from ragassay.yamlio import line_of, load_yaml_node


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)


class CriterionConfig(_Strict):
    name: str = Field(min_length=1, pattern=r"^[a-z][a-z0-9_]*$")
    description: str = Field(min_length=1)
    weight: float = Field(default=1.0, gt=0)


class RetryConfig(_Strict):
    max_attempts: int = Field(default=5, ge=1, le=100)
    timeout_s: float = Field(default=60.0, gt=0)
    item_deadline_s: float = Field(default=300.0, gt=0)
    backoff_base_s: float = Field(default=0.5, ge=0)
    backoff_max_s: float = Field(default=30.0, ge=0)
    retry_after_max_s: float = Field(default=60.0, ge=0)


class BatchConfig(_Strict):
    poll_interval_s: float = Field(default=30.0, gt=0)
    max_poll_interval_s: float = Field(default=300.0, gt=0)
    max_wait_s: float = Field(default=3600.0, gt=0, le=7 * 86400)


class CascadeTier1Config(_Strict):
    """Tier 1 of a cascade: a local judge, because the band routes on its score."""

    provider: str = "local"
    model: str
    threshold: float | None = Field(default=None, ge=-1, le=1)

    @field_validator("provider")
    @classmethod
    def _local(cls, v: str) -> str:
        if v != "local":
            raise ValueError(f"tier 1 of a cascade must be a local judge that emits a score (provider local, model "
                             f"lexical | embedding), got {v!r}: an LLM verdict has no score to route by")
        return v

    @field_validator("model")
    @classmethod
    def _scored(cls, v: str) -> str:
        if v not in _LOCAL_THRESHOLD:
            raise ValueError(f"tier 1 emits a support score: 'lexical' or 'embedding', got {v!r}")
        return v

    @model_validator(mode="after")
    def _threshold_range(self) -> CascadeTier1Config:
        if self.model == "lexical" and self.threshold is not None and self.threshold <= 0:
            raise ValueError(f"threshold: a lexical threshold is a share of terms in (0, 1], got {self.threshold!r}")
        return self

    def resolved_threshold(self) -> float:
        return self.threshold if self.threshold is not None else _LOCAL_THRESHOLD[self.model]


class BandConfig(_Strict):
    lo: float = Field(ge=0, le=1)
    hi: float = Field(ge=0, le=1)

    @model_validator(mode="after")
    def _ordered(self) -> BandConfig:
        if not self.lo < self.hi:
            raise ValueError(f"lo ({self.lo!r}) must be below hi ({self.hi!r}): P(bad) below lo auto-passes, above "
                             "hi auto-fails, and tier 2 judges the band between them")
        return self


class CascadeConfig(_Strict):
    """A two-tier cascade over the support judgements (spec §11.7–§11.8): tier 1 scores every claim, the band
    on P(bad) = 1 - score decides it or escalates it to tier 2 (the judge the enclosing config names)."""

    tier1: CascadeTier1Config
    band: BandConfig

    @field_validator("band")
    @classmethod
    def _agrees_with_tier1(cls, band: BandConfig, info: ValidationInfo) -> BandConfig:
        # Tier 1's own verdict is what an auto-pass or auto-fail stores (its quote included), so it must say
        # supported on every auto-pass (score > 1 - lo) and not supported on every auto-fail (score < 1 - hi).
        tier1 = info.data.get("tier1")
        if tier1 is None:
            return band
        thr = tier1.resolved_threshold()
        if not 1 - band.hi <= thr <= 1 - band.lo:
            given = "" if tier1.threshold is not None else f" (the {tier1.model} default)"
            raise ValueError(f"tier 1 must itself call every auto-pass supported and every auto-fail not supported: "
                             f"its threshold {thr!r}{given} must lie in [1 - hi, 1 - lo] = [{1 - band.hi:.4g}, "
                             f"{1 - band.lo:.4g}]; set cascade.tier1.threshold in that range or move the band")
        return band

    def pins(self) -> dict[str, Any]:
        """The flat pin of the cascade (folded into the judge's settings pin by :func:`judge_settings`)."""
        return {"tier1": f"local:{self.tier1.model}", "tier1_threshold": self.tier1.resolved_threshold(),
                "lo": self.band.lo, "hi": self.band.hi}


# The judge metrics a cascade routes (through their support judgements); every other metric is tier 2's alone.
CASCADE_METRICS = ("faithfulness", "citations")


class ClaimsConfig(_Strict):
    """How ``judge claims`` scores (RAGChecker's claim metrics, :mod:`ragassay.judges.claims`): the relevance
    rule of a retrieved unit — ``claims`` (it entails a ground-truth claim, RAGChecker's) or ``spans`` (it
    overlaps golden evidence). A pin of the claims judge; the other judge metrics ignore it."""

    relevance: Literal["claims", "spans"] = "claims"


class JudgeConfig(_Strict):
    provider: Literal["openai", "anthropic", "local"]
    model: str = Field(min_length=1)
    base_url: str | None = None
    api_key_env: str | None = Field(default=None, pattern=r"^[A-Z_][A-Z0-9_]*$")
    max_tokens: int = Field(default=1024, ge=1)
    max_tokens_param: Literal["max_completion_tokens", "max_tokens"] = "max_completion_tokens"
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, gt=0, le=1)
    effort: str | None = Field(default=None, min_length=1)
    thinking_budget: int | None = Field(default=None, ge=1024)
    concurrency: int = Field(default=8, ge=1, le=1024)
    spend_cap: float | None = Field(default=None, ge=0)
    metrics: list[Literal["faithfulness", "answer_relevance", "correctness", "citations", "nuggets"]] = Field(
        default_factory=lambda: list(METRICS), min_length=1)
    criteria: list[CriterionConfig] | None = None
    prices: dict[str, dict[str, float]] = Field(default_factory=dict)
    retry: RetryConfig = Field(default_factory=RetryConfig)
    mode: Literal["sync", "batch"] = "sync"
    batch: BatchConfig = Field(default_factory=BatchConfig)
    threshold: float | None = Field(default=None, ge=-1, le=1)
    numeric: bool = True
    cascade: CascadeConfig | None = None
    claims: ClaimsConfig | None = None

    @field_validator("cascade")
    @classmethod
    def _routes_something(cls, cascade: CascadeConfig | None, info: ValidationInfo) -> CascadeConfig | None:
        metrics = info.data.get("metrics")
        if cascade is not None and metrics is not None and not set(CASCADE_METRICS) & set(metrics):
            raise ValueError(f"a cascade routes only the support judgements behind {' and '.join(CASCADE_METRICS)}; "
                             f"metrics {list(metrics)} names neither: add one or remove the cascade")
        return cascade

    @model_validator(mode="after")
    def _consistent(self) -> JudgeConfig:
        if self.provider == "local":
            if self.model not in ("lexical", "embedding"):
                raise ValueError(f"model: a local judge is 'lexical' or 'embedding', got {self.model!r}")
            llm_only = sorted({"answer_relevance", "correctness", "nuggets"} & set(self.metrics))
            if llm_only:
                raise ValueError(f"metrics: {llm_only} need an LLM judge; a local judge scores faithfulness "
                                 "and citations")
        else:
            if self.model not in self.prices:
                raise ValueError(f"prices: no price for model {self.model!r}; add {self.model}: {{input: ..., "
                                 "output: ...}} in USD per million tokens (0 for a local server)")
            if self.threshold is not None:
                raise ValueError("threshold: only a local judge takes a threshold")
            price = self.prices[self.model]
            if self.mode == "batch" and ("batch_input" not in price or "batch_output" not in price):
                raise ValueError(f"prices: mode batch needs {self.model}: {{batch_input: ..., batch_output: ...}} "
                                 "(the batch API's prices in USD per million tokens)")
        if self.provider == "local":
            llm_settings = [k for k in SETTINGS if k != "max_tokens" and getattr(self, k) is not None]
            if llm_settings:
                raise ValueError(f"{llm_settings[0]}: a local judge has no sampling settings; remove it")
        if self.thinking_budget is not None and self.thinking_budget >= self.max_tokens:
            raise ValueError(f"thinking_budget: {self.thinking_budget} must be below max_tokens ({self.max_tokens}): "
                             "the thinking tokens count against max_tokens")
        if self.base_url is not None and self.provider == "local":
            raise ValueError("base_url: a local judge makes no calls")
        if self.mode == "batch" and self.provider == "local":
            raise ValueError("mode: a local judge makes no calls; batch is for provider anthropic or openai")
        if self.criteria is not None:
            names = [c.name for c in self.criteria]
            if len(set(names)) != len(names) or not names:
                raise ValueError("criteria: give at least one criterion, each name once")
        if len(set(self.metrics)) != len(self.metrics):
            raise ValueError("metrics: list each metric once")
        return self

    def rubric_criteria(self) -> tuple[Criterion, ...]:
        if self.criteria is None:
            return DEFAULT_CRITERIA
        return tuple(Criterion(c.name, c.description, c.weight) for c in self.criteria)

    def pins(self) -> dict[str, Any]:
        """The judge pins a run records: model (with provider), rubric sha, prompt sha and the sampling.

        A cascade keeps tier 2's ``judge_model``, records its tiers and band as ``pins["cascade"]`` (so they
        enter the settings pin) and folds them into the rubric and prompt shas too: a cascaded run never
        shares a pin set with the same judge alone."""
        from ragassay.judges.protocol import sha256_text

        if self.provider == "local":
            thr = self.threshold if self.threshold is not None else _LOCAL_THRESHOLD[self.model]
            rubric = sha256_text(f"local:{self.model}@{thr!r};numeric={self.numeric}")
            out = {"judge_model": f"local:{self.model}", "rubric_sha": rubric, "prompt_sha": rubric,
                   "provider": "local", "threshold": thr, "metrics": list(self.metrics)}
        else:
            rubric, prompt = suite_pins(self.rubric_criteria(), self.metrics)
            out = {"judge_model": f"{self.provider}:{self.model}", "rubric_sha": rubric, "prompt_sha": prompt,
                   "provider": self.provider, **{k: getattr(self, k) for k in SETTINGS},
                   "structured_output": STRUCTURED_OUTPUT, "metrics": list(self.metrics)}
        if self.cascade is not None:
            out["cascade"] = self.cascade.pins()
            tag = "cascade:" + ";".join(f"{k}={v!r}" for k, v in sorted(out["cascade"].items())) + "\x1e"
            out["rubric_sha"] = sha256_text(tag + out["rubric_sha"])
            out["prompt_sha"] = sha256_text(tag + out["prompt_sha"])
        out["settings"] = judge_settings(out)
        return out


_LOCAL_THRESHOLD = {"lexical": 0.7, "embedding": 0.8}
# The sampling settings of an LLM judge; each decides the verdicts, so each is a pin.
SETTINGS = ("max_tokens", "temperature", "top_p", "effort", "thinking_budget")
# How verdicts are asked for: a strict JSON schema on both providers (Anthropic output_config.format, OpenAI
# response_format json_schema). A pin, so a client that asked otherwise could not share a validation.
STRUCTURED_OUTPUT = "json_schema"


def judge_settings(pins: dict[str, Any] | None) -> str | None:
    """The settings pin of a judge: every setting that can move a verdict and is not already in the model,
    rubric or prompt sha (sampling, thinking budget, structured-output mode, a cascade's tiers and band), as
    one canonical ``key=value; ...`` text (unset settings left out). None for no judge. Runs judged before the
    settings pin existed are read the same way from the keys they stored (they all used a JSON schema)."""
    if not isinstance(pins, dict):
        return None
    if isinstance(pins.get("settings"), str):
        return pins["settings"]
    parts = {}
    if pins.get("provider") != "local" and not str(pins.get("judge_model", "")).startswith("local:"):
        parts = {k: pins.get(k) for k in SETTINGS}
        parts["structured_output"] = pins.get("structured_output") or STRUCTURED_OUTPUT
    cascade = pins.get("cascade")
    if isinstance(cascade, dict):
        parts["cascade"] = ",".join(f"{k}={cascade[k]}" for k in sorted(cascade))
    return "; ".join(f"{k}={v!r}" if isinstance(v, float) else f"{k}={v}"
                     for k, v in sorted(parts.items()) if v is not None) or "none"


def load_judge_config(path: str | Path) -> JudgeConfig:
    """The judge config in ``path``; every problem is one ``file:line: field: message`` line."""
    p = Path(path)
    if not p.is_file():
        raise InputError(f"{p}: no such judge config file")
    data, node = load_yaml_node(p, "judge config")
    if not isinstance(data, dict):
        raise InputError(f"{p}: a judge config is a mapping (provider, model, metrics, prices, ...), got "
                         f"{type(data).__name__}; see docs/judges.md")
    try:
        cfg = JudgeConfig.model_validate(data)
    except ValidationError as e:
        lines = []
        for x in e.errors():
            loc = tuple(x["loc"])
            line = line_of(node, loc) if node is not None else None
            where = f"{p}:{line}" if line else str(p)
            field = ".".join(map(str, loc))
            lines.append(f"{where}: {field + ': ' if field else ''}{x['msg'].removeprefix('Value error, ')}")
        raise InputError(f"{p}: invalid judge config; fix these fields (see docs/judges.md):\n"
                         + "\n".join(lines)) from e
    from ragassay.judges.providers import AnthropicJudge, OpenAIJudge, price_table

    price_table(cfg.prices, where=f"{p}: prices")
    if cfg.provider != "local":
        client = AnthropicJudge if cfg.provider == "anthropic" else OpenAIJudge
        bad = client.unsupported_settings({k: getattr(cfg, k) for k in SETTINGS if k != "max_tokens"})
        if bad:
            def where(problem: str) -> str:
                line = line_of(node, (problem.partition(":")[0],)) if node is not None else None
                return f"{p}:{line}" if line else str(p)

            raise InputError(f"{p}: invalid judge config; fix these fields (see docs/judges.md):\n"
                             + "\n".join(f"{where(x)}: {x}" for x in bad))
    return cfg


def _local_support(model: str, threshold: float | None):
    from ragassay.judges.local import EmbeddingSupport, LexicalSupport

    thr = threshold if threshold is not None else _LOCAL_THRESHOLD[model]
    return LexicalSupport(thr) if model == "lexical" else EmbeddingSupport(thr)


def build_tier1(cfg: JudgeConfig):
    """Tier 1 of the config's cascade (a local support judge with a score); None without a cascade."""
    if cfg.cascade is None:
        return None
    return _local_support(cfg.cascade.tier1.model, cfg.cascade.tier1.threshold)


def build_judge(cfg: JudgeConfig, store=None):
    """The client (LLM provider) or local support judge a config names (for a cascade: tier 2)."""
    if cfg.provider == "local":
        return _local_support(cfg.model, cfg.threshold)
    import os

    from ragassay.judges.protocol import Sampling
    from ragassay.judges.providers import AnthropicJudge, BatchPolicy, OpenAIJudge, RetryPolicy, price_table

    sampling = Sampling(cfg.model, **{k: getattr(cfg, k) for k in SETTINGS})
    kwargs: dict[str, Any] = {"base_url": cfg.base_url, "concurrency": cfg.concurrency,
                              "spend_cap": cfg.spend_cap, "store": store,
                              "retry": RetryPolicy(**cfg.retry.model_dump()), "mode": cfg.mode,
                              "batch": BatchPolicy(**cfg.batch.model_dump())}
    if cfg.api_key_env is not None:
        key = os.environ.get(cfg.api_key_env)
        if not key:
            raise InputError(f"api_key_env: ${cfg.api_key_env} is not set; export the key, or remove "
                             "api_key_env to use the provider's default variable")
        kwargs["api_key"] = key
    if cfg.provider == "anthropic":
        return AnthropicJudge(sampling, price_table(cfg.prices), **kwargs)
    return OpenAIJudge(sampling, price_table(cfg.prices), max_tokens_param=cfg.max_tokens_param, **kwargs)


__all__ = ["CASCADE_METRICS", "SETTINGS", "BandConfig", "CascadeConfig", "CascadeTier1Config", "ClaimsConfig",
           "JudgeConfig", "build_judge", "build_tier1", "judge_settings", "load_judge_config"]
