-- flagstream's PostgreSQL schema, version 1. Applied by the relay at start
-- under an advisory lock (store/postgres.rs); never edit a released
-- version: add a new one.

CREATE TABLE flagstream_envs (
    name text PRIMARY KEY,
    -- The environment's metadata (description, SDK keys as hashes); the
    -- head's fields below are authoritative over the copies in here.
    meta jsonb NOT NULL,
    epoch text NOT NULL,
    revision bigint NOT NULL,
    checksum bigint NOT NULL,
    committed_unix_ms bigint NOT NULL,
    audit_head text NOT NULL DEFAULT '',
    -- The database incarnation (system identifier, timeline) the epoch
    -- was made in: a restore or failover changes it.
    incarnation text NOT NULL DEFAULT ''
);

CREATE TABLE flagstream_items (
    env text NOT NULL REFERENCES flagstream_envs (name) ON DELETE CASCADE,
    kind smallint NOT NULL,
    key text NOT NULL,
    bytes bytea NOT NULL,
    PRIMARY KEY (env, kind, key)
);

-- One row per committed revision (the change feed), pruned to the
-- retention by one relay at a time.
CREATE TABLE flagstream_history (
    env text NOT NULL REFERENCES flagstream_envs (name) ON DELETE CASCADE,
    revision bigint NOT NULL,
    commit_id text NOT NULL,
    committed_unix_ms bigint NOT NULL,
    checksum bigint NOT NULL,
    bytes bigint NOT NULL,
    PRIMARY KEY (env, revision)
);

-- The items each revision wrote, as they were after it (NULL: deleted).
CREATE TABLE flagstream_history_items (
    env text NOT NULL,
    revision bigint NOT NULL,
    kind smallint NOT NULL,
    key text NOT NULL,
    bytes bytea,
    PRIMARY KEY (env, revision, kind, key),
    FOREIGN KEY (env, revision) REFERENCES flagstream_history (env, revision) ON DELETE CASCADE
);

CREATE TABLE flagstream_audit (
    env text NOT NULL REFERENCES flagstream_envs (name) ON DELETE CASCADE,
    revision bigint NOT NULL,
    seq integer NOT NULL,
    kind smallint NOT NULL,
    key text NOT NULL,
    record jsonb NOT NULL,
    PRIMARY KEY (env, revision, seq)
);
CREATE INDEX flagstream_audit_item ON flagstream_audit (env, kind, key, revision DESC);

CREATE TABLE flagstream_tokens (
    name text PRIMARY KEY,
    record jsonb NOT NULL
);

CREATE TABLE flagstream_settings (
    name text PRIMARY KEY,
    value text NOT NULL
);

-- Each write's request id, so a commit whose connection dropped is looked
-- up rather than guessed. Pruned after a day.
CREATE TABLE flagstream_requests (
    id text PRIMARY KEY,
    env text NOT NULL,
    revision bigint NOT NULL,
    at timestamptz NOT NULL DEFAULT now()
);

-- Each relay's propagation report per environment, so any relay can
-- answer for the whole deployment.
CREATE TABLE flagstream_relays (
    relay text NOT NULL,
    env text NOT NULL,
    epoch text NOT NULL,
    report bytea NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (relay, env)
);
