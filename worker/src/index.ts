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
//      invalid_json: such a record cannot be read back by strict decoders;
//   4. data nested deeper than 64 levels is refused with 413 too_deep (data
//      over 256 KiB, 1 MiB under archive/, with 413 payload_too_large, as
//      before): whatever this Worker accepts, every client reads
//      (docs/backends.md, "Record bounds").
//
// Order of checks on /v1/state/<path>: auth (401) -> path grammar (400) ->
// method (405) -> scope (403) -> request size (413) -> body (400) -> data
// size (413) -> precondition (400) -> the compare-and-swap itself (409).
//
// Additions over the existing Worker (docs/backends.md, "Worker batch and
// events endpoints"): /v1/health names its capabilities; POST /v1/batch runs
// up to 64 single-record operations in one transaction, each answering what
// its single form would; GET /v1/events reads a batch's events (from the
// `events` table that triggers on `state` keep, migration 0003) by
// (at, event_id) cursor or as changes since a sequence number; the scheduled
// handler prunes old tombstones and event deletion markers; every response carries
// the Worker's clock in X-Agentcoord-Time (Unix ms).
//
// A database still in the existing Worker's schema (not yet upgraded with
// bin/upgrade-from-agent-coord, docs/worker-upgrade.md) answers 500
// schema_not_migrated; any other failure 500 internal_error.

export interface Env {
  DB: D1Database;
  /** Retention of tombstones and event deletion markers (default 7 days). */
  PRUNE_AFTER_SECONDS?: string;
}

const MAX_PATH_BYTES = 512;
const MAX_ARCHIVE_PATH_BYTES = 520;
// Record bounds (agentcoordd/model/bounds.py, docs/backends.md "Record
// bounds"): the same depth every agentcoord store reads with; the size caps of
// the existing Worker's protocol, within the clients' 1 MiB. A record this
// Worker accepts is one every client can read.
const MAX_ACTIVE_DATA_BYTES = 256 * 1024;
const MAX_ARCHIVE_DATA_BYTES = 1024 * 1024;
const MAX_DATA_DEPTH = 64;
const ENVELOPE_BYTES = 4096;
const MAX_LIMIT = 1000;

const SEG = "[A-Za-z0-9_.:-]+";
const ADMISSION = "capacity_profiles|inboxes|lane_occupancies|capacity_reservations|capacity_holds";
const RECORD_PATTERNS = [
  new RegExp(`^claims/${SEG}/${SEG}/${SEG}\\.json$`),
  new RegExp(`^heartbeats/${SEG}\\.json$`),
  new RegExp(`^batches/${SEG}\\.json$`),
  new RegExp(`^events/${SEG}/${SEG}\\.json$`),
  // Admission records (docs/capacity.md): host limits and capacity reservations.
  new RegExp(`^host_limits/${SEG}/${SEG}/${SEG}/${SEG}\\.json$`),
  new RegExp(`^(?:${ADMISSION})/${SEG}/${SEG}\\.json$`),
];
const PREFIX_PATTERNS = [
  /^claims$/,
  new RegExp(`^claims/${SEG}$`),
  new RegExp(`^claims/${SEG}/${SEG}$`),
  /^heartbeats$/,
  /^batches$/,
  /^events$/,
  new RegExp(`^events/${SEG}$`),
  new RegExp(`^host_limits(?:/${SEG}){0,3}$`),
  new RegExp(`^(?:${ADMISSION})(?:/${SEG})?$`),
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

/**
 * What is wrong with a record's data, walked without recursion: "invalid_json"
 * when a string (or key) holds a lone surrogate, "too_deep" when arrays and
 * objects nest more than MAX_DATA_DEPTH levels; null when neither.
 */
function dataProblem(value: unknown, maxDepth = MAX_DATA_DEPTH): "invalid_json" | "too_deep" | null {
  const pending: [unknown, number][] = [[value, 0]];
  while (pending.length > 0) {
    const [item, depth] = pending.pop()!;
    if (typeof item === "string") {
      if (LONE_SURROGATE.test(item)) return "invalid_json";
    } else if (item !== null && typeof item === "object") {
      if (depth + 1 > maxDepth) return "too_deep";
      if (Array.isArray(item)) {
        for (const child of item) pending.push([child, depth + 1]);
      } else {
        for (const [key, child] of Object.entries(item)) {
          if (LONE_SURROGATE.test(key)) return "invalid_json";
          pending.push([child, depth + 1]);
        }
      }
    }
  }
  return null;
}

const strictUtf8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: false });

