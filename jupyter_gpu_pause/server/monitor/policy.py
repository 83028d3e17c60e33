"""Admin idle policies: which rule applies to a session, and what it decides.

Pure logic (no Tornado, no kernels): the monitor gathers facts about each session and asks
``decide``. Policies are validated once at start; a bad one stops the server with a message
naming the policy and the key.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from typing import Any

from ..config.checks import twice

ACTIONS = ("pause", "cull", "warn", "none")
# what a ``pause`` policy does with a kernel known not to be pausable (lifecycle/pausable.py)
UNPAUSABLE = ("keep", "cull")
MATCH_KEYS: dict[str, type] = {"kernel_name": str, "uses_gpu": bool, "user": str}
KEYS: dict[str, type | tuple[type, ...]] = {
    "name": str,
    "match": dict,
    "idle_timeout": (int, float),
    "warn_before": (int, float),
    "action": str,
    "gpu_idle_below": (int, float),
    "count_connected": bool,
    "max_keepalive": (int, float),
    "unpausable": str,
}


class PolicyError(ValueError):
    """A policy in the configuration is invalid; the message names the policy and the key."""


@dataclass(frozen=True)
class Policy:
    name: str
    match: dict = field(default_factory=dict)
    idle_timeout: float = 3600.0
    warn_before: float = 300.0
    action: str = "pause"
    gpu_idle_below: float = 5.0
    count_connected: bool = True
    max_keepalive: float = 14400.0
    unpausable: str = "keep"

    def matches(self, kernel_name: str, uses_gpu: bool, user: str | None) -> bool:
        m = self.match
        if "kernel_name" in m and not fnmatch.fnmatchcase(kernel_name or "", m["kernel_name"]):
            return False
        if "uses_gpu" in m and bool(uses_gpu) != m["uses_gpu"]:
            return False
        if "user" in m and not fnmatch.fnmatchcase(user or "", m["user"]):
            return False
        return True

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "match": dict(self.match),
            "idle_timeout": self.idle_timeout,
            "warn_before": self.warn_before,
            "action": self.action,
            "gpu_idle_below": self.gpu_idle_below,
            "count_connected": self.count_connected,
            "max_keepalive": self.max_keepalive,
            "unpausable": self.unpausable,
        }

    def action_for(self, unpausable: bool) -> str:
        """What this policy does to a session: its ``action``, except that a ``pause`` of a
        kernel known not to be pausable is ``unpausable``'s: ``keep`` (nothing: it never
        warns or tries again) or ``cull``."""
        if unpausable and self.action == "pause":
            return "none" if self.unpausable == "keep" else "cull"
        return self.action


def _type_name(t) -> str:
    return " or ".join(x.__name__ for x in t) if isinstance(t, tuple) else t.__name__


def parse_policy(raw, index: int) -> Policy:
    label = f"policy #{index + 1}"
    if not isinstance(raw, dict):
        raise PolicyError(f"{label} must be a dict, not {type(raw).__name__}")
    name = raw.get("name")
    if not isinstance(name, str) or not name.strip():
        raise PolicyError(f"{label} has no 'name' (every policy needs one)")
    label = f"policy '{name}'"
    for key, value in raw.items():
        if key not in KEYS:
            raise PolicyError(f"{label}: unknown key '{key}'; known keys: {', '.join(KEYS)}")
        expected = KEYS[key]
        if isinstance(value, bool) and expected in ((int, float),):
            raise PolicyError(f"{label}: '{key}' must be a number of seconds, not {value!r}")
        if not isinstance(value, expected):
            raise PolicyError(f"{label}: '{key}' must be {_type_name(expected)}, not {value!r}")
    if raw.get("action", "pause") not in ACTIONS:
        raise PolicyError(
            f"{label}: unknown action {raw['action']!r}; use one of {', '.join(ACTIONS)}"
        )
    if raw.get("unpausable", "keep") not in UNPAUSABLE:
        raise PolicyError(
            f"{label}: 'unpausable' must be one of {', '.join(UNPAUSABLE)}, not "
            f"{raw['unpausable']!r} (what a pause does with a kernel that cannot be paused)"
        )
    for key in ("idle_timeout", "warn_before", "max_keepalive", "gpu_idle_below"):
        if key in raw and raw[key] < 0:
            raise PolicyError(f"{label}: '{key}' must not be negative ({raw[key]})")
    if raw.get("idle_timeout", 1) == 0:
        raise PolicyError(f"{label}: 'idle_timeout' must be more than 0 seconds")
    for key, value in raw.get("match", {}).items():
        if key not in MATCH_KEYS:
            raise PolicyError(f"{label}: unknown match key '{key}'; known: {', '.join(MATCH_KEYS)}")
        if not isinstance(value, MATCH_KEYS[key]):
            raise PolicyError(
                f"{label}: match '{key}' must be {MATCH_KEYS[key].__name__}, not {value!r}"
            )
    fields: dict[str, Any] = {  # checked above, key by key
        k: (float(v) if isinstance(v, int) and k in KEYS and KEYS[k] == (int, float) else v)
        for k, v in raw.items()
    }
    policy = Policy(**fields)
    if policy.warn_before > policy.idle_timeout:
        raise PolicyError(
            f"{label}: 'warn_before' ({policy.warn_before:g} s) is longer than 'idle_timeout' "
            f"({policy.idle_timeout:g} s)"
        )
    return policy


def parse_policies(raw_list) -> list[Policy]:
    """Validate the configured list; names must be unique so events can name the policy."""
    if not isinstance(raw_list, list):
        raise PolicyError("GpuPauseApp.policies must be a list of dicts")
    policies = [parse_policy(raw, i) for i, raw in enumerate(raw_list)]
    if (name := twice(p.name for p in policies)) is not None:
        raise PolicyError(f"policy '{name}' is defined twice; names must be unique")
    return policies


def first_match(
    policies: list[Policy], kernel_name: str, uses_gpu: bool, user: str | None
) -> Policy | None:
    """The first policy that matches, or None: a session matching none is never acted on."""
    for p in policies:
        if p.matches(kernel_name, uses_gpu, user):
            return p
    return None
