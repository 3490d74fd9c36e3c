-- flagstream's PostgreSQL schema, version 2. Applied by the relay at start
-- under an advisory lock (store/postgres.rs); never edit a released
-- version: add a new one.
--
-- A deleted environment's audit records are kept, moved to an archive name
-- no environment can have (`NAME.deleted.UNIX_MS`), so they no longer go
-- with the environment's row; the archived chain's head is kept here.

ALTER TABLE flagstream_audit DROP CONSTRAINT IF EXISTS flagstream_audit_env_fkey;

CREATE TABLE flagstream_audit_archives (
    name text PRIMARY KEY,
    -- The deleted environment's last revision and the hash of its last
    -- audit record (the deletion's).
    revision bigint NOT NULL,
    head text NOT NULL
);
