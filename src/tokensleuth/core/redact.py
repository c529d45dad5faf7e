"""What leaves this machine in a file that others read (a study bundle): no path of the writer's
home and no secret.

Pure functions over JSON values. A path under the home becomes ``~/…`` (which the reader's
``expanduser`` takes to its own home); a secret becomes ``<redacted>``, where a secret is

- an environment variable's value whose name says it holds one (``OPENAI_API_KEY``, ``HF_TOKEN``,
  ``DB_PASSWORD``): in an arm's environment, or any upper-case name;
- a field named for one (``api_key``, ``token``, ``password`` …);
- an option's value whose name says so (``--api-key sk-…``, ``--hf-token=…``) in an argv;
- a URL's user and password (``https://u:p@host``), a query's key or token (``?api_key=…``), a
  ``Bearer`` header's token;
- anywhere, the value of a secret-named variable of the writer's own environment (``known``).

What is redacted is counted, so the file can say so.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

REDACTED = "<redacted>"
# a name's parts (split at _ - .) that say it holds a secret
SECRET_PARTS = frozenset({"KEY", "APIKEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "PASS", "CREDENTIAL",
                          "CREDENTIALS", "AUTH", "AUTHORIZATION", "COOKIE"})
# fields of ours whose parts look like a secret's and are not one: a build's content key, the
# name of the variable that holds a url: arm's key (never the key)
NOT_SECRET = frozenset({"key", "api_key_env"})
# lower-case field names that hold a secret (our own fields are lower case: only these whole names)
SECRET_FIELDS = frozenset({"api_key", "apikey", "token", "access_token", "secret", "password", "passwd",
                           "authorization", "cookie"})
ENVIRONMENTS = frozenset({"env", "engine_env"})  # fields that hold an environment: every name is a variable's
_ENV_NAME = re.compile(r"^[A-Z][A-Z0-9_]*$")
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s@:]+:[^/\s@]+@")
_QUERY = re.compile(r"(?i)([?&](?:api[_-]?key|key|token|access[_-]?token|secret|password)=)[^&\s#\"']+")
_BEARER = re.compile(r"(?i)\b(Bearer\s+)[A-Za-z0-9._~+/=-]+")
# VAR=VALUE in a sentence or a command line (--env b:HF_TOKEN=…)
_ASSIGNMENT = re.compile(r"(\b([A-Z][A-Z0-9_]*)=)([^\s\"',;)]+)")
MIN_KNOWN = 6  # a shorter value of a secret variable ("1", "true") would redact ordinary words


def secret_name(name: str) -> bool:
    """Whether a variable's or an option's name says it holds a secret (``OPENAI_API_KEY``, ``--hf-token``)."""
    return any(part in SECRET_PARTS for part in re.split(r"[_\-.]+", name.strip("-").upper()))


def home_paths(home: str | None = None) -> tuple[str, ...]:
    """The writer's home as written and as resolved (longest first); none for ``/`` or an empty one."""
    h = home if home is not None else os.path.expanduser("~")
    found = {p.rstrip("/") for p in (h, os.path.realpath(h)) if p and p.rstrip("/")}
    return tuple(sorted(found, key=len, reverse=True))


