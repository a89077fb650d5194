-- Converts a D1 database of the existing agent-coord Worker (its migrations
-- 0001_state.sql + 0002_machine_scopes_and_writer_attribution.sql) into this
-- Worker's schema (migrations/0001_state.sql), in place, in one transaction.
--
-- Run it through worker/bin/upgrade-from-agent-coord, which checks first that
-- the database really is in agent-coord's schema (it is not idempotent on its
-- own) and then applies this Worker's migrations. docs/worker-upgrade.md.
--
-- state: the same columns already (path, data, version, updated_by,
--   updated_at): records and their versions are kept as they are, untouched.
-- state_tombstones: new; starts empty, so only deletes from now on are
--   remembered (a path deleted before the upgrade restarts at version 1, as
--   the existing Worker always did).
-- machines: rebuilt (a handful of rows) with token_sha256 for token_hash (the
--   same SHA-256 hex of the same tokens), scopes and revocations kept, our
--   '[]' (nothing) defaults instead of '[""]' (everything), and rotated_at.

CREATE TABLE IF NOT EXISTS state_tombstones (
  path         TEXT PRIMARY KEY,
  last_version INTEGER NOT NULL
) WITHOUT ROWID;

ALTER TABLE machines RENAME TO machines_before_agentcoord;

CREATE TABLE machines (
  machine        TEXT PRIMARY KEY,
  token_sha256   TEXT NOT NULL UNIQUE,
  read_prefixes  TEXT NOT NULL DEFAULT '[]',
  write_prefixes TEXT NOT NULL DEFAULT '[]',
  created_at     TEXT NOT NULL,
  rotated_at     TEXT,
  revoked_at     TEXT
);

INSERT INTO machines (machine, token_sha256, read_prefixes, write_prefixes, created_at, revoked_at)
  SELECT machine, token_hash, read_prefixes, write_prefixes, created_at, revoked_at
  FROM machines_before_agentcoord;

DROP TABLE machines_before_agentcoord;
