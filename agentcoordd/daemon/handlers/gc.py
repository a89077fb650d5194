"""gc: plan (dry run) or execute retention; progress frames while it runs."""

from __future__ import annotations

from agentcoordd import protocol as p
from agentcoordd.coord.gc import gc
from agentcoordd.daemon.call import Call
from agentcoordd.daemon.services import Services


async def handle(req: p.Gc, svc: Services, call: Call) -> p.Response:
    progress = call.progress

    def report(label: str, done: int, total: int) -> None:
        if progress is not None:
            progress(p.Progress(message=f"{label} {done}/{total}",
                                data={"label": label, "done": done, "total": total}))

    return await call.use_case(gc, write=True, execute=req.execute, hot_days=req.hot_days,
                               archive_days=req.archive_days,
                               synthetic_hot_days=req.synthetic_hot_days,
                               prefixes=list(req.prefixes) or None, progress=report)
