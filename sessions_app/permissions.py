"""Tool permissions (docs/semantics.md §8.1; opencode's model): each tool call
is decided before it runs — ``allow`` runs it, ``deny`` ends it as a tool error, ``ask`` stops
the run until the session's owner decides.

Rules are ``{"<tool>": rule | {"<pattern>": rule, ..., "exact": {"<argument>": rule, ...}}}``.
A pattern matches the tool's main argument (the path for file tools, the command for
``shell``): ``*`` within a path segment, ``**`` across segments (in a command, where there are
no segments, both match anything). The most specific matching pattern wins: the one with the
most literal characters. An ``exact`` entry (what ``always`` stores) matches only that very
argument, compared as a string, never as a pattern, and wins over every pattern. The
deployment's defaults (``AGENT_PERMISSIONS``) come first; a session's rules override them
pattern by pattern. A tool without a matching rule is allowed.

Patterns are user input matched against model output: they are translated to RE2, whose
matching takes linear time, so no pattern can stall a worker (``_glob``). File tools' rules see
the path the tool will touch (``normal_path``: ``./secret/a`` is ``secret/a``). Shell rules see
the raw command and every command it would run as far as it can be parsed (``shell_commands``:
``/bin/rm``, ``sh -c "rm x"``, ``env rm``…); they are a convenience that keeps a model from
running what a user forbade by mistake, not a security boundary — the sandbox is.
"""

from __future__ import annotations

import functools
import json
import re
import shlex
from typing import Any

import re2
from django.conf import settings

RULES = ("allow", "ask", "deny")
STRICTNESS = {"allow": 0, "ask": 1, "deny": 2}
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
EXACT = "exact"  # {"<argument>": rule}: arguments compared as strings (``always``)
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
        patterns: dict[str, Any] = {}
        for pattern, decision in rule.items():
            if pattern == EXACT and isinstance(decision, dict):
                patterns[EXACT] = _validate_exact(tool, decision)
                continue
            if not isinstance(pattern, str) or not pattern or len(pattern) > MAX_PATTERN:
                raise ValueError(f"A pattern of {tool} must be 1 to {MAX_PATTERN} characters.")
            if decision not in RULES:
                raise ValueError(f"The rule for {tool} {pattern!r} must be allow, ask or deny.")
            patterns[pattern] = decision
        rules[tool] = patterns
    return rules


def _validate_exact(tool: str, exact: dict[str, Any]) -> dict[str, str]:
    if len(exact) > MAX_PATTERNS:
        raise ValueError(f"{tool} may have at most {MAX_PATTERNS} exact arguments.")
    for argument, decision in exact.items():
        if not isinstance(argument, str) or len(argument) > MAX_PATTERN:
            raise ValueError(
                f"An exact argument of {tool} must be a string of at most {MAX_PATTERN} characters."
            )
        if decision not in RULES:
            raise ValueError(
                f"The rule for {tool} exactly {argument!r} must be allow, ask or deny."
            )
    return dict(exact)


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


def _patterns(rule: Any) -> dict[str, Any]:
    return {ANY: rule} if isinstance(rule, str) else dict(rule)


def _split(patterns: dict[str, Any]) -> tuple[dict[str, str], dict[str, str]]:
    """A tool's globs and its exact arguments."""
    exact = patterns.get(EXACT)
    if isinstance(exact, dict):
        return {p: d for p, d in patterns.items() if p != EXACT}, exact
    return patterns, {}


def in_force(session_rules: dict[str, Any] | None) -> dict[str, Any]:
    """The rules that decide a session's calls: the defaults, the session's over them."""
    merged: dict[str, dict[str, Any]] = {}
    for source in (defaults(), session_rules or {}):
        for tool, rule in source.items():
            if isinstance(rule, str):
                merged[tool] = {ANY: rule}  # a whole-tool rule replaces what was there
                continue
            before = merged.get(tool, {})
            merged[tool] = {**before, **rule}
            if isinstance(before.get(EXACT), dict) and isinstance(rule.get(EXACT), dict):
                merged[tool][EXACT] = {**before[EXACT], **rule[EXACT]}
    return {
        tool: patterns[ANY] if list(patterns) == [ANY] else patterns
        for tool, patterns in merged.items()
    }


