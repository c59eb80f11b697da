"""Tool permissions (CONTRACT "Permissions and approvals"; opencode's model): each tool call
is decided before it runs — ``allow`` runs it, ``deny`` ends it as a tool error, ``ask`` stops
the run until the session's owner decides.

Rules are ``{"<tool>": rule | {"<pattern>": rule, ...}}``. A pattern matches the tool's main
argument (the path for file tools, the command for ``shell``): ``*`` within a path segment,
``**`` across segments (in a command, where there are no segments, both match anything).
The most specific matching pattern wins: the one with the most literal characters. The
deployment's defaults (``AGENT_PERMISSIONS``) come first; a session's rules override them
pattern by pattern. A tool without a matching rule is allowed.
"""

from __future__ import annotations

import functools
import json
import re
from typing import Any

from django.conf import settings

RULES = ("allow", "ask", "deny")
# The argument a rule's patterns are matched against.
MAIN_ARGUMENT = {
    "read": "path",
    "list": "path",
    "write": "path",
    "append": "path",
    "delete": "path",
    "shell": "command",
    "wait": "seconds",
}
PATH_TOOLS = {"read", "list", "write", "append", "delete"}
ANY = "**"
MAX_TOOLS = 50
MAX_PATTERNS = 200
MAX_PATTERN = 1000


def validate(value: Any) -> dict[str, Any]:
    """``value`` as rules, or ValueError with a sentence saying what is wrong."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError('permissions must be an object: {"<tool>": "allow"|"ask"|"deny"}.')
    if len(value) > MAX_TOOLS:
        raise ValueError(f"permissions may name at most {MAX_TOOLS} tools.")
    rules: dict[str, Any] = {}
    for tool, rule in value.items():
        if not isinstance(tool, str) or not tool or len(tool) > 64:
            raise ValueError("A tool name must be a string of 1 to 64 characters.")
        if isinstance(rule, str):
            if rule not in RULES:
                raise ValueError(f"The rule for {tool} must be one of allow, ask, deny.")
            rules[tool] = rule
            continue
        if not isinstance(rule, dict) or not rule:
            raise ValueError(
                f'The rule for {tool} must be allow, ask, deny or {{"<pattern>": rule}}.'
            )
        if len(rule) > MAX_PATTERNS:
            raise ValueError(f"{tool} may have at most {MAX_PATTERNS} patterns.")
        patterns = {}
        for pattern, decision in rule.items():
            if not isinstance(pattern, str) or not pattern or len(pattern) > MAX_PATTERN:
                raise ValueError(f"A pattern of {tool} must be 1 to {MAX_PATTERN} characters.")
            if decision not in RULES:
                raise ValueError(f"The rule for {tool} {pattern!r} must be allow, ask or deny.")
            patterns[pattern] = decision
        rules[tool] = patterns
    return rules


@functools.cache
def _parse_defaults(raw: str) -> dict[str, Any]:
    if not raw.strip():
        return {}
    try:
        return validate(json.loads(raw))
    except (ValueError, json.JSONDecodeError) as exc:
        raise ValueError(f"AGENT_PERMISSIONS is not valid: {exc}") from exc


def defaults() -> dict[str, Any]:
    return _parse_defaults(settings.AGENT_PERMISSIONS)


def _patterns(rule: Any) -> dict[str, str]:
    return {ANY: rule} if isinstance(rule, str) else dict(rule)


def in_force(session_rules: dict[str, Any] | None) -> dict[str, Any]:
    """The rules that decide a session's calls: the defaults, the session's over them."""
    merged: dict[str, dict[str, str]] = {}
    for source in (defaults(), session_rules or {}):
        for tool, rule in source.items():
            if isinstance(rule, str):
                merged[tool] = {ANY: rule}  # a whole-tool rule replaces what was there
            else:
                merged[tool] = {**merged.get(tool, {}), **rule}
    return {
        tool: patterns[ANY] if list(patterns) == [ANY] else patterns
        for tool, patterns in merged.items()
    }


@functools.lru_cache(maxsize=1024)
def _regex(pattern: str, segments: bool) -> re.Pattern[str]:
    out = []
    i = 0
    while i < len(pattern):
        if pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*" if segments else ".*")
            i += 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out), re.DOTALL)


def _specificity(pattern: str) -> tuple[int, int]:
    literal = len(pattern.replace("*", ""))
    return (literal, len(pattern))


def main_argument(tool: str, args: Any) -> str:
    name = MAIN_ARGUMENT.get(tool)
    if not isinstance(args, dict) or name is None:
        return ""
    value = args.get(name, "")
    return value if isinstance(value, str) else json.dumps(value)


def decide(rules: dict[str, Any], tool: str, args: Any) -> str:
    """allow, ask or deny for one call, by ``rules`` (as ``in_force`` gives them)."""
    rule = rules.get(tool)
    if rule is None:
        rule = rules.get("*")  # a rule for every tool
    if rule is None:
        return "allow"
    patterns = _patterns(rule)
    argument = main_argument(tool, args)
    segments = tool in PATH_TOOLS
    matching = [p for p in patterns if _regex(p, segments).fullmatch(argument)]
    if not matching:
        return "allow"
    return patterns[max(matching, key=_specificity)]


def with_exact_allow(session_rules: dict[str, Any], tool: str, args: Any) -> dict[str, Any]:
    """``always``: the session's rules plus ``allow`` for exactly this call's argument (a
    literal pattern is the most specific there is). ValueError when it cannot be a pattern
    (longer than ``MAX_PATTERN``)."""
    rules = dict(session_rules or {})
    patterns = _patterns(rules.get(tool, {})) if tool in rules else {}
    argument = main_argument(tool, args)
    patterns[argument or ANY] = "allow"
    rules[tool] = patterns
    return validate(rules)
