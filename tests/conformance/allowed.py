"""Deliberate differences from agent-coord's recorded behaviour.

Every entry names its scenario, exactly what may differ there, and the row of
docs/compat.md that documents the difference (`compat="#anchor"`; the anchor
must exist, see test_compat_anchors_exist). Anything not covered here fails
its scenario; an entry (or one of its steps / file patterns) that no longer
covers any difference fails test_allowance_still_needed. Kinds (harness.py):

* StepMayDiffer(steps, exit=, stdout=, stdout_paths=) - step N's exit code
  and/or JSON stdout (any way, or only at the given JSON paths).
* StateMayDiffer(files, how={"differ","absent","extra"}, fields=) - state files
  (`<ROOT>/claims/...`, `*` one segment, `**` any) may differ (only at
  `fields` if given), be absent in ours, or exist only in ours.
* AdditiveJson(steps, keys=, lists=) - agent-coord's stdout JSON is a
  sub-structure of ours: extra keys at `keys`, items appended to vocabulary
  lists at `lists` (path -> the items that may be appended). Nothing changed
  or removed.
* JsonOnFailure(steps) - same non-zero exit, but ours prints its JSON report
  where agent-coord printed nothing.
* FieldAddedEverywhere(field=) - scenario "*": a key `field` only ours has, in any
  state file or step JSON of any scenario (a field our records add).
* TextMayDiffer(steps) - in the differential set, whose text stdout is
  checked line for line (test_text_output): step N's text may differ.
* MessageMayDiffer(golden=, steps=, instead=) - for the softer stderr check:
  agent-coord's stderr lines matching `golden` need not appear in ours, if
  one of ours matches `instead` (when given).

Paths are dotted: `heartbeat_status_vocabulary.working`, `checks.2.status`.
"""

from __future__ import annotations

from conformance.harness import (
    EVERY_SCENARIO,
    AdditiveJson,
    Allowance,
    FieldAddedEverywhere,
    JsonOnFailure,
    MessageMayDiffer,
    StateMayDiffer,
    StepMayDiffer,
    TextMayDiffer,
)

# Keys `version --json` adds to agent-coord's (compat: version).
VERSION_KEYS = ("client_version", "daemon_version", "daemon_pid", "protocol_version",
                "daemon_protocol_version")
# Working statuses of the telemetry contract, listed after agent-coord's seven.
WORKING_VOCABULARY = {"heartbeat_status_vocabulary.working": ("queued", "token_limit_pause",
                                                              "continued")}

