-- Batch event feed (GET /v1/events) and pruning (the scheduled handler).
--
-- meta: one row. events_seq is the global change counter of the events table
--   (every insert/update/delete of an event record takes the next value);
--   version_floor is the highest last_version of a pruned tombstone (a create
--   starts above it, so pruning tombstones never allows ABA);
--   events_pruned_seq is the highest seq of a pruned deletion marker (a
--   change sync from before it must resync).
-- events: one row per event record `events/<batch_id>/<event_id>.json`, live
--   (deleted = 0, data = the record) or a deletion marker (deleted = 1, data
--   NULL) kept for change sync until pruned. Kept by triggers on `state`, so
--   every write path (single, batch, upgrade tool, SQL by hand) updates it in
--   the same transaction. `at` is the record's `at` string, else its
--   `timestamp` string, else "".
-- state_tombstones.deleted_at: when the path was last deleted (NULL for rows
--   from before this migration: counted as old by the pruning).

ALTER TABLE state_tombstones ADD COLUMN deleted_at TEXT;

CREATE TABLE IF NOT EXISTS meta (
  id                INTEGER PRIMARY KEY CHECK (id = 1),
  events_seq        INTEGER NOT NULL,
  version_floor     INTEGER NOT NULL,
  events_pruned_seq INTEGER NOT NULL
);

CREATE TABLE IF NOT EXISTS events (
  batch_id   TEXT NOT NULL,
  event_id   TEXT NOT NULL,
  at         TEXT NOT NULL,
  path       TEXT NOT NULL,
  data       TEXT,
  version    INTEGER NOT NULL,
  updated_by TEXT,
  seq        INTEGER NOT NULL UNIQUE,
  deleted    INTEGER NOT NULL DEFAULT 0,
  changed_at TEXT NOT NULL,
  PRIMARY KEY (batch_id, event_id)
) WITHOUT ROWID;

CREATE INDEX IF NOT EXISTS events_by_at ON events (batch_id, deleted, at, event_id);
CREATE INDEX IF NOT EXISTS events_by_seq ON events (batch_id, seq);

-- Backfill: the event records already stored, with distinct seqs 1..n.
INSERT INTO events (batch_id, event_id, at, path, data, version, updated_by, seq, deleted, changed_at)
  SELECT
    substr(path, 8, instr(substr(path, 8), '/') - 1),
    substr(path, 8 + instr(substr(path, 8), '/'), length(path) - 7 - instr(substr(path, 8), '/') - 5),
    CASE
      WHEN json_valid(data) AND json_type(data, '$.at') = 'text' THEN json_extract(data, '$.at')
      WHEN json_valid(data) AND json_type(data, '$.timestamp') = 'text' THEN json_extract(data, '$.timestamp')
      ELSE ''
    END,
    path, data, version, updated_by,
    ROW_NUMBER() OVER (ORDER BY path),
    0, updated_at
  FROM state
  WHERE path GLOB 'events/*/*.json';

INSERT INTO meta (id, events_seq, version_floor, events_pruned_seq)
  SELECT 1, COALESCE((SELECT MAX(seq) FROM events), 0), 0, 0
  WHERE NOT EXISTS (SELECT 1 FROM meta);

CREATE TRIGGER IF NOT EXISTS events_on_insert AFTER INSERT ON state
WHEN NEW.path GLOB 'events/*/*.json'
BEGIN
  UPDATE meta SET events_seq = events_seq + 1 WHERE id = 1;
  INSERT INTO events (batch_id, event_id, at, path, data, version, updated_by, seq, deleted, changed_at)
  VALUES (
    substr(NEW.path, 8, instr(substr(NEW.path, 8), '/') - 1),
    substr(NEW.path, 8 + instr(substr(NEW.path, 8), '/'), length(NEW.path) - 7 - instr(substr(NEW.path, 8), '/') - 5),
    CASE
      WHEN json_valid(NEW.data) AND json_type(NEW.data, '$.at') = 'text' THEN json_extract(NEW.data, '$.at')
      WHEN json_valid(NEW.data) AND json_type(NEW.data, '$.timestamp') = 'text' THEN json_extract(NEW.data, '$.timestamp')
      ELSE ''
    END,
    NEW.path, NEW.data, NEW.version, NEW.updated_by,
    (SELECT events_seq FROM meta WHERE id = 1),
    0, strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
  )
  ON CONFLICT (batch_id, event_id) DO UPDATE SET
    at = excluded.at, path = excluded.path, data = excluded.data, version = excluded.version,
    updated_by = excluded.updated_by, seq = excluded.seq, deleted = 0, changed_at = excluded.changed_at;
END;

CREATE TRIGGER IF NOT EXISTS events_on_update AFTER UPDATE ON state
WHEN NEW.path GLOB 'events/*/*.json'
BEGIN
  UPDATE meta SET events_seq = events_seq + 1 WHERE id = 1;
  INSERT INTO events (batch_id, event_id, at, path, data, version, updated_by, seq, deleted, changed_at)
  VALUES (
    substr(NEW.path, 8, instr(substr(NEW.path, 8), '/') - 1),
    substr(NEW.path, 8 + instr(substr(NEW.path, 8), '/'), length(NEW.path) - 7 - instr(substr(NEW.path, 8), '/') - 5),
    CASE
      WHEN json_valid(NEW.data) AND json_type(NEW.data, '$.at') = 'text' THEN json_extract(NEW.data, '$.at')
      WHEN json_valid(NEW.data) AND json_type(NEW.data, '$.timestamp') = 'text' THEN json_extract(NEW.data, '$.timestamp')
      ELSE ''
    END,
    NEW.path, NEW.data, NEW.version, NEW.updated_by,
    (SELECT events_seq FROM meta WHERE id = 1),
    0, strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
  )
  ON CONFLICT (batch_id, event_id) DO UPDATE SET
    at = excluded.at, path = excluded.path, data = excluded.data, version = excluded.version,
    updated_by = excluded.updated_by, seq = excluded.seq, deleted = 0, changed_at = excluded.changed_at;
END;

CREATE TRIGGER IF NOT EXISTS events_on_delete AFTER DELETE ON state
WHEN OLD.path GLOB 'events/*/*.json'
BEGIN
  UPDATE meta SET events_seq = events_seq + 1 WHERE id = 1;
  UPDATE events SET
    data = NULL, deleted = 1, version = OLD.version, updated_by = OLD.updated_by,
    seq = (SELECT events_seq FROM meta WHERE id = 1),
    changed_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
  WHERE batch_id = substr(OLD.path, 8, instr(substr(OLD.path, 8), '/') - 1)
    AND event_id = substr(OLD.path, 8 + instr(substr(OLD.path, 8), '/'),
                          length(OLD.path) - 7 - instr(substr(OLD.path, 8), '/') - 5);
END;
