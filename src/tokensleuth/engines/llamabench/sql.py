"""llama-bench ``-o sql`` output, read as data: never executed.

llama-bench's SQL printer (tools/llama-bench/llama-bench.cpp, ``struct sql_printer``)
writes one ``CREATE TABLE IF NOT EXISTS llama_bench (<field> <TEXT|INTEGER|REAL>,
...);`` (the table was called ``test`` in older builds) and, per test, one
``INSERT INTO llama_bench (<fields>) VALUES ('<v>', ...);`` with every value in
single quotes. That grammar, and nothing else, is read here: running the text in
SQLite would also run whatever else it holds (``ATTACH DATABASE '/any/path'``
writes files).
"""

from __future__ import annotations

import math
import re
from typing import Any

from tokensleuth.core.errors import show
from tokensleuth.engines.llamabench.output import INT64_MAX, MalformedOutput, check_text

_TOKEN = re.compile(
    r"(?P<str>'(?:[^']|'')*')"  # SQL string literal; '' is an escaped quote
    r"|(?P<num>-?[0-9]+(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?)"
    r"|(?P<word>[A-Za-z_][A-Za-z0-9_]*)"
    r"|(?P<punct>[(),;])"
)
_SPACE = re.compile(r"[ \t\r\n]*")
_INTEGER = re.compile(r"-?[0-9]{1,19}")
_REAL = re.compile(r"-?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]{1,4})?")

Token = tuple[str, str, int]  # (kind, text, line)


def _tokens(text: str) -> list[Token]:
    out: list[Token] = []
    pos, line = 0, 1
    while True:
        space = _SPACE.match(text, pos)
        assert space is not None  # matches the empty string
        line += space.group().count("\n")
        pos = space.end()
        if pos >= len(text):
            return out
        m = _TOKEN.match(text, pos)
        if m is None:
            raise MalformedOutput(f"line {line}: unexpected {show(text[pos:pos + 20])}")
        kind = m.lastgroup
        assert kind is not None
        out.append((kind, m.group(), line))
        line += m.group().count("\n")
        pos = m.end()


def _value(column: str, declared: str, kind: str, literal: str) -> Any:
    """A literal converted the way SQLite's column affinity would, or refused."""
    if kind == "word" and literal.upper() == "NULL":
        return None
    if kind not in ("str", "num"):
        raise MalformedOutput(f"{column} has {show(literal)}, not a value")
    text = literal[1:-1].replace("''", "'") if kind == "str" else literal
    check_text(text)
    affinity = declared.upper()
    if "INT" in affinity:
        if not _INTEGER.fullmatch(text) or abs(int(text)) > INT64_MAX:
            raise MalformedOutput(f"{column} holds {show(text)}, not a 64-bit integer")
        return int(text)
    if any(a in affinity for a in ("REAL", "FLOA", "DOUB")):
        value = float(text) if _REAL.fullmatch(text) else math.nan
        if not math.isfinite(value):
            raise MalformedOutput(f"{column} holds {show(text)}, not a finite number")
        return value
    return text


class _Reader:
    def __init__(self, text: str) -> None:
        self.toks = _tokens(text)
        self.i = 0

    def done(self) -> bool:
        return self.i >= len(self.toks)

    def take(self, kind: str, word: str | None = None) -> Token:
        want = word or {"word": "a name", "punct": "punctuation"}.get(kind, kind)
        if self.done():
            raise MalformedOutput(f"the SQL ends where {want} was expected (was the run cut short?)")
        tok = self.toks[self.i]
        if tok[0] != kind or (word is not None and tok[1].upper() != word):
            raise MalformedOutput(f"line {tok[2]}: expected {want}, found {show(tok[1])}")
        self.i += 1
        return tok

    def peek_word(self, word: str) -> bool:
        return not self.done() and self.toks[self.i][0] == "word" and self.toks[self.i][1].upper() == word

    def listing(self, item: int) -> list[list[Token]]:
        """``( a b, c d, ... )``: each entry ``item`` tokens long."""
        self.take("punct", "(")
        out: list[list[Token]] = []
        while True:
            if self.done():
                raise MalformedOutput("the SQL ends inside a parenthesised list (was the run cut short?)")
            out.append(self.toks[self.i:self.i + item])
            self.i += item
            sep = self.take("punct")
            if sep[1] == ")":
                return out
            if sep[1] != ",":
                raise MalformedOutput(f"line {sep[2]}: expected ',' or ')', found {show(sep[1])}")


def parse_sql(text: str) -> list[dict[str, Any]]:
    """The rows of llama-bench's ``-o sql`` output, typed by its CREATE TABLE."""
    r = _Reader(text)
    table: str | None = None
    columns: dict[str, str] = {}  # name -> declared type
    rows: list[dict[str, Any]] = []
    while not r.done():
        head = r.take("word")
        if head[1].upper() == "CREATE":
            r.take("word", "TABLE")
            if r.peek_word("IF"):
                for word in ("IF", "NOT", "EXISTS"):
                    r.take("word", word)
            name = r.take("word")[1]
            decl: dict[str, str] = {}
            for entry in r.listing(2):
                if len(entry) != 2 or entry[0][0] != "word" or entry[1][0] != "word":
                    raise MalformedOutput(f"line {head[2]}: a column is not '<name> <type>'")
                if entry[0][1] in decl:
                    raise MalformedOutput(f"line {head[2]}: column {show(entry[0][1])} is declared twice")
                decl[entry[0][1]] = entry[1][1]
            if table is not None and (name != table or decl != columns):
                # CREATE TABLE IF NOT EXISTS keeps the first table: a second, different
                # one would leave the INSERTs meant for it failing in SQLite too.
                raise MalformedOutput(f"line {head[2]}: a second, different table {show(name)} "
                                      "(import one llama-bench run per file)")
            table, columns = name, decl
        elif head[1].upper() == "INSERT":
            r.take("word", "INTO")
            into = r.take("word")
            if table is None or into[1] != table:
                raise MalformedOutput(f"line {into[2]}: INSERT INTO {show(into[1])}, a table not created before")
            names = [e[0][1] if e and e[0][0] == "word" else "" for e in r.listing(1)]
            for n in names:
                if n not in columns:
                    raise MalformedOutput(f"line {into[2]}: {show(n)} is not a column of {show(table)}")
            if len(set(names)) != len(names):
                raise MalformedOutput(f"line {into[2]}: a column is named twice")
            r.take("word", "VALUES")
            values = r.listing(1)
            if len(values) != len(names):
                raise MalformedOutput(f"line {into[2]}: {len(values)} values for {len(names)} columns")
            rows.append({n: _value(n, columns[n], v[0][0], v[0][1])
                         for n, v in zip(names, values, strict=True)})
        else:
            raise MalformedOutput(f"line {head[2]}: {show(head[1])} is not a statement llama-bench prints "
                                  "(only CREATE TABLE and INSERT INTO are read)")
        r.take("punct", ";")
    return rows
