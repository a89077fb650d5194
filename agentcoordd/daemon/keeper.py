"""Keep-alive lanes inside the daemon: the registry and the one renewal loop.

Pieces used (each tested on its own): `coord.keepalive` (re-read + CAS-write of
updated_at/expires_at, fenced by the claim's identity), `daemon.renewal` (the
timer queue and its loop on the boot-time clock), `daemon.lanes` (the
token-free registration file, watched pids).

How a lane lives (the request handlers call these, in their own order)
* `claim --keep-alive` / `heartbeat --keep-alive` `register` it after their
  writes succeeded. A claim lane remembers the claim's `Fence`.
* Every request carrying the lane's agent id `touch`es it (idle timer); for a
  fenced lane the reply carries a warning naming the new holder. A live lane
  with a fence is re-checked first, so the warning does not depend on the
  renewal loop having run since a takeover (a stalled daemon, say).
* Release, a terminal heartbeat status, lane_closed, `lanes stop`, the
  watched process exiting, the idle timeout, a takeover (fenced) `end` it; the
  end is recorded as a `lane.keepalive_ended` event when the lane has a batch.
* When the watched process exits, the claim the lane holds is released on the
  agent's behalf (`release_mode: holder_exited`, coord.keepalive.release_exited)
  unless the lane was registered with `--on-exit keep`; a backend that does not
  answer is retried until it does, and the lane stays saved until then.
* Live lanes are saved (atomically, 0600, no tokens) whenever they change and
  resumed on start; a lane whose watched process is gone ends at once (and its
  claim is released, as above). Tokens come back from the machine's
  configuration, or from the first caller that brings one (`daemon.credentials`).
"""

from __future__ import annotations

import collections
import datetime as dt
import time
from typing import Any

import anyio
import anyio.abc
import anyio.to_thread

from agentcoordd import protocol as p
from agentcoordd.coord.batches import lane_for_target
from agentcoordd.coord.context import Clock, Ctx, LeasePolicy
from agentcoordd.coord.events import emit
from agentcoordd.coord.lease import bounded_ttl
from agentcoordd.coord.keepalive import (
    Fence,
    LaneEnded,
    Renewal,
    RenewSingly,
    check_fence,
    release_exited,
    renew,
    renew_batched,
    renew_blocking,
)
from agentcoordd.daemon import backends, sdnotify
from agentcoordd.daemon.clock import boottime
from agentcoordd.daemon.credentials import Credentials
from agentcoordd.daemon.delivery import Delivery
from agentcoordd.daemon.durable import Saves, StateDirError
from agentcoordd.daemon.notify import Notifier
from agentcoordd.daemon.descriptors import descriptor_key, needs_token, persisted_backend, resolve_persisted
from agentcoordd.daemon.lanes import (
    DEFAULT_AGENT_HOSTS,
    LaneRegistry,
    LaneSpec,
    find_agent_ancestor,
    pid_alive,
    process_start_time,
)
from agentcoordd.daemon.metrics import Metrics
from agentcoordd.daemon.renewal import DEFAULT_IDLE_TIMEOUT, Lane, RenewalLoop, Schedule
from agentcoordd.model import ids
from agentcoordd.model.backoff import RELEASE_RETRY
from agentcoordd.model.errors import UsageError
from agentcoordd.model.identity import resolve_identity
from agentcoordd.model.timefmt import format_ts
from agentcoordd.store.base import BatchOps, BlockingStore

DEFAULT_HEARTBEAT_TTL = 15 * 60
EVENT_TYPE = "lane.keepalive_ended"
HOSTS_VAR = "AGENT_COORD_AGENT_HOSTS"
SAVE_INTERVAL = 0.25  # coalesce registry writes; at most one in flight
# The registry file is rewritten whole: after a save, wait this many times what it
# took (at least SAVE_INTERVAL), so saving stays a small share of a busy daemon's
# time however many lanes there are (10,000 lanes: ~1 s between saves).
SAVE_COST_FACTOR = 20
STATUS_INTERVAL = 5.0
PRUNE_INTERVAL = 30.0
KEEP_ENDED = 3600.0  # ended lanes stay listed (and fenced ones keep warning) this long
WATCH_INTERVAL = 0.5  # how often watched pids are checked (kill -> end within ~1 s)
LAG_SAMPLES = 200_000
BATCH_WINDOW = 0.1  # renew what is due in batches: at most this late, far fewer wakes and fsyncs
# A lane watching a process has no idle timeout unless one is given: the process says
# whether the agent lives (a long tool call touches nothing for hours).
NO_IDLE_TIMEOUT = 100 * 365 * 86400.0
ON_EXIT = ("release", "keep")

