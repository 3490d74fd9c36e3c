-- flagstream's PostgreSQL schema, version 3. Applied by the relay at start
-- under an advisory lock (store/postgres.rs); never edit a released
-- version: add a new one.
--
-- Usage summaries the relays of one database pass to each other
-- (PROTOCOL.md "Usage summaries"): each row is one summary of what one
-- relay's own subscribers (SDKs and replicas) reported since its previous
-- row for the environment, as `UsageSummary` protobuf bytes (at most
-- 512 KiB). Every relay reads the rows of the others once (by `seq`, per
-- writing relay); rows older than an hour are deleted. No sequence object:
-- a role with table privileges only can write it.

CREATE TABLE flagstream_usage (
    -- The writing relay's process id (random per start, as in
    -- flagstream_relays).
    relay text NOT NULL,
    -- 1, 2, 3, ... per writing relay, each row inserted only after the
    -- previous one committed: a reader never finds a gap later filled.
    seq bigint NOT NULL,
    env text NOT NULL,
    summary bytea NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (relay, seq)
);

CREATE INDEX flagstream_usage_created_at ON flagstream_usage (created_at);
