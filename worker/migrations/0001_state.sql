-- agentcoord state API schema.
--
-- state: one row per live record. `data` is the compact JSON text of the
-- record, `version` an integer that only ever grows for a path.
-- state_tombstones: the last version a deleted path had, so a re-created
-- record continues above it (no ABA: a writer holding a version from before
-- the delete can never match the new record).
-- machines: one row per machine token; only the token's SHA-256 is stored.

CREATE TABLE IF NOT EXISTS state (
  path       TEXT PRIMARY KEY,
  data       TEXT NOT NULL,
  version    INTEGER NOT NULL,
  updated_by TEXT,
  updated_at TEXT NOT NULL
) WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS state_tombstones (
  path         TEXT PRIMARY KEY,
  last_version INTEGER NOT NULL
) WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS machines (
  machine        TEXT PRIMARY KEY,
  token_sha256   TEXT NOT NULL UNIQUE,
  read_prefixes  TEXT NOT NULL DEFAULT '[]',
  write_prefixes TEXT NOT NULL DEFAULT '[]',
  created_at     TEXT NOT NULL,
  rotated_at     TEXT,
  revoked_at     TEXT
);