REASON_TEXT = {
    "released": "the claim was released",
    "lane_closed": "the lane was closed",
    "terminal": "the heartbeat reports a terminal status",
    "stopped": "`agentcoordctl lanes stop`",
    "watched_process_exited": "the watched process exited",
    "idle_timeout": "no ctl call touched the lane within its idle timeout",
    "fenced": "the claim moved to another holder",
    "heartbeat_missing": "the heartbeat no longer exists",
}


def _iso(wall: float | None) -> str | None:
    if wall is None:
        return None
    return format_ts(dt.datetime.fromtimestamp(wall, dt.timezone.utc))


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * (len(ordered) - 1) + 0.5))]


def lane_ttl(keep_alive: p.KeepAlive, *, claim: bool, heartbeat_ttl: int | None = None) -> int:
    """The TTL of a lane's heartbeat: claim --keep-alive takes --heartbeat-ttl,
    heartbeat --keep-alive its own --ttl."""
    if claim:
        return keep_alive.heartbeat_ttl or DEFAULT_HEARTBEAT_TTL
    return heartbeat_ttl or DEFAULT_HEARTBEAT_TTL


def check_flags(keep_alive: p.KeepAlive | None, ttl: int, policy: LeasePolicy) -> None:
    """Refuse bad keep-alive flags before anything is written."""
    if keep_alive is None:
        return
    if keep_alive.heartbeat_ttl is not None:
        bounded_ttl(keep_alive.heartbeat_ttl, ttl, policy, flag="--heartbeat-ttl")
    for name, value in (("--renew-every", keep_alive.renew_every),
                        ("--idle-timeout", keep_alive.idle_timeout)):
        if value is not None and not (value > 0):
            raise UsageError(f"{name} must be a positive number of seconds: {value:g}")
    if keep_alive.renew_every is not None and keep_alive.renew_every >= ttl:
        raise UsageError(f"--renew-every ({keep_alive.renew_every:g}s) must be shorter than the "
                         f"heartbeat TTL ({ttl}s)")
    watch = keep_alive.watch_pid
    if watch is not None and (watch <= 1 or not pid_alive(watch)):
        raise UsageError(f"--watch-pid {watch}: no such running process")
    if keep_alive.on_exit is not None and keep_alive.on_exit not in ON_EXIT:
        raise UsageError(f"--on-exit must be release or keep: {keep_alive.on_exit}")


