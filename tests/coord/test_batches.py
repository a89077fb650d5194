"""register-batch and dependency refs, on a real LocalStore with a fake clock.

Spec: register-batch, Batch Schema (depends_on split at the last colon),
telemetry contract "Retained Batch Manifests"; issue 3 "Must show" hostile
manifests.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agentcoordd.coord import batches
from agentcoordd.coord.batches import lane_dependencies, register_batch, split_dependency
from agentcoordd.coord.context import Ctx
from agentcoordd.model.errors import EXIT_USAGE, UsageError
from agentcoordd.model.timefmt import format_ts

PATH = "batches/b1.json"


def manifest(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "batch_id": "b1",
        "repo": "acme/widgets",
        "objective": "ship it",
        "lanes": [
            {"name": "backend", "owner": "agent-a", "targets": ["1"]},
            {"name": "docs", "owner": "agent-b", "targets": ["2"], "depends_on": ["b1:backend"]},
        ],
    }
    base.update(overrides)
    return base


def encode(data: Any) -> bytes:
    return json.dumps(data).encode()


def stored(root: Path, rel: str = PATH) -> dict[str, Any]:
    return json.loads((root / rel).read_text())


def files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


async def test_register_stamps_schema_version_and_times(ctx: Ctx, root: Path, clock) -> None:
    result = await register_batch(ctx, manifest=encode(manifest()))

    record = stored(root)
    now = format_ts(clock.now())
    assert result["batch_id"] == "b1" and result["path"] == PATH and result["batch"] == record
    assert record["schema_version"] == 1
    assert record["registered_at"] == now and record["updated_at"] == now
    assert record["lanes"][1]["depends_on"] == ["b1:backend"]


@pytest.mark.parametrize(("given", "persisted"), [
    ("auto_merge_when_gates_pass", "auto"), ("ask", "ask"), ("none", "none"), ("auto", "auto")])
async def test_launch_merge_authority_is_persisted_in_its_short_form(ctx: Ctx, root: Path, given: str,
                                                                     persisted: str) -> None:
    await register_batch(ctx, manifest=encode(manifest(merge_authority=given)))
    assert stored(root)["merge_authority"] == persisted


@pytest.mark.parametrize("bad", ["AUTO", "", None, 1, "auto_merge", "../x"])
async def test_unknown_merge_authority_is_refused_and_nothing_written(ctx: Ctx, root: Path, bad: Any) -> None:
    with pytest.raises(UsageError) as excinfo:
        await register_batch(ctx, manifest=encode(manifest(merge_authority=bad)))
    assert "merge_authority" in excinfo.value.message and "\n" not in excinfo.value.message
    assert files(root) == []


async def test_register_keeps_every_other_top_level_and_lane_field(ctx: Ctx, root: Path) -> None:
    rich = manifest(
        targets=[{"type": "pull_request", "target": "4005", "url": "https://x.test/4005", "title": "t"}],
        reservations=[{"type": "pull_request", "target": "3999", "reason": "deferred"}],
        created_at="2026-06-20T10:00:00.000Z",
        created_by_machine="workstation-1",
        launch_prompt="Use $pr-batch …",
        instructions="be careful",
        dashboard_url="https://coord.example.test/b1",
        custom_field={"nested": [1, 2]},
    )
    rich["lanes"][0].update(status="queued", thread_handle="t-1", host="codex", branch="feat/1", pr_url="https://x/1", extra=1)

    await register_batch(ctx, manifest=encode(rich))

    record = stored(root)
    for key, value in rich.items():
        assert record[key] == value
    assert record["lanes"][0]["extra"] == 1 and record["lanes"][0]["status"] == "queued"


async def test_explicit_launch_prompt_overrides_the_manifests(ctx: Ctx, root: Path) -> None:
    await register_batch(ctx, manifest=encode(manifest(launch_prompt="old")), launch_prompt="exact prompt\n")

    assert stored(root)["launch_prompt"] == "exact prompt\n"


async def test_synthetic_flags_stamp_provenance(ctx: Ctx, root: Path) -> None:
    await register_batch(ctx, manifest=encode(manifest()), synthetic=True, synthetic_kind="simulation")

    record = stored(root)
    assert record["synthetic"] is True and record["synthetic_kind"] == "simulation"


async def test_synthetic_kind_without_synthetic_sets_the_kind_only(ctx: Ctx, root: Path) -> None:
    """agent-coord (conformance register_batch_reregister_synthetic): option > manifest > stored."""
    await register_batch(ctx, manifest=encode(manifest()), synthetic=True, synthetic_kind="smoke")
    await register_batch(ctx, manifest=encode(manifest()), synthetic_kind="sim")
    assert (stored(root)["synthetic"], stored(root)["synthetic_kind"]) == (True, "sim")


async def test_batch_id_option_names_the_batch_or_must_match(ctx: Ctx, root: Path) -> None:
    unnamed = manifest()
    del unnamed["batch_id"]
    await register_batch(ctx, manifest=encode(unnamed), batch_id="b1")
    assert stored(root)["batch_id"] == "b1"
    with pytest.raises(UsageError, match="^--batch-id does not match batch manifest batch_id$"):
        await register_batch(ctx, manifest=encode(manifest()), batch_id="b2")


async def test_reregistration_keeps_synthetic_markers_and_registered_at(ctx: Ctx, root: Path, clock) -> None:
    await register_batch(ctx, manifest=encode(manifest()), synthetic=True, synthetic_kind="smoke")
    first = stored(root)["registered_at"]
    clock.advance(hours=1)

    await register_batch(ctx, manifest=encode(manifest(objective="changed")))

    record = stored(root)
    assert record["synthetic"] is True and record["synthetic_kind"] == "smoke"
    assert record["registered_at"] == first
    assert record["updated_at"] == format_ts(clock.now())
    assert record["objective"] == "changed"


async def test_reregistration_can_state_its_own_synthetic_marker(ctx: Ctx, root: Path) -> None:
    await register_batch(ctx, manifest=encode(manifest()), synthetic=True, synthetic_kind="smoke")
    await register_batch(ctx, manifest=encode(manifest(synthetic=False)))

    record = stored(root)
    assert record["synthetic"] is False and record["synthetic_kind"] == "smoke"


async def test_reregistration_does_not_reopen_closed_lanes(ctx: Ctx, root: Path) -> None:
    await register_batch(ctx, manifest=encode(manifest()))
    record = stored(root)
    for lane in record["lanes"]:
        lane.update(status="done", terminal="done", closed_at="2026-06-13T01:00:00Z",
                    closed_by={"agent_id": lane["owner"], "machine": "m1"}, workspace="default")
    record.update(status="completed", completed_at="2026-06-13T01:00:00Z")
    (root / PATH).write_text(json.dumps(record))

    await register_batch(ctx, manifest=encode(manifest()))

    again = stored(root)
    assert [lane["terminal"] for lane in again["lanes"]] == ["done", "done"]
    assert again["lanes"][0]["closed_by"] == {"agent_id": "agent-a", "machine": "m1"}
    assert again["status"] == "completed" and again["completed_at"] == "2026-06-13T01:00:00Z"

    added = manifest()
    added["lanes"].append({"name": "qa", "owner": "agent-c", "targets": ["3"]})
    await register_batch(ctx, manifest=encode(added))
    grown = stored(root)
    assert "status" not in grown and "completed_at" not in grown
    assert grown["lanes"][0]["terminal"] == "done" and "terminal" not in grown["lanes"][2]


async def test_depends_on_may_be_a_single_string(ctx: Ctx, root: Path) -> None:
    data = manifest()
    data["lanes"][1]["depends_on"] = "b1:backend"

    await register_batch(ctx, manifest=encode(data))

    assert stored(root)["lanes"][1]["depends_on"] == "b1:backend"


async def test_cross_batch_dependency_with_colons_in_batch_id(ctx: Ctx, root: Path) -> None:
    data = manifest()
    data["lanes"][1]["depends_on"] = ["release:2026:06:backend"]

    await register_batch(ctx, manifest=encode(data))

    assert split_dependency("release:2026:06:backend") == ("release:2026:06", "backend")


def test_dependency_refs_split_at_the_last_colon() -> None:
    assert split_dependency("b:1:lane") == ("b:1", "lane")
    assert split_dependency("nocolon") is None
    assert split_dependency(":lane") is None
    assert split_dependency("b1:") is None
    assert split_dependency("../x:lane") is None
    assert lane_dependencies({"depends_on": "b1:a"}) == ["b1:a"]
    assert lane_dependencies({"depends_on": ["b1:a", "b2:b"]}) == ["b1:a", "b2:b"]
    assert lane_dependencies({}) == [] and lane_dependencies("x") == []


# ---- hostile manifests: one-line error, exit 1, nothing written ------------


def _big_manifest(size: int) -> bytes:
    data = manifest(objective="x" * size)
    return encode(data)


HOSTILE: list[Any] = [
    pytest.param(b"{not json", "JSON invalid", id="not-json"),
    pytest.param(b"", "JSON invalid", id="empty-file"),
    pytest.param(b"\xff\xfe{}", "JSON invalid", id="not-utf8"),
    pytest.param(_big_manifest(5 * 1024 * 1024), "too large", id="5MB"),
    pytest.param(_big_manifest(256 * 1024), "too large", id="just-over-256KiB"),
    pytest.param(encode([1, 2]), "must be a JSON object", id="array"),
    pytest.param(encode(manifest(batch_id="../x")), "invalid batch-id", id="unsafe-batch-id"),
    pytest.param(encode(manifest(batch_id="a/b")), "invalid batch-id", id="slash-batch-id"),
    pytest.param(encode({k: v for k, v in manifest().items() if k != "batch_id"}), "missing batch_id", id="no-batch-id"),
    pytest.param(encode(manifest(batch_id=7)), "batch_id must be a string", id="numeric-batch-id"),
    pytest.param(encode(manifest(lanes=[])), "must not be empty", id="no-lanes"),
    pytest.param(encode(manifest(lanes={"a": 1})), "must be an array", id="lanes-object"),
    pytest.param(encode(manifest(lanes=["backend"])), "must be a JSON object", id="non-object-lane"),
    pytest.param(
        encode(manifest(lanes=[{"name": "a:b", "owner": "agent-a", "targets": ["1"]}])),
        "cannot contain ':'",
        id="lane-with-colon",
    ),
    pytest.param(
        encode(manifest(lanes=[{"name": "a", "owner": "x", "targets": ["1"]}] * 2)),
        "duplicated",
        id="duplicate-lanes",
    ),
    pytest.param(encode(manifest(lanes=[{"owner": "x", "targets": ["1"]}])), "missing name", id="no-name"),
    pytest.param(encode(manifest(lanes=[{"name": "a", "targets": ["1"]}])), "missing owner", id="no-owner"),
    pytest.param(encode(manifest(lanes=[{"name": "a", "owner": "../x", "targets": ["1"]}])), "invalid lane owner: ../x", id="bad-owner"),
    pytest.param(encode(manifest(lanes=[{"name": "a", "owner": "x"}])), "missing targets", id="no-targets"),
    pytest.param(encode(manifest(lanes=[{"name": "a", "owner": "x", "targets": []}])), "missing targets", id="empty-targets"),
    pytest.param(encode(manifest(lanes=[{"name": "a", "owner": "x", "targets": "1"}])), "must be an array", id="targets-string"),
    pytest.param(encode(manifest(lanes=[{"name": "a", "owner": "x", "targets": ["a/b"]}])), "invalid lane target: a/b", id="bad-target"),
    pytest.param(encode(manifest(lanes=[{"name": "a", "owner": "x", "targets": ["", None]}])), "missing targets", id="empty-target"),
    pytest.param(
        encode(manifest(lanes=[{"name": "a", "owner": "x", "targets": ["1"], "depends_on": ["nocolon"]}])),
        "invalid dependency ref",
        id="dep-without-colon",
    ),
    pytest.param(
        encode(manifest(lanes=[{"name": "a", "owner": "x", "targets": ["1"], "depends_on": "b1:missing"}])),
        "unknown lane",
        id="dep-on-unknown-lane-of-same-batch",
    ),
    pytest.param(encode(manifest(repo="noslash")), "invalid batch repo", id="bad-repo"),
    pytest.param(encode(manifest(repo="../x")), "invalid batch repo", id="dotdot-repo"),
    pytest.param(encode(manifest(launch_prompt=5)), "launch_prompt must be a string", id="bad-prompt"),
]


@pytest.mark.parametrize(("raw", "expected"), HOSTILE)
async def test_hostile_manifest_is_refused_with_one_line_and_nothing_written(
    ctx: Ctx, root: Path, raw: bytes, expected: str
) -> None:
    with pytest.raises(UsageError) as caught:
        await register_batch(ctx, manifest=raw)

    assert caught.value.exit_code == EXIT_USAGE
    assert expected in caught.value.message
    assert "\n" not in caught.value.message and len(caught.value.message) < 300
    assert files(root) == []


async def test_launch_prompt_that_overflows_the_record_cap_writes_nothing(ctx: Ctx, root: Path) -> None:
    with pytest.raises(UsageError, match="limit"):
        await register_batch(ctx, manifest=encode(manifest()), launch_prompt="p" * batches.MAX_MANIFEST_BYTES)
    assert files(root) == []


async def test_an_empty_launch_prompt_is_stored_as_given(ctx: Ctx, root: Path) -> None:
    """agent-coord (conformance register_batch_launch_prompt): an empty file is a prompt."""
    await register_batch(ctx, manifest=encode(manifest()), launch_prompt="")
    assert stored(root)["launch_prompt"] == ""


async def test_hostile_reregistration_leaves_the_stored_manifest_untouched(ctx: Ctx, root: Path) -> None:
    await register_batch(ctx, manifest=encode(manifest()))
    before = (root / PATH).read_bytes()

    with pytest.raises(UsageError):
        await register_batch(ctx, manifest=encode(manifest(lanes=[{"name": "a:b", "owner": "x", "targets": ["1"]}])))

    assert (root / PATH).read_bytes() == before


async def test_concurrent_change_is_retried_with_cas(ctx: Ctx, root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    await register_batch(ctx, manifest=encode(manifest()))
    real_replace = ctx.store.replace
    calls = {"n": 0}

    async def racing_replace(path: str, data: Any, version: str) -> str:
        calls["n"] += 1
        if calls["n"] == 1:  # someone else rewrites the manifest first
            current = await ctx.store.get(path)
            await real_replace(path, {**current.data, "synthetic": True}, current.version)
        return await real_replace(path, data, version)

    monkeypatch.setattr(ctx.store, "replace", racing_replace)
    await register_batch(ctx, manifest=encode(manifest(objective="second")))

    record = stored(root)
    assert calls["n"] == 2 and record["objective"] == "second" and record["synthetic"] is True