// ---- one operation on one record: validate -> statement(s) -> answer -------
//
// The single forms (GET/PUT/DELETE /v1/state/<path>) and POST /v1/batch share
// these steps, so an operation answers the same status and body either way.

/** What one operation answers: a status and its JSON body text. */
interface Answer {
  status: number;
  body: string;
}

function answer(status: number, body: unknown): Answer {
  return { status, body: JSON.stringify(body) };
}

function fail(status: number, code: string): Answer {
  return answer(status, { error: code });
}

function respond(result: Answer): Response {
  return rawJson(result.status, result.body);
}

/** A validated operation, ready for the database. */
type Op =
  | { kind: "get"; path: string }
  | { kind: "create"; path: string; data: string }
  | { kind: "replace"; path: string; data: string; expected: number }
  | { kind: "delete"; path: string; expected: number };

type Method = "get" | "put" | "delete";

/** The scope check of an operation on a valid record path (null: allowed). */
function denied(me: Machine, method: Method, path: string): Answer | null {
  if (method === "get") return coveredBy(me.read, path) ? null : fail(403, "forbidden");
  if (!coveredBy(me.write, path)) return fail(403, "forbidden");
  // Deleting an active record needs write scope on its archive/ mirror too.
  if (method === "delete" && !path.startsWith("archive/") && !coveredBy(me.write, "archive/" + path)) {
    return fail(403, "forbidden");
  }
  return null;
}

function dataCap(path: string): number {
  return path.startsWith("archive/") ? MAX_ARCHIVE_DATA_BYTES : MAX_ACTIVE_DATA_BYTES;
}

/**
 * A put of `data` (already found in its body) under its preconditions, given
 * as header values (null: absent): data checks, then the precondition.
 */
function putOp(path: string, data: unknown, ifNoneMatch: string | null, ifMatch: string | null): Op | Answer {
  const problem = dataProblem(data);
  if (problem !== null) return fail(problem === "too_deep" ? 413 : 400, problem);
  const serialized = JSON.stringify(data);
  if (byteLength(serialized) > dataCap(path)) return fail(413, "payload_too_large");
  if (ifNoneMatch !== null) {
    if (ifNoneMatch !== "*") return fail(400, "invalid_if_none_match");
    return { kind: "create", path, data: serialized };
  }
  if (ifMatch === null) return fail(400, "precondition_required");
  const expected = parseVersion(ifMatch);
  if (expected === null || expected === "unsafe") return fail(400, "invalid_if_match");
  return { kind: "replace", path, data: serialized, expected };
}

function deleteOp(path: string, ifMatch: string | null): Op | Answer {
  const expected = ifMatch === null ? null : parseVersion(ifMatch);
  if (expected === null) return fail(400, "precondition_required");
  if (expected === "unsafe") return fail(400, "invalid_if_match");
  return { kind: "delete", path, expected };
}

function statements(env: Env, me: Machine, op: Op, now: string): D1PreparedStatement[] {
  switch (op.kind) {
    case "get":
      return [env.DB.prepare("SELECT path, data, version, updated_by FROM state WHERE path = ?").bind(op.path)];
    case "create":
      // Create-only. A re-created path continues above its tombstone, and
      // every path above the floor left by pruned tombstones.
      return [
        env.DB.prepare(
          `INSERT INTO state (path, data, version, updated_by, updated_at)
           VALUES (?1, ?2, MAX(COALESCE((SELECT last_version FROM state_tombstones WHERE path = ?1), 0),
                               COALESCE((SELECT version_floor FROM meta WHERE id = 1), 0)) + 1, ?3, ?4)
           ON CONFLICT (path) DO NOTHING
           RETURNING version`,
        ).bind(op.path, op.data, me.machine, now),
      ];
    case "replace":
      return [
        env.DB.prepare(
          `UPDATE state SET data = ?1, version = version + 1, updated_by = ?2, updated_at = ?3
           WHERE path = ?4 AND version = ?5
           RETURNING version`,
        ).bind(op.data, me.machine, now, op.path, op.expected),
      ];
    case "delete":
      // Remember the deleted version, then delete. Both match only when the
      // version is current, so a stale delete changes nothing.
      return [
        env.DB.prepare(
          `INSERT INTO state_tombstones (path, last_version, deleted_at)
           SELECT path, version, ?3 FROM state WHERE path = ?1 AND version = ?2
           ON CONFLICT (path) DO UPDATE SET last_version = excluded.last_version, deleted_at = excluded.deleted_at`,
        ).bind(op.path, op.expected, now),
        env.DB.prepare("DELETE FROM state WHERE path = ?1 AND version = ?2").bind(op.path, op.expected),
      ];
  }
}

