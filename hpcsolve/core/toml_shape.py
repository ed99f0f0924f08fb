"""The shape of a case file's TOML text, looked at before ``tomllib`` parses it: ``tomllib`` recurses into nested
arrays and tables, and handles a dotted key in time quadratic in its parts (20,000 parts: minutes); a linear scan
(:func:`toml_shape_problem`) refuses both first. Used by ``hpcsolve.core.cases``."""

from __future__ import annotations

import re

#: deepest nesting of tables and arrays in a case (the deepest real one is 5: boundary.dirichlet[0].where.circle)
MAX_DEPTH = 16
#: most parts of a dotted key (``a.b.c``), in a case file or a --set key
MAX_KEY_PARTS = 16

_TOML_TOKEN = re.compile(r'"""|\'\'\'|["\'#\n\[\]{}=,.]')
_TOML_STRING_END = {
    '"""': re.compile(r'(?:[^\\]|\\.)*?"""', re.S),   # multi-line basic string
    "'''": re.compile(r".*?'''", re.S),               # multi-line literal string
    '"': re.compile(r'(?:[^"\\\n]|\\.)*"'),            # basic string
    "'": re.compile(r"[^'\n]*'"),                      # literal string
}


def toml_shape_problem(text: str) -> str | None:
    """Why ``text`` nests deeper than MAX_DEPTH or has a dotted key of more than MAX_KEY_PARTS parts
    (with the line), or None. Strings and comments are skipped; anything else is left to tomllib."""
    stack: list[str] = []        # "array" or "table" (inline) for each open bracket
    in_key, in_header, dots, line = True, False, 0, 1
    pos = 0
    while True:
        m = _TOML_TOKEN.search(text, pos)
        if m is None:
            return None
        tok, pos = m.group(), m.end()
        if tok in _TOML_STRING_END:
            end = _TOML_STRING_END[tok].match(text, pos)
            if end is None:
                return None          # unterminated: tomllib says where
            line += text.count("\n", pos, end.end())
            pos = end.end()
        elif tok == "#":
            nl = text.find("\n", pos)
            pos = len(text) if nl < 0 else nl
        elif tok == "\n":
            line += 1
            if not stack:
                in_key, in_header, dots = True, False, 0
        elif tok == "[":
            if not stack and in_key and not in_header and not text[text.rfind("\n", 0, m.start()) + 1:m.start()].strip():
                in_header, dots = True, 0                     # a [table] or [[array of tables]] header
            elif not in_header:
                stack.append("array")
                in_key = False
        elif tok == "]":
            if in_header:
                in_key = False
            elif stack:
                stack.pop()
        elif tok == "{":
            stack.append("table")
            in_key, dots = True, 0
        elif tok == "}":
            if stack:
                stack.pop()
            in_key = False
        elif tok == "=":
            in_key = False
        elif tok == ",":
            if stack and stack[-1] == "table":
                in_key, dots = True, 0
        elif tok == "." and (in_key or in_header):
            dots += 1
            if dots >= MAX_KEY_PARTS:
                return f"line {line}: a dotted key of more than {MAX_KEY_PARTS} parts; allowed: at most {MAX_KEY_PARTS}"
        if len(stack) > MAX_DEPTH:
            return f"line {line}: arrays and tables nest more than {MAX_DEPTH} deep; allowed: at most {MAX_DEPTH}"
