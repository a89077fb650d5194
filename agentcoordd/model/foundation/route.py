"""Lane route contract (schema/state/v1/route/route.schema.json).

A lane's bound model + reasoning effort, riding additively on a claim,
heartbeat or lane-manifest record: the compact "model/effort" string or the
equivalent {model, effort} object. Absent means omitted, never null.
"""

from __future__ import annotations

from typing import Annotated

import msgspec
from msgspec import UNSET, UnsetType

from agentcoordd.model.foundation.common import Closed, Open

HIDDEN_CHIP = "hidden"

RouteString = Annotated[
    str,
    msgspec.Meta(
        pattern=r"^[^/\s]+/[^/\s]+$",
        extra_json_schema={
            "description": "Compact model/effort: exactly one slash, no whitespace, both parts "
            "non-empty. Use the object form when the model id itself contains a slash."
        },
    ),
]
Label = Annotated[str, msgspec.Meta(pattern=r"^\S+$")]


class RouteObject(Closed, kw_only=True):
    """Structured route; canonicalizes to model + "/" + effort. A slash is allowed in model."""

    model: Label
    effort: Label


Route = RouteString | RouteObject


class LaneRouteProjection(Open, kw_only=True):
    """Embeddable fragment: route is optional and signalled absent only by omission."""

    route: Route | UnsetType = UNSET


def canonical_route(route: Route) -> str:
    """Both forms canonicalize to the same chip text."""
    if isinstance(route, RouteObject):
        return f"{route.model}/{route.effort}"
    return route


def split_route(route: Route) -> tuple[str, str]:
    if isinstance(route, RouteObject):
        return route.model, route.effort
    model, effort = route.split("/")
    return model, effort


def chip(projection: LaneRouteProjection) -> str:
    """The dashboard chip: the canonical route, or hidden when there is none."""
    if projection.route is UNSET:
        return HIDDEN_CHIP
    return canonical_route(projection.route)


def chip_text(value: object) -> str | None:
    """The chip of a stored route value, None when absent or not a route (never guessed)."""
    if value is None:
        return None
    try:
        projection = msgspec.convert({"route": value}, LaneRouteProjection)
    except msgspec.ValidationError:
        return None
    return None if projection.route is UNSET else canonical_route(projection.route)
