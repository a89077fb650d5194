"""Provisioning etcd users and roles with agentcoord's scope semantics.

Used by `agentcoordctl token provision --etcd`. A scope is what an HTTP token
carries, with the same meaning:

* a directory scope (`claims/acme`, `claims/acme/`, `heartbeats`) covers every
  record below it: the key range `[<key_prefix>claims/acme/, <key_prefix>claims/acme0)`;
* a record scope (`heartbeats/m1.json`) covers exactly that record: one key;
* `*` covers all of agentcoord's state under the key prefix.

Read scopes grant READ, write scopes READWRITE (a CAS write has to read). Each
machine gets its own user and a role of the same name (prefixed
`agentcoord-`), so revoking a machine is deleting its user and role.

etcd refuses, rather than filters, a range that is not entirely inside a
granted range: a machine limited to `claims/acme/` cannot list `claims/`.

Enabling auth requires a `root` user holding the `root` role; after that every
request needs credentials, and any auth change invalidates JWT tokens (the
store re-authenticates by itself).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Literal

import msgspec

from agentcoordd.model import ids
from agentcoordd.model.errors import UsageError
from agentcoordd.store.base import Forbidden, Unavailable
from agentcoordd.store.etcd import (
    DEFAULT_TIMEOUT,
    EtcdClient,
    EtcdError,
    _b64,
    _Denied,
    _prefix_end,
    normalize_key_prefix,
)

Permission = Literal["READ", "WRITE", "READWRITE"]
ROLE_PREFIX = "agentcoord-"


class KeyRange(msgspec.Struct, frozen=True):
    key: bytes
    range_end: bytes | None  # None: exactly one key


def scope_range(scope: str, key_prefix: str = "") -> KeyRange:
    """The etcd key range that a state scope covers (see the module docstring)."""
    kp = normalize_key_prefix(key_prefix).encode("utf-8")
    if scope == "*":
        if not kp:
            return KeyRange(b"\0", b"\0")  # etcd: the whole keyspace
        return KeyRange(kp, _prefix_end(kp))
    if scope.endswith(".json"):
        try:
            path = ids.state_path(scope)
        except UsageError:
            raise UsageError(f"invalid etcd scope: {scope}") from None
        return KeyRange(kp + path.encode("utf-8"), None)
    try:
        directory = ids.state_prefix(scope.rstrip("/"))
    except UsageError:
        raise UsageError(f"invalid etcd scope: {scope}") from None
    start = kp + directory.encode("utf-8") + b"/"
    return KeyRange(start, _prefix_end(start))


class EtcdAdmin:
    """Auth administration over the JSON gateway (as `root`, once auth is on)."""

    def __init__(
        self,
        endpoints: Sequence[str] | str,
        *,
        user: str | None = None,
        password: str | None = None,
        ca_file: str | None = None,
        cert_file: str | None = None,
        key_file: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> None:
        self.client = EtcdClient(
            endpoints,
            user=user,
            password=password,
            ca_file=ca_file,
            cert_file=cert_file,
            key_file=key_file,
            timeout=timeout,
        )

    async def aclose(self) -> None:
        await self.client.aclose()

    async def __aenter__(self) -> "EtcdAdmin":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _auth(self, api: str, body: dict[str, Any], what: str, ok_if: str | None = None) -> dict[str, Any]:
        try:
            reply, _ = await self.client.call("/v3/auth/" + api, body, what)
            return reply
        except _Denied:
            raise Forbidden(f"permission denied: {what} needs the etcd root role") from None
        except EtcdError as exc:
            if ok_if and ok_if in exc.message:
                return {}
            raise Unavailable(f"etcd refused {what}: {exc.message}") from None

    # ---- users and roles --------------------------------------------------------

    async def add_user(self, name: str, password: str) -> None:
        """Create the user, or change its password if it exists."""
        reply = await self._auth(
            "user/add", {"name": name, "password": password}, f"add etcd user {name!r}", ok_if="user name already exists"
        )
        if reply == {}:
            await self._auth("user/changepw", {"name": name, "password": password}, f"set password of {name!r}")

    async def delete_user(self, name: str) -> None:
        await self._auth("user/delete", {"name": name}, f"delete etcd user {name!r}", ok_if="user name not found")

    async def user_exists(self, name: str) -> bool:
        """Whether the user exists (a found user's reply always carries a header)."""
        return bool(await self._auth("user/get", {"name": name}, f"read etcd user {name!r}", ok_if="user name not found"))

    async def add_role(self, role: str) -> None:
        await self._auth("role/add", {"name": role}, f"add etcd role {role!r}", ok_if="role name already exists")

    async def delete_role(self, role: str) -> None:
        await self._auth("role/delete", {"role": role}, f"delete etcd role {role!r}", ok_if="role name not found")

    async def grant_role(self, user: str, role: str) -> None:
        await self._auth("user/grant", {"user": user, "role": role}, f"grant role {role!r} to {user!r}")

    async def role_permissions(self, role: str) -> list[dict[str, Any]]:
        reply = await self._auth("role/get", {"role": role}, f"read etcd role {role!r}")
        return list(reply.get("perm") or [])

    async def grant_permission(self, role: str, permission: Permission, key_range: KeyRange) -> None:
        perm: dict[str, Any] = {"permType": permission, "key": _b64(key_range.key)}
        if key_range.range_end is not None:
            perm["range_end"] = _b64(key_range.range_end)
        await self._auth("role/grant", {"name": role, "perm": perm}, f"grant {permission} to role {role!r}")

    async def revoke_all(self, role: str) -> None:
        for perm in await self.role_permissions(role):
            body = {"role": role, "key": perm.get("key", ""), "range_end": perm.get("range_end", "")}
            await self._auth("role/revoke", body, f"revoke a permission of role {role!r}")

    async def provision(
        self,
        user: str,
        password: str,
        *,
        read: Iterable[str] = (),
        write: Iterable[str] = (),
        key_prefix: str = "",
    ) -> str:
        """Create/refresh `user` and its role `agentcoord-<user>` with exactly these scopes.

        Returns the role name. Scopes are validated before anything changes;
        re-running replaces the role's permissions (not additive).
        """
        ids.attribution("etcd user", user)
        read_ranges = [scope_range(s, key_prefix) for s in read]
        write_ranges = [scope_range(s, key_prefix) for s in write]
        if not read_ranges and not write_ranges:
            raise UsageError(f"no scopes given for etcd user {user!r}")
        role = ROLE_PREFIX + user
        await self.add_role(role)
        await self.revoke_all(role)
        for key_range in write_ranges:
            await self.grant_permission(role, "READWRITE", key_range)
        for key_range in read_ranges:
            if key_range not in write_ranges:
                await self.grant_permission(role, "READ", key_range)
        await self.add_user(user, password)
        await self.grant_role(user, role)
        return role

    async def deprovision(self, user: str) -> None:
        await self.delete_user(user)
        await self.delete_role(ROLE_PREFIX + user)

    # ---- enabling auth ------------------------------------------------------------

    async def enable_auth(self, root_password: str) -> None:
        """Create `root` (role `root`) and turn auth on. Idempotent while auth is off."""
        await self.add_user("root", root_password)
        await self.add_role("root")
        await self.grant_role("root", "root")
        await self._auth("enable", {}, "enable etcd auth")

    async def disable_auth(self) -> None:
        await self._auth("disable", {}, "disable etcd auth")