# -- matching ---------------------------------------------------------------------------------
_OPTIONS = re2.Options()
_OPTIONS.log_errors = False
_OPTIONS.encoding = re2.Options.Encoding.LATIN1  # bytes: any string, even a lone surrogate
_OPTIONS.dot_nl = True


def _bytes(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


@functools.lru_cache(maxsize=1024)
def _glob(pattern: str, segments: bool) -> Any:
    """``pattern`` as an RE2 program: linear-time matching (a backtracking engine takes
    exponential time on ``*a*a*a*a*b`` against a run of ``a``)."""
    out = []
    i = 0
    while i < len(pattern):
        if pattern.startswith("**", i):
            out.append(".*")
            while i < len(pattern) and pattern[i] == "*":
                i += 1
        elif pattern[i] == "*":
            out.append("[^/]*" if segments else ".*")
            i += 1
        else:
            out.append("".join(f"\\x{byte:02x}" for byte in _bytes(pattern[i])))
            i += 1
    return re2.compile("".join(out).encode(), _OPTIONS)


def _specificity(pattern: str) -> tuple[int, int]:
    literal = len(pattern.replace("*", ""))
    return (literal, len(pattern))


def _match(patterns: dict[str, str], argument: str, segments: bool) -> str | None:
    """The rule of the most specific pattern matching ``argument``, None when none does."""
    text = _bytes(argument)
    matching = [p for p in patterns if _glob(p, segments).fullmatch(text)]
    if not matching:
        return None
    return patterns[max(matching, key=_specificity)]


def _stricter(a: str | None, b: str | None) -> str | None:
    if a is None or b is None:
        return a or b
    return a if STRICTNESS[a] >= STRICTNESS[b] else b


def normal_path(path: str) -> str:
    """The worktree path a file tool touches for ``path`` (``runs_app.tools.resolve``): blanks
    around it, ``.``, empty segments and a trailing ``/`` dropped. ``..`` is resolved by name
    and a leading ``/`` dropped — the tool refuses both, and whatever could name a denied
    path must match the rule for it."""
    parts: list[str] = []
    for part in path.strip().split("/"):
        if part in ("", "."):
            continue
        if part == ".." and parts and parts[-1] != "..":
            parts.pop()
        else:
            parts.append(part)
    return "/".join(parts)


def main_argument(tool: str, args: Any) -> str:
    name = MAIN_ARGUMENT.get(tool)
    if not isinstance(args, dict) or name is None:
        return ""
    value = args.get(name, "")
    if not isinstance(value, str):
        return json.dumps(value)
    return normal_path(value) if tool in PATH_TOOLS else value


def decide(rules: dict[str, Any], tool: str, args: Any) -> str:
    """allow, ask or deny for one call, by ``rules`` (as ``in_force`` gives them)."""
    rule = rules.get(tool)
    if rule is None:
        rule = rules.get("*")  # a rule for every tool
    if rule is None:
        return "allow"
    patterns, exact = _split(_patterns(rule))
    argument = main_argument(tool, args)
    if argument in exact:
        return exact[argument]
    if tool != "shell":
        return _match(patterns, argument, tool in PATH_TOOLS) or "allow"
    decision = _match(patterns, argument, False)  # the raw text, as written
    commands = shell_commands(argument)
    if commands is None:
        # Something runs that the parse cannot see (``$(…)``, a script, a syntax error):
        # where the user restricts the shell at all, the owner is asked.
        if any(d != "allow" for d in patterns.values()):
            decision = _stricter(decision, "ask")
    else:
        for command in commands:
            decision = _stricter(decision, _match(patterns, command, False))
    return decision or "allow"


def with_exact_allow(session_rules: dict[str, Any], tool: str, args: Any) -> dict[str, Any]:
    """``always``: the session's rules plus ``allow`` for exactly this call's argument — an
    ``exact`` entry, compared as a string, never a pattern (``ls *.txt`` approved must not
    allow ``ls *.txt; rm -rf ~; echo .txt``). A tool without a main argument is allowed
    whole. ValueError when the argument is longer than ``MAX_PATTERN``."""
    rules = dict(session_rules or {})
    patterns = _patterns(rules[tool]) if tool in rules else {}
    if tool not in MAIN_ARGUMENT:
        patterns[ANY] = "allow"
    else:
        before = patterns.get(EXACT)
        exact = dict(before) if isinstance(before, dict) else {}
        if isinstance(before, str):
            # An old pattern named "exact" matches that word only: an exact entry says the same.
            exact.setdefault(EXACT, before)
        exact[main_argument(tool, args)] = "allow"
        patterns[EXACT] = exact
    rules[tool] = patterns
    return validate(rules)


# -- shell commands ---------------------------------------------------------------------------
MAX_COMMAND = 100_000
MAX_COMMANDS = 1000
MAX_NESTING = 8
SHELLS = {"sh", "bash", "dash", "zsh", "ksh", "ash", "mksh", "yash", "fish"}
# Programs that run the command given in their arguments, with their options that take a value.
WRAPPERS: dict[str, set[str]] = {
    "env": {"-u", "--unset", "-C", "--chdir"},
    "exec": {"-a"},
    "nice": {"-n", "--adjustment"},
    "nohup": set(),
    "timeout": {"-s", "--signal", "-k", "--kill-after"},
    "command": set(),
    "builtin": set(),
    "time": {"-o", "--output", "-f", "--format"},
    "stdbuf": {"-i", "-o", "-e"},
    "setsid": set(),
    "ionice": {"-c", "-n", "-p", "-P", "-u"},
    "chrt": set(),
    "taskset": set(),
    "sudo": {"-u", "-g", "-C", "-D", "-h", "-p", "-r", "-t", "-U", "-T", "-R"},
    "doas": {"-u", "-C"},
    "xargs": {"-I", "-n", "-P", "-d", "-E", "-L", "-s", "-a", "--max-args", "--delimiter"},
    "unbuffer": set(),
    "busybox": set(),
    "watch": {"-n", "--interval", "-d"},
    "flock": {"-w", "-E", "--timeout"},
    "strace": {"-e", "-o", "-p", "-s", "-u"},
}
# Words a wrapper takes after its options and before the command (a duration, a priority).
WRAPPER_WORDS = {"timeout": 1, "chrt": 1, "taskset": 1, "flock": 1}
KEYWORDS = set(
    [
        "!",
        "{",
        "}",
        "(",
        ")",
        "if",
        "then",
        "else",
        "elif",
        "fi",
        "do",
        "done",
        "while",
        "until",
        "for",
        "in",
        "case",
        "esac",
        "select",
    ]
)
KEYWORDS |= {"function", "coproc"}
ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\[[^]]*\])?\+?=")
HIDDEN = ("$(", "`", "<(", ">(")  # commands inside a word: not parsed, so not seen