/** The answer of an operation from the results of its statements. */
function outcome(me: Machine, op: Op, results: D1Result[]): Answer {
  switch (op.kind) {
    case "get": {
      const row = results[0].results[0] as StateRow | undefined;
      return row === undefined ? fail(404, "not_found") : { status: 200, body: entryJson(row) };
    }
    case "create":
    case "replace": {
      const row = results[0].results[0] as { version: number } | undefined;
      if (row === undefined) return fail(409, op.kind === "create" ? "already_exists" : "version_conflict");
      return answer(op.kind === "create" ? 201 : 200, { path: op.path, version: row.version, updated_by: me.machine });
    }
    case "delete":
      if (!results[1].meta.changes) return fail(409, "version_conflict");
      return answer(200, { path: op.path, deleted: true, updated_by: me.machine });
  }
}

/** Validated operations run in order as ONE D1 batch (one transaction). */
async function execute(env: Env, me: Machine, ops: Op[]): Promise<Answer[]> {
  const now = new Date().toISOString();
  const batch: D1PreparedStatement[] = [];
  const counts: number[] = [];
  for (const op of ops) {
    const prepared = statements(env, me, op, now);
    counts.push(prepared.length);
    batch.push(...prepared);
  }
  const results = batch.length === 0 ? [] : await env.DB.batch(batch);
  const answers: Answer[] = [];
  let at = 0;
  ops.forEach((op, i) => {
    answers.push(outcome(me, op, results.slice(at, at + counts[i])));
    at += counts[i];
  });
  return answers;
}

async function runOne(env: Env, me: Machine, op: Op | Answer): Promise<Response> {
  if ("status" in op) return respond(op);
  const [result] = await execute(env, me, [op]);
  return respond(result);
}

