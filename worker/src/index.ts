// agentcoord state API: a Cloudflare Worker over one D1 database.
//
// Wire-compatible with the existing agent-coordination Worker (see
// ../shared/spec/worker-protocol-notes.md), with three deliberate fixes:
//   1. versions never repeat for a path: a record deleted and re-created
//      continues above the deleted version (state_tombstones), so no ABA;
//   2. a decoded path (or prefix, or cursor) with a `.` or `..` segment is
//      rejected, whatever encoding carried it;
//   3. a body that is not well-formed Unicode (invalid UTF-8, or a string
//      holding a lone UTF-16 surrogate such as "\ud800") is refused with 400
//      invalid_json: such a record cannot be read back by strict decoders.
//
// Order of checks on /v1/state/<path>: auth (401) -> path grammar (400) ->
// method (405) -> scope (403) -> request size (413) -> body (400) -> data
// size (413) -> precondition (400) -> the compare-and-swap itself (409).
//
// A database still in the existing Worker's schema (not yet upgraded with
// bin/upgrade-from-agent-coord, docs/worker-upgrade.md) answers 500
// schema_not_migrated; any other failure 500 internal_error.

export interface Env {
  DB: D1Database;
}

const MAX_PATH_BYTES = 512;
const MAX_ARCHIVE_PATH_BYTES = 520;
const MAX_ACTIVE_DATA_BYTES = 256 * 1024;
const MAX_ARCHIVE_DATA_BYTES = 1024 * 1024;
const ENVELOPE_BYTES = 4096;
const MAX_LIMIT = 1000;

const SEG = "[A-Za-z0-9_.:-]+";
const RECORD_PATTERNS = [
  new RegExp(`^claims/${SEG}/${SEG}/${SEG}\\.json$`),
  new RegExp(`^heartbeats/${SEG}\\.json$`),
  new RegExp(`^batches/${SEG}\\.json$`),
  new RegExp(`^events/${SEG}/${SEG}\\.json$`),
];
const PREFIX_PATTERNS = [
  /^claims$/,
  new RegExp(`^claims/${SEG}$`),
  new RegExp(`^claims/${SEG}/${SEG}$`),
  /^heartbeats$/,
  /^batches$/,
  /^events$/,
  new RegExp(`^events/${SEG}$`),
];

const encoder = new TextEncoder();

function byteLength(text: string): number {
  return encoder.encode(text).length;
}

function hasDotSegment(path: string): boolean {
  // `..` anywhere (as the existing Worker does, even inside a name) and any
  // `.` segment: neither can ever name a record.
  return path.includes("..") || path.split("/").some((s) => s === "." || s === "");
}

function splitArchive(path: string): [boolean, string] {
  return path.startsWith("archive/") ? [true, path.slice("archive/".length)] : [false, path];
}

export function isRecordPath(path: string): boolean {
  if (hasDotSegment(path)) return false;
  const [archived, rest] = splitArchive(path);
  const size = byteLength(path);
  if (archived) {
    if (size > MAX_ARCHIVE_PATH_BYTES || byteLength(rest) > MAX_PATH_BYTES) return false;
  } else if (size > MAX_PATH_BYTES) {
    return false;
  }
  return RECORD_PATTERNS.some((re) => re.test(rest));
}

export function isPrefix(prefix: string): boolean {
  if (prefix === "archive") return true;
  if (hasDotSegment(prefix)) return false;
  const [, rest] = splitArchive(prefix);
  if (byteLength(prefix) > MAX_ARCHIVE_PATH_BYTES) return false;
  return PREFIX_PATTERNS.some((re) => re.test(rest));
}

function isScope(scope: unknown): scope is string {
  return typeof scope === "string" && (scope === "" || isPrefix(scope) || isRecordPath(scope));
}

/** A scope covers itself and, as a directory, its descendants; "" covers all. */
function covers(scope: string, path: string): boolean {
  return scope === "" || path === scope || path.startsWith(scope + "/");
}

function coveredBy(scopes: string[], path: string): boolean {
  return scopes.some((s) => covers(s, path));
}

function json(status: number, body: unknown): Response {
  return new Response(JSON.stringify(body), {
    status,
    headers: { "Content-Type": "application/json" },
  });
}