class LaneKeeper:
    def __init__(self, *, pool: backends.StorePool, clock: Clock, credentials: Credentials,
                 outbox: Delivery, state_dir: str, log: Any = None,
                 metrics: Metrics | None = None, notifier: Notifier | None = None) -> None:
        self.pool = pool
        self.metrics = metrics or Metrics()
        self.clock = clock
        self.credentials = credentials
        self.outbox = outbox
        self.notifier = notifier
        self.log = log
        self.registry = LaneRegistry(state_dir)
        self.schedule = Schedule()
        self.specs: dict[str, LaneSpec] = {}
        self.resolved: dict[str, backends.Resolved] = {}  # in memory only (may hold a token)
        self.ended_at: dict[str, float] = {}
        self.renewals = 0
        self.renewal_failures = 0
        self.lags: collections.deque[float] = collections.deque(maxlen=LAG_SAMPLES)
        self.loop = RenewalLoop(
            self.schedule, timer=boottime, wall=time.time, renew=self._renew, on_end=self._on_end,
            pid_alive=self._pid_alive, on_tick=self._tick, renew_batch=self._renew_batch,
            max_sleep=WATCH_INTERVAL,
            watch_interval=WATCH_INTERVAL, min_sleep=BATCH_WINDOW,
        )
        self._pid_starts: dict[int, int | None] = {}
        self._tg: anyio.abc.TaskGroup | None = None
        self.saves = Saves(self._live_specs, self.registry.save, directory=state_dir,
                           what="keep-alive lanes file", interval=SAVE_INTERVAL,
                           cost_factor=SAVE_COST_FACTOR, log=log)
        self._last_watchdog = 0.0
        self._last_status = 0.0
        self._last_status_text = ""
        self._last_prune = 0.0
        self._watchdog = sdnotify.watchdog_interval()
        self.load_warning: str | None = None

    # ---- running -------------------------------------------------------------------

    async def run(self) -> None:
        """Resume saved lanes, then renew until cancelled (daemon shutdown)."""
        try:
            async with anyio.create_task_group() as tg:
                self._tg = tg
                await self._resume()
                tg.start_soon(self.saves.run)
                while True:
                    try:
                        await self.loop.run()
                    except Exception:  # noqa: BLE001 - a bug must not stop every lane's renewal
                        if self.log is not None:
                            self.log.exception("renewal loop failed; restarting it")
                        await anyio.sleep(1.0)
        finally:
            self._tg = None
            sdnotify.notify("STOPPING=1")

    def close(self) -> None:
        """Final save at shutdown (after in-flight requests drained)."""
        self.saves.save_now()

    def _mark_dirty(self) -> None:
        self.saves.changed()

    def _live_specs(self) -> list[LaneSpec]:
        """What the lanes file keeps: live lanes, and lanes whose claim is still to be released."""
        return [spec for key, spec in self.specs.items()
                if spec.release_pending
                or ((lane := self.schedule.lanes.get(key)) is not None and lane.live)]

    async def _resume(self) -> None:
        specs, warning = self.registry.load()
        if warning:
            self.load_warning = warning
            self._log("warning", "lanes file set aside", reason=warning)
        gone = []
        for spec in specs:
            idle_for = max(0.0, time.time() - (spec.touched_wall or time.time()))
            self._add(spec, resolve_persisted(spec.backend), due_now=True,
                      touched=boottime() - idle_for)
            if spec.release_pending or (spec.watch_pid and not pid_alive(spec.watch_pid,
                                                                         spec.watch_pid_start)):
                gone.append(spec)
        for spec in gone:  # ended now: the event, and the claim released on the agent's behalf
            self._log("info", "lane ended at resume", agent_id=spec.agent_id,
                      reason="watched_process_exited", watch_pid=spec.watch_pid)
            lane = self.schedule.lanes[spec.key]
            lane.info["end_message"] = "watched process exited while agentcoordd was down"
            await self._end(spec.key, "watched_process_exited")
        if specs:
            self._log("info", "lanes resumed", resumed=len(specs) - len(gone), ended=len(gone))

    # ---- the loop's callbacks -----------------------------------------------------

    def _pid_alive(self, pid: int) -> bool:
        return pid_alive(pid, self._pid_starts.get(pid))

    def _selection(self, key: str) -> backends.Resolved:
        """The lane's backend; a lane resumed without its token takes one a caller brought."""
        resolved = self.resolved[key]
        if not resolved.token and needs_token(resolved.kind, resolved.user):
            learned = self.credentials.candidates(descriptor_key(resolved))
            if learned:
                resolved = self.resolved[key] = learned[0]
        return resolved

    def _ctx(self, key: str) -> Ctx:
        return Ctx(store=self.pool.get(self._selection(key)), clock=self.clock)

    async def _renew(self, lane: Lane) -> None:
        spec = self.specs[lane.key]
        due = lane.next_due
        error: Exception | None = None
        try:
            await renew(self._ctx(lane.key), agent_id=spec.agent_id, ttl=spec.ttl, fence=spec.fence)
        except Exception as exc:  # noqa: BLE001 - accounted, then re-raised for the loop
            error = exc
        self._account(lane, due, error)
        if error is not None:
            raise error

    async def _renew_batch(self, lanes: list[Lane]) -> list[BaseException | None]:
        """Renew lanes due together. A blocking store's lanes (local files) renew in
        one worker-thread hop under group commit (one fsync per directory, not per
        lane); other stores' lanes renew concurrently."""
        outcomes: list[BaseException | None] = [None] * len(lanes)
        blocking: dict[int, tuple[BlockingStore, list[int]]] = {}
        batched: dict[int, tuple[BatchOps, list[int]]] = {}
        remote: list[int] = []
        for index, lane in enumerate(lanes):
            caps = self.pool.get(self._selection(lane.key)).capabilities
            if caps.blocking is not None:
                blocking.setdefault(id(caps.blocking), (caps.blocking, []))[1].append(index)
            elif caps.batch is not None:
                batched.setdefault(id(caps.batch), (caps.batch, []))[1].append(index)
            else:
                remote.append(index)

        async def renew_remote(index: int) -> None:
            try:
                await self._renew(lanes[index])
            except Exception as exc:  # noqa: BLE001 - the loop classifies it
                outcomes[index] = exc

        def settle(indexes: list[int], dues: list[float], results: list[Exception | None]) -> None:
            for index, due, error in zip(indexes, dues, results, strict=True):
                if isinstance(error, RenewSingly):
                    tg.start_soon(renew_remote, index)  # lost a race: re-read and decide again, alone
                    continue
                self._account(lanes[index], due, error)
                outcomes[index] = error

        async def renew_group(batch: BatchOps, indexes: list[int]) -> None:
            dues = [lanes[i].next_due for i in indexes]
            try:
                results = await renew_batched(batch, self.clock, [
                    Renewal(spec.agent_id, spec.ttl, spec.fence)
                    for spec in (self.specs[lanes[i].key] for i in indexes)])
            except Exception as exc:  # noqa: BLE001 - no lane's outcome is known
                results = [exc] * len(indexes)
            settle(indexes, dues, results)

        async with anyio.create_task_group() as tg:
            for index in remote:
                tg.start_soon(renew_remote, index)
            for batch, indexes in batched.values():
                tg.start_soon(renew_group, batch, indexes)
            for store, indexes in blocking.values():
                dues = [lanes[i].next_due for i in indexes]
                specs = [self.specs[lanes[i].key] for i in indexes]
                try:
                    results: list[Exception | None] = await anyio.to_thread.run_sync(
                        self._renew_blocking, store, specs)
                except Exception as exc:  # noqa: BLE001 - the commit itself broke: no lane's outcome is known
                    results = [exc] * len(indexes)
                settle(indexes, dues, results)
        return outcomes

    def _renew_blocking(self, store: BlockingStore, specs: list[LaneSpec]) -> list[Exception | None]:
        """In a worker thread: each lane's renewal inline, under one group commit
        (a write that did not become durable fails its own lane only)."""
        results: list[Exception | None] = []
        with store.group_commit() as commit:
            for index, spec in enumerate(specs):
                commit.owner = index
                try:
                    renew_blocking(store, self.clock, agent_id=spec.agent_id, ttl=spec.ttl,
                                   fence=spec.fence)
                    results.append(None)
                except Exception as exc:  # noqa: BLE001 - one lane's outcome, not the batch's
                    results.append(exc)
        for index, error in commit.failed.items():
            results[index] = error  # type: ignore[index]
        return results

    def _account(self, lane: Lane, due: float, error: BaseException | None) -> None:
        if isinstance(error, LaneEnded):
            lane.info["new_holder"] = error.new_holder
            lane.info["end_message"] = error.message
            self.metrics.renewal("ended")
        elif error is not None:
            self.renewal_failures += 1
            self.metrics.renewal("failed")
        else:
            lag = max(0.0, boottime() - due)
            lane.info["lag"] = lag
            self.lags.append(lag)
            self.renewals += 1
            self.metrics.renewal("ok", lag)

    async def _on_end(self, lane: Lane) -> None:
        self.ended_at[lane.key] = time.time()
        spec = self.specs.get(lane.key)
        self._mark_dirty()
        self.loop.wake()
        if spec is None:
            return
        self._log("info", "lane ended", agent_id=spec.agent_id, reason=lane.end_reason,
                  state=lane.state, new_holder=lane.info.get("new_holder"))
        if spec.batch_id and self._tg is not None:
            self._tg.start_soon(self._end_event, spec, self.resolved.get(lane.key),
                                lane.end_reason or "ended", lane.info.get("new_holder"),
                                lane.info.get("end_message"), lane.info.get("forced_by"))
        if (lane.end_reason == "watched_process_exited" and spec.fence is not None
                and spec.on_exit == "release" and self._tg is not None):
            spec.release_pending = True  # saved with the lane until the release is done
            lane.info["claim"] = "releasing"
            self._tg.start_soon(self._release_exited, lane.key, spec)

    async def _release_exited(self, key: str, spec: LaneSpec) -> None:
        """Release the claim of a lane whose watched process exited, retrying while the
        backend does not answer; a lane registered again meanwhile (the same agent id)
        takes over and this stops."""
        assert spec.fence is not None
        detail = f"released by agentcoordd: the holder's watched process {spec.watch_pid} exited"
        attempt = 0
        while self.specs.get(key) is spec and spec.release_pending:
            resolved = self._selection(key)
            ctx = Ctx(store=self.pool.get(resolved), clock=self.clock,
                      identity=resolve_identity({}, fallback_machine=resolved.machine_id))
            try:
                record = await release_exited(ctx, spec.fence, lane=spec.lane,
                                              batch_id=spec.batch_id, detail=detail)
            except Exception as exc:  # noqa: BLE001 - the backend's answer is unknown: try again
                attempt += 1
                self._log("warning", "claim release after exit failed; retrying",
                          agent_id=spec.agent_id, error=str(exc), attempt=attempt)
                await anyio.sleep(RELEASE_RETRY.delay(attempt))
                continue
            finally:
                if self.notifier is not None:  # the holder_exited notification, and the outbox
                    await self.notifier.notice(ctx.written + ctx.undelivered)
                if ctx.undelivered:
                    await self.outbox.queue(ctx.undelivered, resolved, ctx.warnings,
                                            descriptor=spec.backend)
            spec.release_pending = False
            lane = self.schedule.lanes.get(key)
            if lane is not None:
                lane.info["claim"] = "released" if record is not None else "moved on"
            self._log("info", "claim released after exit" if record is not None else
                      "claim had moved on before the exit release", agent_id=spec.agent_id,
                      repo=spec.fence.repo, target=spec.fence.target)
            self._mark_dirty()

    async def _end_event(self, spec: LaneSpec, resolved: backends.Resolved | None, reason: str,
                         new_holder: str | None, detail: str | None,
                         forced_by: dict[str, Any] | None = None) -> None:
        if resolved is None or not spec.batch_id:
            return
        message = f"keep-alive renewal ended: {REASON_TEXT.get(reason, reason)}"
        if new_holder:
            message += f" (new holder {new_holder})"
        fields: dict[str, Any] = {"agent_id": spec.agent_id, "reason": reason, "message": message}
        if spec.repo:
            fields["repo"] = spec.repo
        if spec.target:
            fields["target"] = spec.target
        if forced_by:
            fields["forced_by"] = forced_by
        ctx: Ctx | None = None
        try:
            ctx = Ctx(store=self.pool.get(resolved), clock=self.clock)
            # the lane: as registered, else the one lane of the batch listing the target
            lane = spec.lane or (await lane_for_target(ctx, spec.batch_id, spec.target)
                                 if spec.target else None)
            if lane:
                fields["lane"] = lane
            await emit(ctx, spec.batch_id, EVENT_TYPE, fields)
        except Exception as exc:  # noqa: BLE001 - an event is best effort; log it
            self._log("warning", "lane end event not recorded", agent_id=spec.agent_id, error=str(exc))
            return
        finally:  # an undeliverable end event goes to the durable outbox
            try:
                if ctx is not None and self.notifier is not None:
                    await self.notifier.notice(ctx.written + ctx.undelivered)
                if ctx is not None and ctx.undelivered:
                    await self.outbox.queue(ctx.undelivered, resolved, descriptor=spec.backend)
            except StateDirError as exc:  # nobody waits for this reply: the log says it
                self._log("error", "lane end event lost", agent_id=spec.agent_id, error=exc.message)
        for warning in ctx.warnings:
            self._log("warning", "lane end event", agent_id=spec.agent_id, detail=warning)

    def _tick(self) -> None:
        now = boottime()
        if self._watchdog and now - self._last_watchdog >= self._watchdog:
            self._last_watchdog = now
            sdnotify.notify("WATCHDOG=1")
        if now - self._last_status >= STATUS_INTERVAL:
            self._last_status = now
            text = self.status_line()
            if text != self._last_status_text:
                self._last_status_text = text
                sdnotify.notify(f"STATUS={text}")
        if now - self._last_prune >= PRUNE_INTERVAL:
            self._last_prune = now
            self._prune()

    def _prune(self) -> None:
        cutoff = time.time() - KEEP_ENDED
        for key, at in list(self.ended_at.items()):
            lane = self.schedule.lanes.get(key)
            spec = self.specs.get(key)
            if lane is not None and lane.live:
                self.ended_at.pop(key, None)
            elif at < cutoff and not (spec is not None and spec.release_pending):
                self._forget(key)

    def _forget(self, key: str) -> None:
        self.schedule.forget(key)
        self.specs.pop(key, None)
        self.resolved.pop(key, None)
        self.ended_at.pop(key, None)

    # ---- what request handlers call -------------------------------------------------

    def key_for(self, resolved: backends.Resolved, agent_id: str) -> str:
        return f"{descriptor_key(resolved)}|{agent_id}"

    async def touch(self, resolved: backends.Resolved, agent_id: str | None,
                    warnings: list[str]) -> None:
        """A call from the lane's agent: reset its idle timer; warn when it was fenced
        (re-checking a live fence first)."""
        if not agent_id:
            return
        key = self.key_for(resolved, agent_id)
        lane = self.schedule.lanes.get(key)
        spec = self.specs.get(key)
        if lane is None or spec is None:
            return
        if lane.live:
            self.schedule.touch(key, boottime())
            spec.touched_wall = time.time()
            self._mark_dirty()
            if spec.fence is not None:
                try:
                    await check_fence(self._ctx(key), spec.fence)
                except LaneEnded as exc:
                    lane.info["new_holder"] = exc.new_holder
                    lane.info["end_message"] = exc.message
                    await self._end(key, exc.reason, "fenced" if exc.reason == "fenced" else "ended")
                except Exception:  # noqa: BLE001 - the renewal loop will see it too
                    pass
        if lane.state == "fenced":
            warnings.append(self.fenced_warning(spec, lane))

    @staticmethod
    def fenced_warning(spec: LaneSpec, lane: Lane) -> str:
        label = f"{spec.repo}#{spec.target}" if spec.repo else "its claim"
        holder = lane.info.get("new_holder") or "another agent"
        return (f"keep-alive lane of {spec.agent_id} was fenced: {label} is now held by {holder}; "
                "agentcoordd stopped renewing your heartbeat. Stop working on it (exit 3 rules "
                f"apply); `agentcoordctl lanes stop --agent-id {spec.agent_id}` clears this warning")

    async def end(self, resolved: backends.Resolved, agent_id: str, reason: str, *,
                  repo: str | None = None, target: str | None = None) -> None:
        """End the agent's lane (when it renews that repo/target, if they are given)."""
        key = self.key_for(resolved, agent_id)
        spec = self.specs.get(key)
        if spec is None or (repo is not None and (spec.repo, spec.target) != (repo, target)):
            return
        await self._end(key, reason)

    async def _end(self, key: str, reason: str, state: str = "ended") -> None:
        lane = self.schedule.lanes.get(key)
        if lane is None or not lane.live:
            return
        self.schedule.end(key, reason, state)
        await self._on_end(lane)

    def refence(self, resolved: backends.Resolved, agent_id: str, claim: dict[str, Any]) -> None:
        """The lane's own agent (re)claimed its target: remember the new identity."""
        key = self.key_for(resolved, agent_id)
        spec = self.specs.get(key)
        lane = self.schedule.lanes.get(key)
        if spec is None or lane is None or spec.fence is None:
            return
        if (claim.get("repo"), claim.get("target")) != (spec.fence.repo, spec.fence.target):
            return
        fence = Fence.of(claim)
        if fence == spec.fence and lane.live:
            return
        spec.fence = fence
        if lane.state == "fenced" and claim.get("agent_id") == spec.agent_id:
            lane.state, lane.end_reason, lane.failures = "active", None, 0
            lane.info.pop("new_holder", None)
            self.ended_at.pop(key, None)
            self.schedule.add(lane, boottime(), due_now=True)
            self.loop.wake()
        self._mark_dirty()

    async def claim_fence(self, ctx: Ctx, agent_id: str, repo: str | None,
                          target: str | None) -> Fence | str | None:
        """The identity of the agent's active claim on repo/target, if it holds one;
        the holder's id when another agent holds it (no lane may renew that)."""
        if not (repo and target):
            return None
        try:
            current = await ctx.store.get(ids.claim_path(repo, target))
        except Exception:  # noqa: BLE001 - unreadable: the lane renews unfenced
            return None
        if (current is None or not isinstance(current.data, dict)
                or current.data.get("status") != "active"):
            return None
        holder = current.data.get("agent_id")
        if holder == agent_id:
            return Fence.of(current.data)
        return holder if isinstance(holder, str) and holder else None

    async def register(self, request: p.Claim | p.Heartbeat, resolved: backends.Resolved, *,
                       ttl: int, repo: str | None, target: str | None, batch_id: str | None,
                       fence: Fence | None, warnings: list[str], notices: list[str],
                       lane: str | None = None) -> dict[str, Any]:
        """Renew this agent's heartbeat from now on; the lane as `lanes` shows it. Returns
        once the registration is in the lanes file (StateDirError when it cannot be: the
        lane renews meanwhile, but would not survive a restart)."""
        spec = self._spec(request, resolved, ttl=ttl, repo=repo, target=target,
                          batch_id=batch_id, fence=fence, lane=lane, warnings=warnings)
        self._add(spec, resolved, due_now=False, touched=boottime())
        self._mark_dirty()
        await self.saves.durable()
        self._log("info", "lane registered", agent_id=spec.agent_id, ttl=spec.ttl,
                  renew_every=spec.renew_every, watch_pid=spec.watch_pid, fenced_by=bool(spec.fence))
        watching = f"watching pid {spec.watch_pid}" if spec.watch_pid else "no watched process"
        if spec.watch_pid and spec.fence is not None:
            watching += (" (its exit releases the claim)" if spec.on_exit == "release"
                         else " (its exit keeps the claim: --on-exit keep)")
        idle = (f"idle timeout {spec.idle_timeout:.0f}s" if spec.idle_timeout < 30 * 86400
                else "no idle timeout")
        notices.append(
            f"keep-alive: agentcoordd renews heartbeats/{spec.agent_id}.json every "
            f"{spec.renew_every:g}s (ttl {spec.ttl}s); {watching}; {idle}")
        return self.describe(spec.key)

    def _spec(self, request: p.Claim | p.Heartbeat, resolved: backends.Resolved, *, ttl: int,
              repo: str | None, target: str | None, batch_id: str | None, fence: Fence | None,
              lane: str | None, warnings: list[str]) -> LaneSpec:
        ka = request.keep_alive
        assert ka is not None
        watch = ka.watch_pid
        if ka.watch_auto:
            hosts = tuple(h.strip() for h in request.caller.env.get(HOSTS_VAR, "").split(",") if h.strip())
            hosts = hosts or DEFAULT_AGENT_HOSTS
            watch = find_agent_ancestor(request.caller.pid, hosts) if request.caller.pid else None
            if watch is None:
                warnings.append(
                    f"--watch-pid auto: no agent host process ({', '.join(hosts)}) among the "
                    f"ancestors of pid {request.caller.pid}; the lane relies on its idle timeout "
                    f"({ka.idle_timeout or DEFAULT_IDLE_TIMEOUT:g}s). Set {HOSTS_VAR} or pass "
                    "--watch-pid PID")
        idle = ka.idle_timeout or (NO_IDLE_TIMEOUT if watch else DEFAULT_IDLE_TIMEOUT)
        registrant = resolve_identity(request.caller.env, fallback_machine=resolved.machine_id)
        return LaneSpec(
            agent_id=request.agent_id, ttl=ttl, renew_every=ka.renew_every or ttl / 3.0,
            idle_timeout=idle, backend=persisted_backend(resolved), repo=repo, target=target,
            batch_id=batch_id, fence=fence, watch_pid=watch,
            watch_pid_start=process_start_time(watch) if watch else None,
            registered_at=format_ts(self.clock.now()), touched_wall=time.time(),
            lane=lane, on_exit=ka.on_exit or "release",
            machine_id=registrant.machine_id, session_id=registrant.session_id,
        )

    def _add(self, spec: LaneSpec, resolved: backends.Resolved, *, due_now: bool, touched: float) -> None:
        key = spec.key
        old = self.schedule.lanes.get(key)
        if old is not None and old.live:
            self.schedule.end(key, "replaced")  # its heap entries go stale
        self.schedule.forget(key)
        self.ended_at.pop(key, None)
        self.specs[key] = spec
        self.resolved[key] = resolved
        if spec.watch_pid:
            self._pid_starts[spec.watch_pid] = spec.watch_pid_start
        lane = Lane(key=key, ttl=float(spec.ttl), renew_every=spec.renew_every,
                    idle_timeout=spec.idle_timeout, touched=touched)
        if spec.watch_pid:
            lane.info["watch_pid"] = spec.watch_pid
        self.schedule.add(lane, boottime(), due_now=due_now)
        self.loop.wake()

    async def stop(self, agent_id: str,
                   forced_by: dict[str, dict[str, Any]] | None = None) -> list[dict[str, Any]]:
        """End the agent's lanes; `forced_by` (lane key -> who and why) is recorded in the
        end event of each lane stopped for another machine or session (coord.trust)."""
        keys = [key for key, spec in self.specs.items() if spec.agent_id == agent_id]
        if not keys:
            raise UsageError(f"no keep-alive lane for agent {agent_id}")
        out = []
        for key in keys:
            lane = self.schedule.lanes.get(key)
            was = lane.state if lane is not None else "unknown"
            if lane is not None and forced_by and key in forced_by:
                lane.info["forced_by"] = forced_by[key]
            await self._end(key, "stopped")
            out.append({**self.describe(key), "previous_state": was})
            self._forget(key)
        self._mark_dirty()
        await self.saves.durable()  # a stopped lane must not come back at the next start
        return out

    def backend_of(self, agent_id: str, backend_key: str | None) -> backends.Resolved | None:
        """The selection a listed lane (agent id, descriptor key) renews against."""
        return self.resolved.get(f"{backend_key}|{agent_id}")

    # ---- introspection -----------------------------------------------------------

    def health(self) -> dict[str, Any]:
        """Live and failing lanes, for the doctor."""
        live = [lane for lane in self.schedule.lanes.values() if lane.live]
        failing = [lane for lane in live if lane.state == "backoff" or lane.failures]
        return {"available": True, "count": len(live), "failing": len(failing),
                "failing_lanes": [lane.key for lane in failing][:20]}

    def status_line(self) -> str:
        live = [lane for lane in self.schedule.lanes.values() if lane.live]
        failing = [lane for lane in live if lane.state == "backoff"]
        health: dict[str, str] = {}
        for lane in live:
            spec = self.specs.get(lane.key)
            name = spec.backend.get("kind", "?") if spec else "?"
            if lane.state == "backoff":
                health[name] = "failing"
            else:
                health.setdefault(name, "ok")
        backends_text = ", ".join(f"{k} {v}" for k, v in sorted(health.items())) or "none in use"
        return (f"{len(live)} keep-alive lanes, {len(failing)} failing; backends: {backends_text}"
                f"; {self._outbox_text()}")

    def _outbox_text(self) -> str:
        try:
            summary = self.outbox.summary()
        except (OSError, ValueError) as exc:
            return f"outbox: unreadable ({exc})"
        if not summary["depth"]:
            return "outbox: empty"
        return f"outbox: {summary['depth']} queued, oldest {summary['oldest_age_seconds']:.0f}s"

    def describe(self, key: str) -> dict[str, Any]:
        spec = self.specs[key]
        lane = self.schedule.lanes.get(key)
        now = boottime()
        row: dict[str, Any] = {
            "agent_id": spec.agent_id, "repo": spec.repo, "target": spec.target,
            "batch_id": spec.batch_id, "backend": spec.backend.get("key"),
            "ttl": spec.ttl, "renew_every": spec.renew_every, "idle_timeout": spec.idle_timeout,
            "watch_pid": spec.watch_pid, "fenced_claim": spec.fence is not None,
            "registered_at": spec.registered_at, "lane": spec.lane, "on_exit": spec.on_exit,
        }
        if lane is not None:
            row.update(
                state=lane.state, end_reason=lane.end_reason,
                new_holder=lane.info.get("new_holder"),
                last_success=_iso(lane.last_success), last_error=lane.last_error,
                failures=lane.failures,
                next_due_in=round(lane.next_due - now, 3) if lane.live else None,
                lag=round(lane.info["lag"], 4) if "lag" in lane.info else None,
                idle_for=round(now - lane.touched, 3),
                ended_at=_iso(self.ended_at.get(key)),
                claim=lane.info.get("claim"),  # after an exit: releasing, released, moved on
            )
        return row

    def listing(self, agent_id: str | None = None) -> dict[str, Any]:
        rows = [self.describe(key) for key, spec in self.specs.items()
                if agent_id is None or spec.agent_id == agent_id]
        rows.sort(key=lambda r: (r["agent_id"], r["backend"] or ""))
        lags = list(self.lags)
        live = [r for r in rows if r.get("state") in ("active", "backoff")]
        return {
            "lanes": rows,
            "summary": {
                "lanes": len(rows), "live": len(live),
                "failing": sum(1 for r in rows if r.get("state") == "backoff"),
                "fenced": sum(1 for r in rows if r.get("state") == "fenced"),
                "renewals": self.renewals, "renewal_failures": self.renewal_failures,
                "lag_p50": _percentile(lags, 0.50), "lag_p99": _percentile(lags, 0.99),
                "lag_max": max(lags) if lags else None,
                "suspends_detected": self.loop.suspends_detected,
                "status": self.status_line(),
                **self._outbox_fields(),
            },
        }

    def _outbox_fields(self) -> dict[str, Any]:
        try:
            summary = self.outbox.summary()
        except (OSError, ValueError):
            summary = {}
        return {"outbox_depth": summary.get("depth"),
                "outbox_oldest_age": summary.get("oldest_age_seconds")}

    def _log(self, level: str, message: str, **fields: Any) -> None:
        if self.log is not None:
            getattr(self.log, level)(message, **fields)