/** A PUT body's `data`, or the answer refusing the body (size first, then shape). */
async function putBody(request: Request, path: string): Promise<{ data: unknown } | Answer> {
  const cap = dataCap(path);
  const declared = request.headers.get("Content-Length");
  if (declared !== null && Number(declared) > cap + ENVELOPE_BYTES) return fail(413, "payload_too_large");
  const bytes = new Uint8Array(await request.arrayBuffer());
  if (bytes.length > cap + ENVELOPE_BYTES) return fail(413, "payload_too_large");
  let body: unknown;
  try {
    body = JSON.parse(strictUtf8.decode(bytes));
  } catch {
    return fail(400, "invalid_json"); // not JSON, or not UTF-8
  }
  // Valid JSON that is not an object ([], null, "x", 1) has no `data` either.
  if (!isObject(body)) return fail(400, "missing_data");
  const data = body.data;
  if (data === undefined) return fail(400, "missing_data");
  return { data };
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

async function handleState(request: Request, env: Env, me: Machine, rawPath: string): Promise<Response> {
  const path = decodePath(rawPath);
  if (path === null || !isRecordPath(path)) return error(400, "invalid_path");
  const method = request.method;
  if (method !== "GET" && method !== "PUT" && method !== "DELETE") {
    return error(405, "method_not_allowed");
  }
  const lower = method.toLowerCase() as Method;
  const refused = denied(me, lower, path);
  if (refused !== null) return respond(refused);
  if (lower === "get") return runOne(env, me, { kind: "get", path });
  if (lower === "delete") return runOne(env, me, deleteOp(path, precondition(request, "If-Match")));
  const body = await putBody(request, path);
  if ("status" in body) return respond(body);
  return runOne(
    env,
    me,
    putOp(path, body.data, precondition(request, "If-None-Match"), precondition(request, "If-Match")),
  );
}

// ---- POST /v1/batch ------------------------------------------------------------

const MAX_BATCH_OPS = 64;
const MAX_BATCH_BYTES = 8 * 1024 * 1024;

/**
 * A batch op's precondition as the header value the single form would have
 * received (null: absent). A string is a header value (trimmed, empty =
 * absent); an integer its decimal digits; anything else a value that is not
 * a version.
 */
function headerValue(value: unknown): string | null {
  if (value === undefined || value === null) return null;
  if (typeof value === "string") return value.trim() === "" ? null : value.trim();
  if (typeof value === "number" && Number.isInteger(value) && value >= 0) return BigInt(value).toString();
  return JSON.stringify(value);
}

function batchOp(me: Machine, raw: unknown): Op | Answer {
  if (!isObject(raw)) return fail(400, "invalid_operation");
  const method = raw.op;
  if (method !== "get" && method !== "put" && method !== "delete") return fail(400, "invalid_operation");
  const path = raw.path;
  if (typeof path !== "string" || !isRecordPath(path)) return fail(400, "invalid_path");
  const refused = denied(me, method, path);
  if (refused !== null) return refused;
  if (method === "get") return { kind: "get", path };
  if (method === "delete") return deleteOp(path, headerValue(raw.if_match));
  if (raw.data === undefined) return fail(400, "missing_data");
  return putOp(path, raw.data, headerValue(raw.if_none_match), headerValue(raw.if_match));
}

async function handleBatch(request: Request, env: Env, me: Machine): Promise<Response> {
  if (request.method !== "POST") return error(405, "method_not_allowed");
  const declared = request.headers.get("Content-Length");
  if (declared !== null && Number(declared) > MAX_BATCH_BYTES) return error(413, "payload_too_large");
  const bytes = new Uint8Array(await request.arrayBuffer());
  if (bytes.length > MAX_BATCH_BYTES) return error(413, "payload_too_large");
  let body: unknown;
  try {
    body = JSON.parse(strictUtf8.decode(bytes));
  } catch {
    return error(400, "invalid_json");
  }
  // Lone surrogates anywhere; each put's data depth is its own op's answer (putOp).
  if (dataProblem(body, Infinity) !== null) return error(400, "invalid_json");
  if (!isObject(body) || !Array.isArray(body.ops)) return error(400, "invalid_batch");
  const raws: unknown[] = body.ops;
  if (raws.length === 0 || raws.length > MAX_BATCH_OPS) return error(400, "invalid_batch");

  const checked = raws.map((raw) => batchOp(me, raw));
  const valid = checked.filter((op): op is Op => !("status" in op));
  const ran = await execute(env, me, valid);
  let next = 0;
  const answers = checked.map((op) => ("status" in op ? op : ran[next++]));
  const items = answers.map((a) => `{"status":${a.status},"body":${a.body}}`);
  return rawJson(200, `{"results":[${items.join(",")}]}`);
}

// ---- GET /v1/events --------------------------------------------------------------

interface EventRow extends StateRow {
  at: string;
  event_id: string;
  seq: number;
  deleted: number;
}

const EVENT_ID = new RegExp(`^${SEG}$`);

function eventJson(row: EventRow, withSeq: boolean): string {
  if (row.deleted) return `{"path":${JSON.stringify(row.path)},"deleted":true,"seq":${row.seq}}`;
  const entry = entryJson(row);
  const extra = `,"at":${JSON.stringify(row.at)}` + (withSeq ? `,"seq":${row.seq}` : "");
  return entry.slice(0, -1) + extra + "}";
}

async function handleEvents(request: Request, env: Env, me: Machine, url: URL): Promise<Response> {
  if (request.method !== "GET") return error(405, "method_not_allowed");
  const batch = url.searchParams.get("batch_id");
  if (batch === null || !isPrefix("events/" + batch)) return error(400, "invalid_batch_id");
  // The whole batch must be readable: no filtered answers here.
  if (!me.read.some((s) => covers(s, "events/" + batch))) return error(403, "forbidden");

  const limitText = url.searchParams.get("limit");
  let limit = MAX_LIMIT;
  if (limitText !== null) {
    if (!/^[0-9]{1,4}$/.test(limitText)) return error(400, "invalid_limit");
    limit = Number.parseInt(limitText, 10);
    if (limit < 1 || limit > MAX_LIMIT) return error(400, "invalid_limit");
  }
  const sinceText = url.searchParams.get("since");
  const after = url.searchParams.get("after");
  const meta = env.DB.prepare("SELECT events_seq, events_pruned_seq FROM meta WHERE id = 1");
  const columns = "path, data, version, updated_by, at, event_id, seq, deleted";

  if (sinceText !== null) {
    if (after !== null) return error(400, "invalid_cursor"); // a cursor belongs to the other mode
    const since = parseVersion(sinceText);
    if (since === null || since === "unsafe") return error(400, "invalid_since");
    const [counters, changes] = await env.DB.batch([
      meta,
      env.DB.prepare(`SELECT ${columns} FROM events WHERE batch_id = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3`).bind(
        batch,
        since,
        limit + 1,
      ),
    ]);
    const { events_seq: current, events_pruned_seq: pruned } = counters.results[0] as {
      events_seq: number;
      events_pruned_seq: number;
    };
    // Deletions after `since` are gone (or `since` is from no history of this
    // database): the copy cannot be brought up to date, only reread.
    if ((since > 0 && since < pruned) || since > current) return rawJson(200, `{"resync":true,"seq":${current}}`);
    let rows = changes.results as EventRow[];
    const more = rows.length > limit;
    if (more) rows = rows.slice(0, limit);
    const seq = more ? rows[rows.length - 1].seq : current;
    const items = rows.map((row) => eventJson(row, true));
    return rawJson(200, `{"changes":[${items.join(",")}],"seq":${seq},"more":${more}}`);
  }

  const where = ["batch_id = ?1", "deleted = 0"];
  const binds: (string | number)[] = [batch, limit + 1];
  if (after !== null) {
    // `<at>|<event_id>`: an event id has no `|`, an `at` may.
    const bar = after.lastIndexOf("|");
    if (bar < 0 || !EVENT_ID.test(after.slice(bar + 1))) return error(400, "invalid_cursor");
    where.push("(at > ?3 OR (at = ?3 AND event_id > ?4))");
    binds.push(after.slice(0, bar), after.slice(bar + 1));
  }
  const [counters, page] = await env.DB.batch([
    meta,
    env.DB.prepare(
      `SELECT ${columns} FROM events WHERE ${where.join(" AND ")} ORDER BY at, event_id LIMIT ?2`,
    ).bind(...binds),
  ]);
  const current = (counters.results[0] as { events_seq: number }).events_seq;
  let rows = page.results as EventRow[];
  let text = "";
  if (rows.length > limit) {
    rows = rows.slice(0, limit);
    const last = rows[rows.length - 1];
    text = `,"next_cursor":${JSON.stringify(`${last.at}|${last.event_id}`)}`;
  }
  const items = rows.map((row) => eventJson(row, false));
  return rawJson(200, `{"events":[${items.join(",")}]${text},"seq":${current}}`);
}

// ---- pruning (the scheduled handler) --------------------------------------------

const DEFAULT_PRUNE_AFTER_SECONDS = 7 * 24 * 3600;

function pruneAfterSeconds(env: Env): number {
  const text = env.PRUNE_AFTER_SECONDS;
  if (text !== undefined && /^[0-9]{1,12}$/.test(text.trim())) return Number.parseInt(text.trim(), 10);
  return DEFAULT_PRUNE_AFTER_SECONDS;
}

/**
 * Forget tombstones and event deletion markers older than the window, in one
 * transaction, raising the floors first over exactly the rows deleted (one
 * cutoff for both): version_floor covers every version a pruned tombstone
 * remembered, events_pruned_seq every pruned marker.
 */
export async function prune(env: Env, now: number = Date.now()): Promise<void> {
  const cutoff = new Date(now - pruneAfterSeconds(env) * 1000).toISOString();
  await env.DB.batch([
    env.DB.prepare(
      `UPDATE meta SET version_floor = MAX(version_floor, COALESCE(
         (SELECT MAX(last_version) FROM state_tombstones WHERE deleted_at IS NULL OR deleted_at < ?1), 0))
       WHERE id = 1`,
    ).bind(cutoff),
    env.DB.prepare("DELETE FROM state_tombstones WHERE deleted_at IS NULL OR deleted_at < ?1").bind(cutoff),
    env.DB.prepare(
      `UPDATE meta SET events_pruned_seq = MAX(events_pruned_seq, COALESCE(
         (SELECT MAX(seq) FROM events WHERE deleted = 1 AND changed_at < ?1), 0))
       WHERE id = 1`,
    ).bind(cutoff),
    env.DB.prepare("DELETE FROM events WHERE deleted = 1 AND changed_at < ?1").bind(cutoff),
  ]);
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
  const select = (columns: string) => {
    let sql = `SELECT ${columns} FROM state WHERE ${where.join(" AND ")} ORDER BY path`;
    if (limit !== null) sql += " LIMIT ?";
    return env.DB.prepare(sql).bind(...(limit !== null ? [...binds, limit + 1] : binds));
  };
  const page = <T extends { path: string }>(rows: T[]): [T[], string | null] =>
    limit !== null && rows.length > limit ? [rows.slice(0, limit), rows[limit - 1].path] : [rows, null];
  // A page's validator names its rows and versions (a version never repeats for a
  // path, and every write makes a new one), so asking again with it reads only
  // paths and versions: an unchanged page is a bodiless 304.
  const validator = async (rows: { path: string; version: number }[], next: string | null) =>
    `"${await sha256Hex(JSON.stringify([ranges !== null, next, rows.map((r) => [r.path, r.version])]))}"`;
  const asked = request.headers.get("If-None-Match");
  if (asked !== null) {
    const { results } = await select("path, version").all<{ path: string; version: number }>();
    const etag = await validator(...page(results));
    if (asked === etag) return new Response(null, { status: 304, headers: { ETag: etag } });
  }
  const { results } = await select("path, data, version, updated_by").all<StateRow>();
  const [rows, nextCursor] = page(results);
  let text = `{"entries":[${rows.map(entryJson).join(",")}]`;
  if (ranges !== null) text += `,"filtered":true`;
  if (nextCursor !== null) text += `,"next_cursor":${JSON.stringify(nextCursor)}`;
  return new Response(text + "}", {
    status: 200,
    headers: { "Content-Type": "application/json", ETag: await validator(rows, nextCursor) },
  });
}

const SCHEMA_MISSING = /no such (?:table|column)/i;

async function route(request: Request, env: Env): Promise<Response> {
  const url = new URL(request.url);
  // The raw pathname keeps percent-encoding; the runtime has already
  // resolved unencoded dot segments, which is why clients encode every `/`.
  const pathname = url.pathname;
  if (pathname === "/v1/health") {
    return json(200, { status: "ok", capabilities: ["batch", "events", "time"] });
  }

  const me = await authenticate(request, env);
  if (me instanceof Response) return me;

  if (pathname === "/v1/whoami") {
    if (request.method !== "GET") return error(405, "method_not_allowed");
    return json(200, { machine: me.machine, read_prefixes: me.read, write_prefixes: me.write });
  }
  if (pathname === "/v1/state") return handleList(request, env, me, url);
  if (pathname === "/v1/batch") return handleBatch(request, env, me);
  if (pathname === "/v1/events") return handleEvents(request, env, me, url);
  if (pathname.startsWith("/v1/state/")) {
    return handleState(request, env, me, pathname.slice("/v1/state/".length));
  }
  return error(404, "route_not_found");
}

// Every response carries the Worker's clock (Unix milliseconds): clients measure how far
// their own is from it and refuse liveness decisions beyond a bound (docs/backends.md).
const TIME_HEADER = "X-Agentcoord-Time";

async function served(request: Request, env: Env): Promise<Response> {
  try {
    return await route(request, env);
  } catch (failure) {
    const message = failure instanceof Error ? failure.message : String(failure);
    console.error(`agentcoord state API: ${message}`);
    if (SCHEMA_MISSING.test(message)) return error(500, "schema_not_migrated");
    return error(500, "internal_error");
  }
}

export default {
  async fetch(request: Request, env: Env): Promise<Response> {
    const response = await served(request, env);
    response.headers.set(TIME_HEADER, String(Date.now()));
    return response;
  },
  async scheduled(_controller: ScheduledController, env: Env): Promise<void> {
    await prune(env);
  },
} satisfies ExportedHandler<Env>;
