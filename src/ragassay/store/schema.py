"""The results store's tables, as DDL and as the Arrow schema a batch of result rows is cast to.

One row per (run, query, trial, metric) in ``results``; the pins that make runs comparable (dataset version,
corpus digest, config sha, metric version, judge model, rubric sha, hit rule, gain, ties) live once per run in
``runs``; ``query_status`` records which (query, trial) pairs finished, written in the same transaction as
their result rows so that "done" implies "all rows present". ``judge_calls`` holds one row per judge call
made (or answered from the cache) for a (run, query, trial, item, request), and is the judge cache: a paid
call's ``request_sha`` is never paid again, and its row is never replaced. ``judge_validations`` holds one row per judge validation against human
labels. ``docs/store.md`` documents the first four tables, ``docs/judges.md`` the judge calls and
``docs/judge-validation.md`` the validations.

Version 2 dropped the primary key of ``results``: DuckDB kept its index (about 90 bytes per row) in memory
until the next checkpoint and rewrote it whole at every checkpoint, which made a 2.3 M-row import hold
~210 MB of index and a store file five times the size of its data. Uniqueness of (run, query, trial, metric)
is now kept by the writer (``Store.write_batch``) and checked once per run by ``Store.finish_run``. A
version-1 store keeps its key and is read and written as before.
"""

from __future__ import annotations

import pyarrow as pa

# Bump when a table or column changes; an unknown version refuses to open rather than misread data.
SCHEMA_VERSION = 2
# Versions this ragassay reads and writes; in version 1 ``results`` carries its primary key.
READABLE_VERSIONS = (1, 2)
KEYED_RESULTS_VERSION = 1

RUN_STATUSES = ("running", "complete", "failed")
QUERY_STATUSES = ("done", "error")

DDL = f"""
CREATE TABLE schema_info (
    version          INTEGER NOT NULL,
    created_at       TIMESTAMP NOT NULL,
    ragassay_version VARCHAR
);
CREATE TABLE runs (
    run_id              VARCHAR PRIMARY KEY,
    name                VARCHAR NOT NULL,
    status              VARCHAR NOT NULL CHECK (status IN {RUN_STATUSES}),
    created_at          TIMESTAMP NOT NULL,
    finished_at         TIMESTAMP,
    git_sha             VARCHAR,
    dataset_version     VARCHAR,
    corpus_digest       VARCHAR,
    golden_sha256       VARCHAR,
    config              JSON,
    config_sha          VARCHAR,
    metric_version      VARCHAR,
    judge_model         VARCHAR,
    rubric_sha          VARCHAR,
    gain                VARCHAR,
    relevance_threshold INTEGER,
    hit_rule            VARCHAR,
    ties                VARCHAR,
    trials              INTEGER,
    n_queries           INTEGER,
    source              VARCHAR NOT NULL,
    ragassay_version    VARCHAR,
    extra               JSON
);
CREATE TABLE results (
    run_id          VARCHAR NOT NULL,
    query_id        VARCHAR NOT NULL,
    trial           INTEGER NOT NULL,
    metric          VARCHAR NOT NULL,
    value           DOUBLE,
    defined         BOOLEAN NOT NULL,
    stratum         VARCHAR,
    judged_fraction DOUBLE,
    latency_ms      DOUBLE,
    tokens_in       INTEGER,
    tokens_out      INTEGER,
    cost            DOUBLE,
    trace_id        VARCHAR
);
CREATE TABLE query_status (
    run_id     VARCHAR NOT NULL,
    query_id   VARCHAR NOT NULL,
    trial      INTEGER NOT NULL,
    status     VARCHAR NOT NULL CHECK (status IN {QUERY_STATUSES}),
    error      VARCHAR,
    written_at TIMESTAMP NOT NULL,
    PRIMARY KEY (run_id, query_id, trial)
);
"""

TABLES = ("schema_info", "runs", "results", "query_status")

JUDGE_OUTCOMES = ("ok", "cannot_judge", "refused", "truncated", "malformed", "error")
# Outcomes that came back in a 2xx response and so were billed; only these answer a later identical request.
# An `error` (nothing usable came back) is retried by the next run instead.
JUDGE_PAID_OUTCOMES = ("ok", "cannot_judge", "refused", "truncated", "malformed")

# Added without a schema version bump: stores written before it lack only this table, which is created on
# the next writable open (a read-only open sees no judge calls), and an older ragassay ignores it.
JUDGE_CALLS_DDL = f"""
CREATE TABLE IF NOT EXISTS judge_calls (
    run_id         VARCHAR NOT NULL,
    query_id       VARCHAR NOT NULL,
    trial          INTEGER NOT NULL,
    item           VARCHAR NOT NULL,
    judge          VARCHAR NOT NULL,
    request_sha    VARCHAR NOT NULL,
    provider       VARCHAR NOT NULL,
    model          VARCHAR NOT NULL,
    rubric_sha     VARCHAR,
    prompt_sha     VARCHAR,
    temperature    DOUBLE,
    effort         VARCHAR,
    max_tokens     INTEGER,
    outcome        VARCHAR NOT NULL CHECK (outcome IN {JUDGE_OUTCOMES}),
    reason         VARCHAR,
    verdict        JSON,
    stop_reason    VARCHAR,
    input_tokens   INTEGER,
    output_tokens  INTEGER,
    cached_tokens  INTEGER,
    cost           DOUBLE,
    latency_ms     DOUBLE,
    attempts       INTEGER NOT NULL,
    cache_hit      BOOLEAN NOT NULL,
    created_at     TIMESTAMP NOT NULL,
    PRIMARY KEY (run_id, query_id, trial, item, request_sha)
);
CREATE INDEX IF NOT EXISTS judge_calls_request_sha ON judge_calls (request_sha);
"""
# The judge cache is append-only: a paid call (any outcome but `error`, not a cache hit) is never replaced
# or deleted. The key holds the request sha, so the same item asked under other settings is a row of its
# own beside the first; for one key, a new record replaces only an `error` (not billed) or a cache hit.
# Stores written before the sha was in the key are moved to this key on their next writable open.
JUDGE_CALLS_KEY = ("run_id", "query_id", "trial", "item", "request_sha")

