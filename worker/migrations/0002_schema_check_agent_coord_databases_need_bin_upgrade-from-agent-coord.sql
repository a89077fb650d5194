-- Stops `wrangler d1 migrations apply` on a database still in the existing
-- agent-coord Worker's schema. Such a database has already recorded a
-- migration named 0001_state.sql (its own), so wrangler would otherwise say
-- "No migrations to apply!" and this Worker would fail every authenticated
-- request (500 schema_not_migrated). If this fails with
-- "no such column: token_sha256", convert the database first:
--
--   worker/bin/upgrade-from-agent-coord --remote     (docs/worker-upgrade.md)
--
-- On a database made by these migrations it reads nothing and changes nothing.
SELECT token_sha256, rotated_at FROM machines LIMIT 0;
SELECT path, last_version FROM state_tombstones LIMIT 0;
