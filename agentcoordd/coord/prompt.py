"""Reading a `$pr-batch` launch prompt: the targets it names, and a manifest from it.

A launch prompt is prose; this reader only trusts explicit spellings and
ignores every other number (dates, batch ids, counts):

* **GitHub URLs** `https://github.com/OWNER/REPO/pull/N` (a pull request) and
  `…/issues/N` (an issue). When the batch repo is known, URLs into other
  repositories are not targets of this batch.
* **`#N`** anywhere (not inside a word, URL path or HTML entity).
* **Keyword lists**: `PR 4005`, `PRs 4005, 4006 and #4007`, `pull request
  4005`, `issues: 12 & 13`, `target 4005`, `targets 1/2/3`.

A target mentioned on a line that speaks of reserving/deferring it (reserve,
defer, hold, skip, exclude, out of scope, "do not"), or inside a section whose
heading line says so (`Reservations:`, `Deferred:` … up to the next blank line
or heading), is a **reservation**, not an active target.

Manifest import (`manifest_from_prompt`) also reads:

* `Repository: owner/repo` (or `Repo:`; else the repo of the first GitHub URL),
  `Batch id: <id>` (required), `Batch objective: …` / `Objective: …`;
* lanes: a line `Lane NAME: …` (optionally bulleted or numbered), or a bullet
  `- NAME: …` inside a `Lanes:` section. On that line: `owner X` /
  `agent X` / `assigned to X`, the targets (as above), `depends on A, B`
  (a bare lane name means this batch's lane), `branch X`, `thread X`,
  `host X`. A lane without an owner gets owner `unassigned`; a prompt with no
  lane lines gets one queued lane per active target (`pr-N` / `issue-N` /
  `target-N`), owner `unassigned`. Those defaults are listed in `warnings`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

_URL = re.compile(
    r"https?://(?:www\.)?github\.com/([A-Za-z0-9_.-]+)/([A-Za-z0-9_.-]+)/(pull|pulls|issues)/(\d+)",
    re.IGNORECASE,
)
_HASH = re.compile(r"(?<![\w&/#])#(\d+)\b")
_KEYWORD = re.compile(
    r"\b(PRs?|pull[ -]requests?|issues?|targets?)\b[\s:=]*"
    r"((?:#?\d+\b(?:\s*(?:,|;|/|&|\band\b|\bor\b)?\s*(?=#?\d))?)+)",
    re.IGNORECASE,
)
_NUMBER = re.compile(r"\d+")
_RESERVE_WORDS = re.compile(
    r"\b(reserv\w*|defer\w*|hold|on hold|skip\w*|exclud\w*|out of scope|do not|don't|not active)\b",
    re.IGNORECASE,
)
_HEADING = re.compile(r"^\s*(?:#+\s*)?([A-Za-z][A-Za-z /()-]{0,60}):\s*$")
_REPO_LINE = re.compile(
    r"^\s*(?:[-*]\s*)?(?:repository|repo)\s*[:=]\s*[`'\"]?([A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+)",
    re.IGNORECASE | re.MULTILINE,
)
_BATCH_LINE = re.compile(
    r"\bbatch[ _-]?id\s*[:=]\s*[`'\"]?([A-Za-z0-9_][A-Za-z0-9._:@+=,~-]*)", re.IGNORECASE
)
_OBJECTIVE_LINE = re.compile(
    r"^\s*(?:[-*]\s*)?(?:batch\s+)?objective\s*[:=]\s*(.+?)\s*$", re.IGNORECASE | re.MULTILINE
)
_LANE_LINE = re.compile(
    r"^\s*(?:[-*\u2022+]\s*|\d+[.)]\s*)?lane\s+[`'\"]?([A-Za-z0-9_][A-Za-z0-9._-]*)[`'\"]?"
    r"\s*(?:[:\u2014\u2013-]\s*|\(|$)(.*)$",
    re.IGNORECASE,
)
_BULLET_LANE = re.compile(
    r"^\s*(?:[-*\u2022+]|\d+[.)])\s*[`'\"]?([A-Za-z0-9_][A-Za-z0-9._-]*)[`'\"]?\s*(?::|\(|\s[\u2014\u2013-]\s)(.*)$"
)
_ID = r"[`'\"]?([A-Za-z0-9_][A-Za-z0-9._:@+=~-]*[A-Za-z0-9_])[`'\"]?"
_OWNER = re.compile(r"\b(?:owner|agent(?:[_ ]id)?|assigned to)\s*[:=]?\s*" + _ID, re.IGNORECASE)
_BRANCH = re.compile(r"\bbranch\s*[:=]?\s*[`'\"]?([A-Za-z0-9_][A-Za-z0-9._/+-]*[A-Za-z0-9_])", re.IGNORECASE)
_THREAD = re.compile(r"\bthread(?:[_ ]handle)?\s*[:=]?\s*" + _ID, re.IGNORECASE)
_HOST = re.compile(r"\bhost\s*[:=]?\s*" + _ID, re.IGNORECASE)
_DEPENDS = re.compile(
    r"\bdepends(?:[_ ]on)?\s*[:=]?\s*((?:[`'\"]?[A-Za-z0-9_][A-Za-z0-9._:-]*[`'\"]?(?:\s*(?:,|\band\b)\s*)?)+)",
    re.IGNORECASE,
)
_STOP_WORDS = {"none", "nothing", "n/a", "-"}


@dataclass
class Mention:
    target: str
    type: str  # pull_request | issue | target
    url: str | None = None
    reserved: bool = False
    reason: str | None = None


@dataclass
class Mentions:
    """Targets a prompt names, in first-mention order (one entry per target)."""

    items: dict[str, Mention] = field(default_factory=dict)

    def add(self, mention: Mention) -> None:
        seen = self.items.get(mention.target)
        if seen is None:
            self.items[mention.target] = mention
            return
        if seen.type == "target" and mention.type != "target":
            seen.type = mention.type
        seen.url = seen.url or mention.url
        if mention.reserved and not seen.reserved:
            seen.reserved, seen.reason = True, mention.reason

    @property
    def active(self) -> list[str]:
        return [t for t, m in self.items.items() if not m.reserved]

    @property
    def reserved(self) -> list[str]:
        return [t for t, m in self.items.items() if m.reserved]


def _kind(word: str) -> str:
    word = word.lower()
    if word.startswith(("pr", "pull")):
        return "pull_request"
    if word.startswith("issue"):
        return "issue"
    return "target"


def line_targets(line: str, repo: str | None = None) -> list[Mention]:
    """The targets one line names (URLs, #N, keyword lists), in order."""
    found: list[tuple[int, Mention]] = []
    spans: list[tuple[int, int]] = []
    for match in _URL.finditer(line):
        owner, name, kind, number = match.groups()
        spans.append(match.span())
        if repo is not None and f"{owner}/{name}".lower() != repo.lower():
            continue
        found.append((match.start(), Mention(number, "issue" if kind.lower() == "issues" else "pull_request", match.group(0))))
    rest = line
    for start, end in spans:  # blank URLs out so their digits are not read again
        rest = rest[:start] + " " * (end - start) + rest[end:]
    for match in _KEYWORD.finditer(rest):
        kind = _kind(match.group(1))
        for number in _NUMBER.finditer(match.group(2)):
            found.append((match.start(2) + number.start(), Mention(number.group(0), kind)))
    for match in _HASH.finditer(rest):
        found.append((match.start(), Mention(match.group(1), "target")))
    found.sort(key=lambda item: item[0])
    return [m for _, m in found]


def prompt_targets(prompt: str, repo: str | None = None) -> Mentions:
    """Every target the prompt names, with reservations marked (see module doc)."""
    mentions = Mentions()
    reserving_section = False
    for line in prompt.splitlines():
        if not line.strip():
            reserving_section = False
            continue
        heading = _HEADING.match(line)
        if heading:
            reserving_section = bool(_RESERVE_WORDS.search(heading.group(1)))
            continue
        reserved = reserving_section or bool(_RESERVE_WORDS.search(line))
        for mention in line_targets(line, repo):
            if reserved:
                mention.reserved, mention.reason = True, line.strip()[:200]
            mentions.add(mention)
    return mentions


def _clean_id(value: str) -> str:
    return value.rstrip(".,;:)")


def prompt_fields(prompt: str) -> dict[str, str]:
    """batch_id, repo and objective stated by the prompt (absent when not stated)."""
    out: dict[str, str] = {}
    batch = _BATCH_LINE.search(prompt)
    if batch:
        out["batch_id"] = _clean_id(batch.group(1))
    repo = _REPO_LINE.search(prompt)
    if repo:
        out["repo"] = _clean_id(repo.group(1).strip("`'\""))
    else:
        url = _URL.search(prompt)
        if url:
            out["repo"] = f"{url.group(1)}/{url.group(2)}"
    objective = _OBJECTIVE_LINE.search(prompt)
    if objective:
        out["objective"] = objective.group(1).strip()
    return out


def _lane_lines(prompt: str) -> list[tuple[str, str]]:
    lanes: list[tuple[str, str]] = []
    in_lanes = False
    for line in prompt.splitlines():
        if not line.strip():
            in_lanes = False
            continue
        explicit = _LANE_LINE.match(line)
        if explicit:
            lanes.append((explicit.group(1), explicit.group(2)))
            continue
        heading = _HEADING.match(line)
        if heading:
            in_lanes = heading.group(1).strip().lower() in ("lanes", "lane plan", "workers", "lane assignments")
            continue
        if in_lanes:
            bullet = _BULLET_LANE.match(line)
            if bullet:
                lanes.append((bullet.group(1), bullet.group(2)))
    return lanes


def _target_entry(mention: Mention, repo: str | None) -> dict[str, Any]:
    entry: dict[str, Any] = {"type": mention.type, "target": mention.target}
    if mention.url:
        entry["url"] = mention.url
    elif repo and mention.type in ("pull_request", "issue"):
        entry["url"] = f"https://github.com/{repo}/{'pull' if mention.type == 'pull_request' else 'issues'}/{mention.target}"
    return entry


def manifest_from_prompt(
    prompt: str, *, created_at: str, created_by_machine: str | None = None
) -> tuple[dict[str, Any], list[str]]:
    """A retained batch manifest (schema_version 1) read from a launch prompt.

    Returns (manifest, warnings). Raises ValueError naming what is missing
    when the prompt states no batch id or names no target at all.
    """
    fields = prompt_fields(prompt)
    warnings: list[str] = []
    batch_id = fields.get("batch_id")
    if not batch_id:
        raise ValueError("the launch prompt states no batch id (expected a line like 'Batch id: <id>')")
    repo = fields.get("repo")
    mentions = prompt_targets(prompt, repo)
    if not mentions.active:
        raise ValueError("the launch prompt names no active PR/issue target")
    lanes: list[dict[str, Any]] = []
    for name, rest in _lane_lines(prompt):
        lane: dict[str, Any] = {"name": name}
        owner = _OWNER.search(rest)
        if owner:
            lane["owner"] = owner.group(1)
        else:
            lane["owner"] = "unassigned"
            warnings.append(f"lane {name}: no owner stated; recorded as 'unassigned'")
        deps_rest = rest
        depends = _DEPENDS.search(rest)
        refs: list[str] = []
        if depends:
            deps_rest = rest[: depends.start()] + rest[depends.end():]
            for raw in re.split(r"\s*(?:,|\band\b)\s*", depends.group(1)):
                ref = raw.strip("`'\" ")
                if not ref or ref.lower() in _STOP_WORDS:
                    continue
                refs.append(ref if ":" in ref else f"{batch_id}:{ref}")
        targets = [m.target for m in line_targets(deps_rest, repo) if m.target in mentions.active]
        lane["targets"] = list(dict.fromkeys(targets))
        lane["depends_on"] = refs
        lane["status"] = "queued"
        for key, pattern in (("branch", _BRANCH), ("thread_handle", _THREAD), ("host", _HOST)):
            match = pattern.search(rest)
            if match:
                lane[key] = match.group(1)
        for target in lane["targets"]:
            mention = mentions.items[target]
            if mention.type == "pull_request" and "pr_url" not in lane:
                url = _target_entry(mention, repo).get("url")
                if url:
                    lane["pr_url"] = url
        if not lane["targets"]:
            warnings.append(f"lane {name}: names no active target")
        lanes.append(lane)
    if not lanes:
        for target in mentions.active:
            mention = mentions.items[target]
            prefix = {"pull_request": "pr", "issue": "issue"}.get(mention.type, "target")
            lane = {"name": f"{prefix}-{target}", "owner": "unassigned", "targets": [target],
                    "depends_on": [], "status": "queued"}
            url = _target_entry(mention, repo).get("url")
            if mention.type == "pull_request" and url:
                lane["pr_url"] = url
            lanes.append(lane)
        warnings.append("no lane lines found: one queued lane per target, owner 'unassigned'")
    manifest: dict[str, Any] = {"schema_version": 1, "batch_id": batch_id}
    if repo:
        manifest["repo"] = repo
    else:
        warnings.append("no repository stated (expected 'Repository: owner/repo')")
    manifest["objective"] = fields.get("objective") or "(no objective stated in the launch prompt)"
    manifest["targets"] = [_target_entry(mentions.items[t], repo) for t in mentions.active]
    manifest["lanes"] = lanes
    if mentions.reserved:
        manifest["reservations"] = [
            {"type": mentions.items[t].type, "target": t, "reason": mentions.items[t].reason or "reserved"}
            for t in mentions.reserved
        ]
    manifest["created_at"] = created_at
    if created_by_machine:
        manifest["created_by_machine"] = created_by_machine
    manifest["launch_prompt"] = prompt
    return manifest, warnings


def manifest_targets(manifest: dict[str, Any]) -> tuple[set[str], set[str]]:
    """(active targets, reserved targets) a manifest declares: its `targets`
    entries (objects with `target`, or bare strings/numbers) plus every lane's."""
    from agentcoordd.coord.batches import lane_targets_of

    def ids_of(items: Any) -> set[str]:
        out: set[str] = set()
        for item in items if isinstance(items, list) else []:
            value = item.get("target") if isinstance(item, dict) else item
            if isinstance(value, (str, int)) and not isinstance(value, bool) and str(value):
                out.add(str(value).lstrip("#"))
        return out

    active = ids_of(manifest.get("targets"))
    for lane in manifest.get("lanes") if isinstance(manifest.get("lanes"), list) else []:
        active.update(t.lstrip("#") for t in lane_targets_of(lane))
    return active, ids_of(manifest.get("reservations"))