class _Opaque(Exception):
    """The command runs something its parse cannot name."""


def shell_commands(command: str) -> list[str] | None:
    """Every simple command ``command`` would run, as far as a parse can tell: its program's
    name without the directory, then its arguments (``/bin/rm -f a`` → ``rm -f a`` and
    ``/bin/rm -f a``), across ``;`` ``&&`` ``||`` ``|`` ``&`` and new lines, after variable
    assignments and redirections, into ``sh -c``, ``eval``, ``env``, ``exec``, ``nice``,
    ``timeout`` and the like. None when it cannot: a quote left open, ``$(…)`` or backquotes,
    a program in a variable, a shell reading a script or its input."""
    if len(command) > MAX_COMMAND:
        return None
    out: list[str] = []
    try:
        _line(command, 0, out)
    except _Opaque:
        return None
    return out


def _line(text: str, depth: int, out: list[str]) -> None:
    if depth > MAX_NESTING or any(h in text for h in HIDDEN):
        raise _Opaque
    lexer = shlex.shlex(text.replace("\\\n", ""), posix=True, punctuation_chars="();<>|&\n")
    lexer.whitespace = " \t\r"
    lexer.whitespace_split = True
    lexer.commenters = ""
    try:
        tokens = list(lexer)
    except ValueError as exc:  # a quote or an escape left open
        raise _Opaque from exc
    words: list[str] = []
    skip_next = False
    for token in tokens:
        if skip_next:
            skip_next = False
            continue
        if token and all(c in "();<>|&\n" for c in token):
            if any(c in ";|()\n" for c in token) or token in ("&", "&&"):
                _simple(words, depth, out)
                words = []
            else:  # a redirection: its target is no command, nor is a descriptor before it
                if words and words[-1].isdigit():
                    words.pop()
                skip_next = True
            continue
        words.append(token)
    _simple(words, depth, out)