function rawJson(status: number, text: string): Response {
  return new Response(text, { status, headers: { "Content-Type": "application/json" } });
}

function error(status: number, code: string): Response {
  return json(status, { error: code });
}

interface Machine {
  machine: string;
  read: string[];
  write: string[];
}

function parseScopes(text: string | null): string[] {
  try {
    const parsed: unknown = JSON.parse(text ?? "[]");
    if (!Array.isArray(parsed) || !parsed.every(isScope)) return [];
    return parsed as string[];
  } catch {
    return [];
  }
}

async function sha256Hex(text: string): Promise<string> {
  const digest = await crypto.subtle.digest("SHA-256", encoder.encode(text));
  return [...new Uint8Array(digest)].map((b) => b.toString(16).padStart(2, "0")).join("");
}

async function authenticate(request: Request, env: Env): Promise<Machine | Response> {
  const header = request.headers.get("Authorization");
  if (header === null) return error(401, "unauthorized");
  const space = header.indexOf(" ");
  if (space < 0 || header.slice(0, space).toLowerCase() !== "bearer") {
    return error(401, "unauthorized");
  }
  const token = header.slice(space + 1);
  // An empty token is no credential at all, as a missing header.
  if (token === "") return error(401, "unauthorized");
  const row = await env.DB.prepare(
    "SELECT machine, read_prefixes, write_prefixes FROM machines WHERE token_sha256 = ? AND revoked_at IS NULL",
  )
    .bind(await sha256Hex(token))
    .first<{ machine: string; read_prefixes: string; write_prefixes: string }>();
  if (row === null) return error(401, "unknown_token");
  return {
    machine: row.machine,
    read: parseScopes(row.read_prefixes),
    write: parseScopes(row.write_prefixes),
  };
}

function decodePath(raw: string): string | null {
  try {
    return decodeURIComponent(raw);
  } catch {
    return null;
  }
}

function entryJson(row: StateRow): string {
  const parts = [`"path":${JSON.stringify(row.path)}`, `"data":${row.data}`, `"version":${row.version}`];
  if (row.updated_by !== null) parts.push(`"updated_by":${JSON.stringify(row.updated_by)}`);
  return `{${parts.join(",")}}`;
}

interface StateRow {
  path: string;
  data: string;
  version: number;
  updated_by: string | null;
}

/**
 * A bare decimal version (leading zeros allowed): the number, "unsafe" for
 * digits too large to be exact, null when it is not digits at all.
 */
function parseVersion(value: string): number | "unsafe" | null {
  if (!/^[0-9]+$/.test(value)) return null;
  const version = Number.parseInt(value, 10);
  return Number.isSafeInteger(version) ? version : "unsafe";
}

/** A precondition header; an empty value counts as absent. */
function precondition(request: Request, name: string): string | null {
  const value = request.headers.get(name);
  return value === null || value.trim() === "" ? null : value.trim();
}

const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/** False when a string (or key) anywhere in `value` holds a lone surrogate. */
function wellFormed(value: unknown): boolean {
  const pending: unknown[] = [value];
  while (pending.length > 0) {
    const item = pending.pop();
    if (typeof item === "string") {
      if (LONE_SURROGATE.test(item)) return false;
    } else if (Array.isArray(item)) {
      for (const child of item) pending.push(child);
    } else if (item !== null && typeof item === "object") {
      for (const [key, child] of Object.entries(item)) {
        if (LONE_SURROGATE.test(key)) return false;
        pending.push(child);
      }
    }
  }
  return true;
}

const strictUtf8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: false });

async function getRecord(env: Env, path: string): Promise<Response> {
  const row = await env.DB.prepare("SELECT path, data, version, updated_by FROM state WHERE path = ?")
    .bind(path)
    .first<StateRow>();
  if (row === null) return error(404, "not_found");
  return rawJson(200, entryJson(row));
}

