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
```
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

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
        """The judge pins a run records: model (with provider), rubric sha, prompt sha and the sampling."""
        if self.provider == "local":
            from ragassay.judges.protocol import sha256_text

            thr = self.threshold if self.threshold is not None else _LOCAL_THRESHOLD[self.model]
            rubric = sha256_text(f"local:{self.model}@{thr!r};numeric={self.numeric}")
            return {"judge_model": f"local:{self.model}", "rubric_sha": rubric, "prompt_sha": rubric,
                    "provider": "local", "threshold": thr, "metrics": list(self.metrics)}
        rubric, prompt = suite_pins(self.rubric_criteria(), self.metrics)
        out = {"judge_model": f"{self.provider}:{self.model}", "rubric_sha": rubric, "prompt_sha": prompt,
               "provider": self.provider, **{k: getattr(self, k) for k in SETTINGS},
               "structured_output": STRUCTURED_OUTPUT, "metrics": list(self.metrics)}
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


def build_judge(cfg: JudgeConfig, store=None):
    """The client (LLM provider) or local support judge a config names."""
    if cfg.provider == "local":
        from ragassay.judges.local import EmbeddingSupport, LexicalSupport

        thr = cfg.threshold if cfg.threshold is not None else _LOCAL_THRESHOLD[cfg.model]
        return LexicalSupport(thr) if cfg.model == "lexical" else EmbeddingSupport(thr)
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


__all__ = ["SETTINGS", "JudgeConfig", "build_judge", "judge_settings", "load_judge_config"]