def _simple(words: list[str], depth: int, out: list[str]) -> None:
    if depth > MAX_NESTING:
        raise _Opaque
    while words and (words[0] in KEYWORDS or ASSIGNMENT.match(words[0])):
        words = words[1:]
    if not words:
        return
    if len(out) >= MAX_COMMANDS:
        raise _Opaque
    program = words[0]
    if any(c in program for c in "$*?[{~"):
        raise _Opaque  # the program's name is known only when it runs
    name = program.rsplit("/", 1)[-1]
    out.append(" ".join([name, *words[1:]]))
    if name != program:
        out.append(" ".join(words))
    args = words[1:]
    if name in SHELLS:
        _shell(args, depth, out)
    elif name == "eval":
        _line(" ".join(args), depth + 1, out)
    elif name in (".", "source"):
        raise _Opaque
    elif name in WRAPPERS:
        _wrapped(name, args, depth, out)


def _shell(args: list[str], depth: int, out: list[str]) -> None:
    """``sh [options] -c 'command' …``; a shell given a script or its input is opaque."""
    has_c = False
    i = 0
    while i < len(args) and args[i][:1] in ("-", "+") and args[i] not in ("-", "--"):
        if args[i] in ("-o", "+o", "-O", "+O"):
            i += 1
        elif not args[i].startswith("--") and "c" in args[i][1:]:
            has_c = True
        i += 1
    if i < len(args) and args[i] == "--":
        i += 1
    if not has_c or i >= len(args):
        raise _Opaque
    _line(args[i], depth + 1, out)


def _wrapped(name: str, args: list[str], depth: int, out: list[str]) -> None:
    takes_value = WRAPPERS[name]
    i = 0
    while i < len(args):
        word = args[i]
        if word == "--":
            i += 1
            break
        if name == "env" and (word in ("-S", "--split-string") or word.startswith("-S")):
            inline = word[2:] if word.startswith("-S") and len(word) > 2 else None
            if inline is None and i + 1 < len(args):
                inline, i = args[i + 1], i + 1
            _line(inline or "", depth + 1, out)
            i += 1
            continue
        if name == "env" and ASSIGNMENT.match(word):
            i += 1
        elif word.startswith("-") and word != "-":
            i += 2 if word in takes_value else 1
        else:
            break
    i += WRAPPER_WORDS.get(name, 0)
    if i < len(args):
        # xargs adds the words it reads: ``xargs rm`` runs ``rm …``, which ``rm *`` matches.
        _simple(args[i:] + (["…"] if name == "xargs" else []), depth + 1, out)