STRICT: list[Allowance] = [
    # -------------------------------------------------------- in every scenario
    FieldAddedEverywhere(
        scenario=EVERY_SCENARIO, field="fencing_token", compat="#fencing-tokens",
        why="every grant's claim (and its claim.acquired event) carries its fencing token"),
    FieldAddedEverywhere(
        scenario=EVERY_SCENARIO, field="lease", compat="#status-lease",
        why="status --repo --target --json says what a claim would decide now"),
    FieldAddedEverywhere(
        scenario=EVERY_SCENARIO, field="lane_state", compat="#lane-holders",
        why="each lane row of status says its own state from its own claim"),
    FieldAddedEverywhere(
        scenario=EVERY_SCENARIO, field="holder", compat="#lane-holders",
        why="each held lane row of status names its holder from its own claim"),
    FieldAddedEverywhere(
        scenario=EVERY_SCENARIO, field="closed_as", compat="#lane-holders",
        why="a closed lane row of status says the terminal it was closed with"),
    FieldAddedEverywhere(
        scenario=EVERY_SCENARIO, field="completion", compat="#batch-records-on-the-manifest",
        why="the last closeout of a batch stores its completion report on the manifest"),
    # -------------------------------------------------------- agent ids on claim
    StepMayDiffer(
        scenario="bad_ids", steps=(6,), compat="#agent-ids-validated-on-claim",
        why="claim --agent-id ../x is refused (exit 1) like heartbeat refuses it"),
    StateMayDiffer(
        scenario="bad_ids", files=("<ROOT>/claims/acme/widgets/2.json",), how=frozenset({"absent"}),
        compat="#agent-ids-validated-on-claim",
        why="the refused claim of agent ../x is not written"),

    # -------------------------------------------------------- split brain
    StepMayDiffer(
        scenario="split_brain_hard_stop", steps=(6,), compat="#split-brain",
        why="implicit status --json goes to the configured (fake) backend: exit 2 with a "
            "degraded report instead of 0 with the empty implicit local root"),
    StepMayDiffer(
        scenario="split_brain_hard_stop", steps=(7,), exit=False, stdout_paths=("reason",),
        compat="#split-brain",
        why="batch-audit is unknown (exit 2 in both) because the backend is unreachable, "
            "not because the batch is missing from the implicit local root"),
    StateMayDiffer(
        scenario="split_brain_hard_stop", how=frozenset({"differ"}), fields=("machine_id",),
        files=("<ROOT>/claims/acme/widgets/2.json", "<ROOT>/claims/acme/widgets/3.json",
               "<IMPLICIT>/claims/acme/widgets/1.json"),
        compat="#split-brain-machine-id",
        why="the env file's AGENT_COORD_MACHINE_ID=m1 is the daemon's own machine id, used "
            "when the caller sets none"),
    StepMayDiffer(
        scenario="split_brain_local_optin_values", steps=(14, 15), compat="#split-brain",
        why="AGENT_COORD_LOCAL=no is not an opt-in, so status --json and gc go to the "
            "configured (fake) backend: exit 2 instead of reading the implicit local root"),
    StepMayDiffer(
        scenario="doctor_local", steps=(15,), exit=False, compat="#doctor-split-brain",
        why="doctor follows the env file to the configured backend (exit 2 in both): "
            "status error/backend http instead of split_brain on the implicit local root"),

    # -------------------------------------------------------- repo dot segments
    StepMayDiffer(
        scenario="path_edge_ids", steps=(1, 2, 3), compat="#repo-dot-segments",
        why="--repo ./x and x/. are refused (exit 1): agent-coord collapses both onto "
            "claims/x/, so two different repos would share one claim file"),
    StepMayDiffer(
        scenario="path_edge_ids", steps=(12,), exit=False, stdout_paths=("claims.3", "claims.4"),
        compat="#repo-dot-segments", why="the refused ./x and x/. claims are not listed"),
    StateMayDiffer(
        scenario="path_edge_ids", files=("<ROOT>/claims/x/1.json", "<ROOT>/claims/x/2.json"),
        how=frozenset({"absent"}), compat="#repo-dot-segments",
        why="the refused ./x and x/. claims are not written"),

    # -------------------------------------------------------- non-object records
    StepMayDiffer(
        scenario="non_object_state_records", steps=(13, 14, 15, 21), compat="#non-object-records",
        why="agent-coord crashes (uncaught NoMethodError/TypeError, exit 1) on a claim "
            "record that is null, [1] or 42; ours claims over them (they hold nothing)"),
    StateMayDiffer(
        scenario="non_object_state_records", how=frozenset({"differ"}), compat="#non-object-records",
        files=("<ROOT>/claims/acme/widgets/3.json", "<ROOT>/claims/acme/widgets/4.json",
               "<ROOT>/claims/acme/widgets/5.json"),
        why="the claims over null, [1] and 42 are written (3 then released at step 21)"),

    # -------------------------------------------------------- leases (issue 40)
    StepMayDiffer(
        scenario="claim_takeover_dead_heartbeat", steps=(4, 5), compat="#fresh-claims",
        why="agent-a's dead heartbeat was written before its claim: it says nothing about "
            "agent-a since, so the claim's expiry decides and agent-b is refused (exit 3)"),
    StateMayDiffer(
        scenario="claim_takeover_dead_heartbeat", files=("<ROOT>/claims/acme/widgets/1.json",),
        how=frozenset({"differ"}), compat="#fresh-claims", why="agent-a keeps its claim"),
    StateMayDiffer(
        scenario="claim_missing_heartbeat_fallback", files=("<ROOT>/claims/acme/widgets/2.json",),
        how=frozenset({"differ"}), fields=("previous_holder", "takeover_reason"),
        compat="#takeover-trail", why="a takeover names the previous holder and why"),
    StepMayDiffer(
        scenario="claim_ttl_values", steps=(14, 16, 17), compat="#lease-bounds",
        why="a --ttl above the machine's maximum lease (24 h by default) is refused, exit 1"),
    StateMayDiffer(
        scenario="claim_ttl_values", files=("<ROOT>/claims/acme/widgets/7.json",),
        how=frozenset({"absent"}), compat="#lease-bounds", why="the refused claim is not written"),
    StepMayDiffer(
        scenario="heartbeat_ttl_values", steps=(7, 8), compat="#lease-bounds",
        why="a --ttl above the machine's maximum lease (24 h by default) is refused, exit 1"),
    StepMayDiffer(
        scenario="heartbeat_ttl_values", steps=(9,), exit=False,
        stdout_paths=("heartbeats.1", "heartbeats.2"), compat="#lease-bounds",
        why="the refused heartbeats are not listed"),
    StateMayDiffer(
        scenario="heartbeat_ttl_values", files=("<ROOT>/heartbeats/agent-c.json",),
        how=frozenset({"absent"}), compat="#lease-bounds", why="the refused heartbeat is not written"),

    # -------------------------------------------------------- additive JSON
    AdditiveJson(
        scenario="usage_errors", steps=(8,), keys=VERSION_KEYS, compat="#version-json-keys",
        why="version --json adds the client/daemon/protocol versions and the daemon pid"),
    AdditiveJson(
        scenario="closeout_option_misuse", steps=(15,), keys=VERSION_KEYS,
        compat="#version-json-keys",
        why="version --json adds the client/daemon/protocol versions and the daemon pid"),
    AdditiveJson(
        scenario="record_event_typed_valid", steps=(6,), keys=("open_requests",),
        compat="#open-requests",
        why="status --batch-id lists the help/escalation requests nobody answered yet"),
    AdditiveJson(
        scenario="usage_errors", steps=(9,), lists=WORKING_VOCABULARY, compat="#working-statuses",
        why="config show --json lists the telemetry contract's working statuses"),
    AdditiveJson(
        scenario="closeout_option_misuse", steps=(16,), lists=WORKING_VOCABULARY,
        compat="#working-statuses",
        why="config show --json lists the telemetry contract's working statuses"),
    AdditiveJson(
        scenario="config_version_text", steps=(3, 9), lists=WORKING_VOCABULARY,
        compat="#working-statuses",
        why="config --json lists the telemetry contract's working statuses"),

    AdditiveJson(
        scenario="doctor_local", steps=(14,), keys=("checks.1.details.failing_path",),
        compat="#doctor-report", why="the failed backend check names the failing path"),

    # -------------------------------------------------------- JSON on a failing step
    JsonOnFailure(
        scenario="status_liveness", steps=(9,), compat="#status-json-on-exit-2",
        why="status --json of the target whose claim is unreadable exits 2 as agent-coord "
            "does, and prints the degraded report (agent-coord prints only its error)"),
    *(StepMayDiffer(
        scenario=name, steps=steps, compat="#one-bad-record",
        why="full status --json over one unreadable record names it and serves the rest, "
            "exit 0 (agent-coord: exit 2 for everyone)")
      for name, steps in (("status_liveness", (8,)), ("status_batch_scope_notes", (10,)))),
    JsonOnFailure(
        scenario="doctor_local", steps=(11, 13), compat="#doctor-json-on-error",
        why="doctor --json exits 2 as agent-coord does, and prints its report naming the "
            "failing record/prefix (error, failing_path) instead of only an error line"),
]