JUDGE_CALL_COLUMNS = (
    "run_id",
    "query_id",
    "trial",
    "item",
    "judge",
    "request_sha",
    "provider",
    "model",
    "rubric_sha",
    "prompt_sha",
    "temperature",
    "effort",
    "max_tokens",
    "outcome",
    "reason",
    "verdict",
    "stop_reason",
    "input_tokens",
    "output_tokens",
    "cached_tokens",
    "cost",
    "latency_ms",
    "attempts",
    "cache_hit",
    "created_at",
)

# A judge measured against human labels (docs/judge-validation.md): one row per validation, keyed by the judge
# pins it validated, so `gate` can ask "was this judge validated, and did it meet the floor?". Added like
# judge_calls: no version bump, created on the next writable open, absent = no validations.
JUDGE_VALIDATIONS_DDL = """
CREATE TABLE IF NOT EXISTS judge_validations (
    validation_id     VARCHAR PRIMARY KEY,
    judge_model       VARCHAR NOT NULL,
    rubric_sha        VARCHAR NOT NULL,
    prompt_sha        VARCHAR NOT NULL,
    kind              VARCHAR NOT NULL,
    metrics           JSON,
    label_set         VARCHAR,
    label_set_version VARCHAR NOT NULL,
    n_items           INTEGER NOT NULL,
    n                 INTEGER NOT NULL,
    kappa             DOUBLE,
    kappa_low         DOUBLE,
    kappa_high        DOUBLE,
    agreement         DOUBLE,
    min_class_recall  DOUBLE,
    passes_kappa      DOUBLE,
    figures           JSON NOT NULL,
    calls             JSON,
    cascade           JSON,
    created_at        TIMESTAMP NOT NULL,
    judge_settings    VARCHAR,
    scale             VARCHAR,
    labelled_by       VARCHAR
);
"""
# Columns added to judge_validations after it first shipped: added on the next writable open (NULL in older
# records, which therefore match no judge's settings pin until validated again); read as NULL from an older
# store opened read-only.
JUDGE_VALIDATION_ADDED = {"judge_settings": "VARCHAR", "scale": "VARCHAR", "labelled_by": "VARCHAR"}

JUDGE_VALIDATION_COLUMNS = (
    "validation_id", "judge_model", "rubric_sha", "prompt_sha", "kind", "metrics", "label_set",
    "label_set_version", "n_items", "n", "kappa", "kappa_low", "kappa_high", "agreement", "min_class_recall",
    "passes_kappa", "figures", "calls", "cascade", "created_at", "judge_settings", "scale", "labelled_by",
)
JUDGE_VALIDATION_JSON = ("metrics", "figures", "calls", "cascade")

# A provider batch (Anthropic Message Batches, OpenAI Batch) submitted for judge calls: one row per batch, its
# id recorded the moment the provider returns it, so a killed judge run resumes polling that batch instead of
# paying for the same requests again. Each request's custom_id is its request_sha. `billed_shas` are the
# requests the collected batch answered with a billed outcome (priced at batch rates). Added like judge_calls:
# no version bump, created on the next writable open, absent = no batches.
JUDGE_BATCH_STATUSES = ("submitted", "collected", "lost")
JUDGE_BATCHES_DDL = f"""
CREATE TABLE IF NOT EXISTS judge_batches (
    batch_id        VARCHAR PRIMARY KEY,
    provider        VARCHAR NOT NULL,
    model           VARCHAR NOT NULL,
    run_id          VARCHAR NOT NULL,
    request_shas    JSON NOT NULL,
    n_requests      INTEGER NOT NULL,
    worst_case      DOUBLE NOT NULL,
    status          VARCHAR NOT NULL CHECK (status IN {JUDGE_BATCH_STATUSES}),
    provider_status VARCHAR,
    billed_shas     JSON,
    created_at      TIMESTAMP NOT NULL,
    updated_at      TIMESTAMP NOT NULL
);
"""
JUDGE_BATCH_COLUMNS = ("batch_id", "provider", "model", "run_id", "request_shas", "n_requests", "worst_case",
                       "status", "provider_status", "billed_shas", "created_at", "updated_at")

# Columns a caller supplies per result row (run_id comes from the call, `defined` is derived from value).
ROW_SCHEMA = pa.schema(
    [
        ("query_id", pa.string()),
        ("trial", pa.int32()),
        ("metric", pa.string()),
        ("value", pa.float64()),
        ("stratum", pa.string()),
        ("judged_fraction", pa.float64()),
        ("latency_ms", pa.float64()),
        ("tokens_in", pa.int32()),
        ("tokens_out", pa.int32()),
        ("cost", pa.float64()),
        ("trace_id", pa.string()),
    ]
)
REQUIRED_ROW_COLUMNS = ("query_id", "metric", "value")

RESULT_COLUMNS = (
    "run_id",
    "query_id",
    "trial",
    "metric",
    "value",
    "defined",
    "stratum",
    "judged_fraction",
    "latency_ms",
    "tokens_in",
    "tokens_out",
    "cost",
    "trace_id",
)