async function putRecord(request: Request, env: Env, me: Machine, path: string): Promise<Response> {
  const archived = path.startsWith("archive/");
  const cap = archived ? MAX_ARCHIVE_DATA_BYTES : MAX_ACTIVE_DATA_BYTES;
  const declared = request.headers.get("Content-Length");
  if (declared !== null && Number(declared) > cap + ENVELOPE_BYTES) {
    return error(413, "payload_too_large");
  }
  const bytes = new Uint8Array(await request.arrayBuffer());
  if (bytes.length > cap + ENVELOPE_BYTES) return error(413, "payload_too_large");
  let body: unknown;
  try {
    body = JSON.parse(strictUtf8.decode(bytes));
  } catch {
    return error(400, "invalid_json"); // not JSON, or not UTF-8
  }
  // Valid JSON that is not an object ([], null, "x", 1) has no `data` either.
  if (typeof body !== "object" || body === null || Array.isArray(body)) {
    return error(400, "missing_data");
  }
  const data = (body as Record<string, unknown>).data;
  if (data === undefined) return error(400, "missing_data");
  if (!wellFormed(data)) return error(400, "invalid_json");
  const serialized = JSON.stringify(data);
  if (byteLength(serialized) > cap) return error(413, "payload_too_large");

  const ifNoneMatch = precondition(request, "If-None-Match");
  const ifMatch = precondition(request, "If-Match");
  const now = new Date().toISOString();
  if (ifNoneMatch !== null) {
    if (ifNoneMatch !== "*") return error(400, "invalid_if_none_match");
    // Create-only. A re-created path continues above its tombstone.
    const row = await env.DB.prepare(
      `INSERT INTO state (path, data, version, updated_by, updated_at)
       VALUES (?1, ?2, COALESCE((SELECT last_version FROM state_tombstones WHERE path = ?1), 0) + 1, ?3, ?4)
       ON CONFLICT (path) DO NOTHING
       RETURNING version`,
    )
      .bind(path, serialized, me.machine, now)
      .first<{ version: number }>();
    if (row === null) return error(409, "already_exists");
    return json(201, { path, version: row.version, updated_by: me.machine });
  }
  if (ifMatch === null) return error(400, "precondition_required");
  const expected = parseVersion(ifMatch);
  if (expected === null || expected === "unsafe") return error(400, "invalid_if_match");
  const row = await env.DB.prepare(
    `UPDATE state SET data = ?1, version = version + 1, updated_by = ?2, updated_at = ?3
     WHERE path = ?4 AND version = ?5
     RETURNING version`,
  )
    .bind(serialized, me.machine, now, path, expected)
    .first<{ version: number }>();
  if (row === null) return error(409, "version_conflict");
  return json(200, { path, version: row.version, updated_by: me.machine });
}

async function deleteRecord(request: Request, env: Env, me: Machine, path: string): Promise<Response> {
  const header = precondition(request, "If-Match");
  const expected = header === null ? null : parseVersion(header);
  if (expected === null) return error(400, "precondition_required");
  if (expected === "unsafe") return error(400, "invalid_if_match");
  // One transaction: remember the deleted version, then delete. Both match
  // only when the version is current, so a stale delete changes nothing.
  const [, deleted] = await env.DB.batch([
    env.DB.prepare(
      `INSERT INTO state_tombstones (path, last_version)
       SELECT path, version FROM state WHERE path = ?1 AND version = ?2
       ON CONFLICT (path) DO UPDATE SET last_version = excluded.last_version`,
    ).bind(path, expected),
    env.DB.prepare("DELETE FROM state WHERE path = ?1 AND version = ?2").bind(path, expected),
  ]);
  if (!deleted.meta.changes) return error(409, "version_conflict");
  return json(200, { path, deleted: true, updated_by: me.machine });
}

async function handleState(request: Request, env: Env, me: Machine, rawPath: string): Promise<Response> {
  const path = decodePath(rawPath);
  if (path === null || !isRecordPath(path)) return error(400, "invalid_path");
  const method = request.method;
  if (method !== "GET" && method !== "PUT" && method !== "DELETE") {
    return error(405, "method_not_allowed");
  }
  if (method === "GET") {
    if (!coveredBy(me.read, path)) return error(403, "forbidden");
    return getRecord(env, path);
  }
  if (!coveredBy(me.write, path)) return error(403, "forbidden");
  if (method === "PUT") return putRecord(request, env, me, path);
  // Deleting an active record needs write scope on its archive/ mirror too.
  if (!path.startsWith("archive/") && !coveredBy(me.write, "archive/" + path)) {
    return error(403, "forbidden");
  }
  return deleteRecord(request, env, me, path);
}