# Backend-unreachable errors replace agent-coord's split-brain refusal.
_REFUSAL = r"^split-brain configuration: .* refusing writes"
_UNREACHABLE = r"^backend unreachable: "
_LOCAL_NOTICE = r"^notice: local mode — single-machine only; state root: <IMPLICIT>$"
_READ_WARNING = r"^warning: split-brain configuration: "

# ------------------------------------------------ found by the differential tester
STRICT += [
    StepMayDiffer(
        scenario="release_without_holder", steps=(2,), compat="#holderless-claims",
        why="an active claim record without agent_id is not a valid claim: release refuses it "
            "(exit 2, naming it) instead of releasing it as the caller's"),
    StateMayDiffer(
        scenario="release_without_holder", files=("<ROOT>/claims/acme/widgets/2.json",),
        how=frozenset({"differ"}), compat="#holderless-claims",
        why="the refused record stays as it was"),
    StepMayDiffer(
        scenario="non_object_record_in_listing", steps=(2, 3, 4), compat="#one-bad-record",
        why="agent-coord crashes on the non-object record (exit 1, no output); ours names it, "
            "leaves it out and answers (exit 0)"),
    StepMayDiffer(
        scenario="spec_handoff_walk", steps=(11,), compat="#closeout-unknown-machine",
        why="the next worker's closeout without a machine id completes (with a warning) "
            "instead of failing after its lane_closed event was written"),
    StateMayDiffer(
        scenario="spec_handoff_walk", files=("<ROOT>/batches/b1.json",), how=frozenset({"differ"}),
        compat="#closeout-unknown-machine", why="the closed lane is stamped on the manifest"),
    StepMayDiffer(
        scenario="audit_malformed_lane_names", steps=(3,), stdout_paths=("lanes.*.malformed",),
        compat="#audit-malformed-lanes",
        why="a lane whose name has ':' or is duplicated is flagged malformed (it is incomplete "
            "in both tools)"),
    AdditiveJson(
        scenario="status_batch_manifest_fields", steps=(2, 3), keys=("batches.*.custom",),
        compat="#status-batch-fields",
        why="status shows every top-level field of a manifest, the team's own too"),
]