def known_secrets(environ: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """The values of the environment's secret-named variables (long enough to be told apart)."""
    env = os.environ if environ is None else environ
    return tuple(sorted({v for k, v in env.items() if secret_name(k) and len(v) >= MIN_KNOWN}, key=len, reverse=True))


@dataclass
class Redactor:
    """Walks a JSON value and returns it without the home's paths and the secrets; counts both."""

    homes: tuple[str, ...] = ()
    known: tuple[str, ...] = ()
    counts: dict[str, int] = field(default_factory=lambda: {"home_paths": 0, "secrets": 0})

    def __post_init__(self) -> None:
        # a home path as a whole path's start: /root/x and /root, never /rootfs or /data/root
        self._home = [re.compile(r"(?<![\w.\-/])" + re.escape(h) + r"(?=/|$|[^\w.\-])") for h in self.homes]

    def gather(self, v: Any, name: str = "", in_env: bool = False) -> None:
        """Learn the secrets a value holds where they are named (a field, an argv option), so that
        :meth:`value` redacts them wherever else they were written (a sentence, a command line)."""
        found: list[str] = []
        if isinstance(v, Mapping):
            for k, x in v.items():
                self.gather(x, str(k), name in ENVIRONMENTS)
        elif isinstance(v, list | tuple):
            for prev, x in zip([None, *v], v, strict=False):
                if not isinstance(x, str):
                    self.gather(x)
                elif isinstance(prev, str) and self._secret_option(prev) and "=" not in prev:
                    found.append(x)
                elif x.startswith("-") and "=" in x and self._secret_option(x.partition("=")[0]):
                    found.append(x.partition("=")[2])
        elif isinstance(v, str) and self._secret_field(name, in_env):
            found.append(v)
        self.known = tuple(sorted({*self.known, *(f for f in found if len(f) >= MIN_KNOWN)}, key=len, reverse=True))

    def value(self, v: Any, name: str = "", in_env: bool = False) -> Any:
        if isinstance(v, Mapping):
            return {self.text(str(k)): self.value(x, str(k), name in ENVIRONMENTS) for k, x in v.items()}
        if isinstance(v, list | tuple):
            return self.words(list(v))
        if isinstance(v, str):
            if v and self._secret_field(name, in_env):
                self.counts["secrets"] += 1
                return REDACTED
            return self.text(v)
        return v

    def _secret_field(self, name: str, in_env: bool) -> bool:
        if name in NOT_SECRET:
            return False
        if name.lower() in SECRET_FIELDS:
            return True
        return (in_env or bool(_ENV_NAME.match(name))) and secret_name(name)

    @staticmethod
    def _secret_option(word: str) -> bool:
        """An argv word that is an option named for a secret (``--api-key``; not ``-1``)."""
        return (word.startswith("-") and len(word) > 1 and not word[1:2].isdigit() and secret_name(word)
                and word.strip("-") not in NOT_SECRET)

    def words(self, items: list[Any]) -> list[Any]:
        """A list; where it is an argv, an option named for a secret has its value redacted."""
        out: list[Any] = []
        hide_next = False
        for x in items:
            if hide_next and isinstance(x, str):
                self.counts["secrets"] += 1
                out.append(REDACTED)
            elif isinstance(x, str) and self._secret_option(x.partition("=")[0]) and "=" in x:
                self.counts["secrets"] += 1
                out.append(f"{x.partition('=')[0]}={REDACTED}")
            else:
                out.append(self.value(x))
            hide_next = isinstance(x, str) and not hide_next and "=" not in x and self._secret_option(x)
        return out

    def _assignment(self, m: re.Match[str]) -> str:
        if not secret_name(m[2]) or m[3] == REDACTED:
            return m[0]
        self.counts["secrets"] += 1
        return m[1] + REDACTED

    def text(self, s: str) -> str:
        for secret in self.known:
            if secret in s:
                self.counts["secrets"] += s.count(secret)
                s = s.replace(secret, REDACTED)
        for pattern, repl in ((_USERINFO, rf"\1{REDACTED}@"), (_QUERY, rf"\1{REDACTED}"), (_BEARER, rf"\1{REDACTED}")):
            s, n = pattern.subn(repl, s)
            self.counts["secrets"] += n
        s = _ASSIGNMENT.sub(self._assignment, s)
        for pattern in self._home:
            s, n = pattern.subn("~", s)
            self.counts["home_paths"] += n
        return s


def redact(obj: Any, homes: Iterable[str] | None = None, known: Iterable[str] | None = None) -> tuple[Any, dict[str, int]]:
    """``obj`` without the writer's home paths and secrets (``homes``, ``known``: this machine's by
    default), and how many of each were replaced."""
    r = Redactor(tuple(home_paths() if homes is None else homes), tuple(known_secrets() if known is None else known))
    r.gather(obj)
    return r.value(obj), dict(r.counts)