async function handleList(request: Request, env: Env, me: Machine, url: URL): Promise<Response> {
  if (request.method !== "GET") return error(405, "method_not_allowed");
  const prefix = url.searchParams.get("prefix");
  if (prefix === null || !isPrefix(prefix)) return error(400, "invalid_prefix");

  // Whole prefix readable, or only parts of it (then the answer is filtered).
  let ranges: string[] | null = null;
  if (!me.read.some((s) => covers(s, prefix))) {
    ranges = me.read.filter((s) => s.startsWith(prefix + "/"));
    if (ranges.length === 0) return error(403, "forbidden");
  }

  const limitText = url.searchParams.get("limit");
  let limit: number | null = null;
  if (limitText !== null) {
    if (!/^[0-9]{1,4}$/.test(limitText)) return error(400, "invalid_limit");
    limit = Number.parseInt(limitText, 10);
    if (limit < 1 || limit > MAX_LIMIT) return error(400, "invalid_limit");
  }
  const cursor = url.searchParams.get("cursor");
  if (cursor !== null && (!isRecordPath(cursor) || !cursor.startsWith(prefix + "/"))) {
    return error(400, "invalid_cursor");
  }

  // Descendants of P are exactly the paths in ("P/", "P0"): '0' follows '/'.
  const where: string[] = ["path > ?", "path < ?"];
  const binds: (string | number)[] = [prefix + "/", prefix + "0"];
  if (ranges !== null) {
    const alternatives: string[] = [];
    for (const scope of ranges) {
      alternatives.push("path = ?", "(path > ? AND path < ?)");
      binds.push(scope, scope + "/", scope + "0");
    }
    where.push(`(${alternatives.join(" OR ")})`);
  }
  if (cursor !== null) {
    where.push("path > ?");
    binds.push(cursor);
  }
  let sql = `SELECT path, data, version, updated_by FROM state WHERE ${where.join(" AND ")} ORDER BY path`;
  if (limit !== null) {
    sql += " LIMIT ?";
    binds.push(limit + 1);
  }
  const { results } = await env.DB.prepare(sql)
    .bind(...binds)
    .all<StateRow>();
  let rows = results;
  let nextCursor: string | null = null;
  if (limit !== null && rows.length > limit) {
    rows = rows.slice(0, limit);
    nextCursor = rows[rows.length - 1].path;
  }
  let text = `{"entries":[${rows.map(entryJson).join(",")}]`;
  if (ranges !== null) text += `,"filtered":true`;
  if (nextCursor !== null) text += `,"next_cursor":${JSON.stringify(nextCursor)}`;
  return rawJson(200, text + "}");
}

const SCHEMA_MISSING = /no such (?:table|column)/i;

async function route(request: Request, env: Env): Promise<Response> {
  const url = new URL(request.url);
  // The raw pathname keeps percent-encoding; the runtime has already
  // resolved unencoded dot segments, which is why clients encode every `/`.
  const pathname = url.pathname;
  if (pathname === "/v1/health") return json(200, { status: "ok" });

  const me = await authenticate(request, env);
  if (me instanceof Response) return me;

  if (pathname === "/v1/whoami") {
    if (request.method !== "GET") return error(405, "method_not_allowed");
    return json(200, { machine: me.machine, read_prefixes: me.read, write_prefixes: me.write });
  }
  if (pathname === "/v1/state") return handleList(request, env, me, url);
  if (pathname.startsWith("/v1/state/")) {
    return handleState(request, env, me, pathname.slice("/v1/state/".length));
  }
  return error(404, "route_not_found");
}

export default {
  async fetch(request: Request, env: Env): Promise<Response> {
    try {
      return await route(request, env);
    } catch (failure) {
      const message = failure instanceof Error ? failure.message : String(failure);
      console.error(`agentcoord state API: ${message}`);
      if (SCHEMA_MISSING.test(message)) return error(500, "schema_not_migrated");
      return error(500, "internal_error");
    }
  },
} satisfies ExportedHandler<Env>;