# Text stdout of the differential set (test_text_output).
TEXT: list[Allowance] = [
    TextMayDiffer(
        scenario="status_event_lines", steps=(5,), compat="#lane-holders",
        why="a lane line ends with the lane's own state (`state closed done`); the completed "
            "batch's line `- completed: audit findings` follows its lanes "
            "(#batch-records-on-the-manifest)"),
    TextMayDiffer(
        scenario="release_without_holder", steps=(2,), compat="#holderless-claims",
        why="the refused release prints nothing on stdout"),
    TextMayDiffer(
        scenario="spec_handoff_walk", steps=(11,), compat="#closeout-unknown-machine",
        why="ours prints the release line of the completed closeout"),
    TextMayDiffer(
        scenario="non_object_record_in_listing", steps=(2,), compat="#one-bad-record",
        why="ours prints the status with the record named under its section and `degraded`; "
            "agent-coord crashed"),
]

MESSAGES: list[Allowance] = [
    MessageMayDiffer(
        scenario="spec_handoff_walk", steps=(11,), golden=r"^terminal closeout agent does not match lane",
        instead=r"closed_by\.machine UNKNOWN", compat="#closeout-unknown-machine",
        why="ours completes the closeout and warns that its machine is unknown"),
    MessageMayDiffer(
        scenario="non_object_record_in_listing", steps=(2, 3, 4), golden=r".",
        instead=r"claims/acme/widgets/3\.json", compat="#one-bad-record",
        why="agent-coord's Ruby backtrace; ours warns naming the record"),
    MessageMayDiffer(
        scenario="claim_ttl_values", steps=(16, 17), golden=r"^CLAIM_REFUSED: ",
        instead=r"^--ttl( \d+)? is longer than this machine's maximum lease", compat="#lease-bounds",
        why="the TTL is refused before the holder is judged"),
    MessageMayDiffer(
        scenario="heartbeat_ttl_values", steps=(10,), golden=r"heartbeat live$",
        instead=r"heartbeat missing; fallback claim expires at ", compat="#lease-bounds",
        why="agent-b's 300000000000 s heartbeat was refused, so its claim has no heartbeat"),
    MessageMayDiffer(
        scenario="split_brain_hard_stop", steps=(1, 2, 3, 4, 5, 8), golden=_REFUSAL,
        instead=_UNREACHABLE, compat="#split-brain",
        why="implicit writes go to the configured backend, which is unreachable"),
    MessageMayDiffer(
        scenario="split_brain_hard_stop", steps=(6, 7), golden=f"{_LOCAL_NOTICE}|{_READ_WARNING}",
        compat="#split-brain",
        why="implicit reads go to the configured backend: no local-mode notice or "
            "split-brain warning"),
    MessageMayDiffer(
        scenario="split_brain_env_file_parsing", steps=(2,), golden=_REFUSAL,
        instead=_UNREACHABLE, compat="#split-brain",
        why="the XDG env file's URL is used, and it is unreachable"),
    MessageMayDiffer(
        scenario="split_brain_env_configured_values", golden=_REFUSAL,
        instead=f"{_UNREACHABLE}|^invalid HTTP backend URL: ", compat="#split-brain",
        why="each env file that configures a URL is used; the URL is unreachable, or not a "
            "URL ('#not-a-comment', '$FLEET_URL', two spaces): agent-coord's exit 2 for that"),
    MessageMayDiffer(
        scenario="split_brain_local_optin_values", steps=(7, 8, 9, 10, 11, 12), golden=_REFUSAL,
        instead=_UNREACHABLE, compat="#split-brain",
        why="values that are no opt-in send the write to the unreachable backend"),
    MessageMayDiffer(
        scenario="split_brain_local_optin_values", steps=(14, 15),
        golden=f"{_LOCAL_NOTICE}|{_READ_WARNING}", compat="#split-brain",
        why="status/gc without an opt-in go to the configured backend, not the local root"),
    MessageMayDiffer(
        scenario="doctor_local", steps=(15,), golden=_REFUSAL, compat="#doctor-split-brain",
        why="doctor follows the env file to the configured backend"),
    # Ruby's own texts inside a message: its JSON parser's and its file errors'.
    *(MessageMayDiffer(
        scenario=name, steps=steps, golden=r"unexpected token at |^'$",
        instead=r"^(state unreadable|batch manifest JSON invalid): ", compat="#ruby-error-texts",
        why="the reason comes from our JSON parser, not Ruby's; the message's first words match")
      for name, steps in (("status_liveness", (9,)), ("register_batch_invalid", (10,)))),
    *(MessageMayDiffer(
        scenario=name, steps=steps, golden=r"^state unreadable: |unexpected token at |^'$",
        instead=r"^warning: unreadable records left out \(see the degraded notes\): ",
        compat="#one-bad-record", why="one unreadable record is a warning naming it, not a failure")
      for name, steps in (("status_liveness", (8,)), ("status_batch_scope_notes", (10,)))),
    MessageMayDiffer(
        scenario="doctor_local", steps=(11,), golden=r"^state unreadable: unexpected token at |^'$",
        instead=r"^heartbeats: invalid JSON in record heartbeats/bad\.json$",
        compat="#ruby-error-texts", why="ours names the record instead of quoting Ruby's parser"),
    *(MessageMayDiffer(
        scenario=name, steps=steps, golden=r" @ rb_sysopen - ",
        instead=r"^(batch manifest|launch prompt) unreadable: No such file or directory - ",
        compat="#ruby-error-texts", why="Ruby names its syscall wrapper (rb_sysopen); ours does not")
      for name, steps in (("register_batch_invalid", (11,)), ("register_batch_launch_prompt", (8, 9)))),
    MessageMayDiffer(
        scenario="doctor_local", steps=(6,),
        golden=r"^doctor --stack-json requires exactly one of --state-root, --api-url, or --backend$",
        instead=r"^doctor --stack-json requires exactly one of --state-root, --api-url, "
                r"--etcd-endpoints, or --backend$",
        compat="#etcd-backend", why="the selector list names our etcd backend too"),
    MessageMayDiffer(
        scenario="non_object_state_records", steps=(13, 14, 15, 21),
        golden=r"^(<PEER>/bin/agent-coord:\d+:in |\s)", compat="#non-object-records",
        why="agent-coord's Ruby backtrace: ours does not crash"),
]
