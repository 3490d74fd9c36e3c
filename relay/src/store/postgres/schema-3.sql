-- flagstream's PostgreSQL schema, version 3. Applied by the relay at start
-- under an advisory lock (store/postgres.rs); never edit a released
-- version: add a new one.
--
-- Usage summaries the relays of one database pass to each other
-- (PROTOCOL.md "Usage summaries"): each row is one summary of what one
-- relay's own subscribers (SDKs and replicas) reported since its previous
-- row for the environment, as `UsageSummary` protobuf bytes (at most
-- 512 KiB). Every relay reads the rows of the others once (by `seq`, per
-- writer); rows older than an hour are deleted. No sequence object: a role
-- with table privileges only can write it.

CREATE TABLE flagstream_usage (
    -- The writing relay process (random per start).
    process text NOT NULL,
    -- The writer: the process and a generation. A process that could not
    -- confirm a row (an error, a timeout) writes on as a new writer, so a
    -- row committed late never sits below rows a reader has taken.
    writer text NOT NULL,
    -- 1, 2, 3, ... per writer, each row inserted once the previous one
    -- committed.
    seq bigint NOT NULL,
    -- The writing relay's persistent id (`<data-dir>/relay-id`): the SDK
    -- instances it reports are counted under it, whatever process wrote,
    -- and a restarted relay knows its own earlier rows by it.
    node text NOT NULL,
    env text NOT NULL,
    summary bytea NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (writer, seq)
);

CREATE INDEX flagstream_usage_created_at ON flagstream_usage (created_at);
