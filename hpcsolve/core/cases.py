"""Case files: TOML, validated with pydantic, with ``--set key.path=value`` overrides.

Every problem with a case becomes one :class:`~hpcsolve.core.errors.CaseError` that names the
field, the value (cut short if long) and what is allowed. A case file says which solver family it
is for (``solver = "lbm"`` or ``"fem"``); each family defines its own sections in
``hpcsolve/<family>/case.py`` on top of :class:`CaseBase`.

Values are validated strictly, by one rule for every section (:class:`StrictModel`): a number
field takes a TOML number (an integer field an integer), never a string or a boolean; a boolean
field takes true or false; every float is finite. A ``--set`` value is a TOML value (a bare word
is taken as a string). Nesting and dotted keys are bounded before the TOML parser sees them.
"""

from __future__ import annotations

import copy
import difflib
import functools
import importlib
import re
import tomllib
import types
import typing
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator, model_validator

from hpcsolve.core import backends, precision
from hpcsolve.core.errors import CaseError, clip, shown
from hpcsolve.core.safe_io import CASE_FILE_MAX_BYTES, read_text
from hpcsolve.core.toml_shape import MAX_DEPTH, MAX_KEY_PARTS, toml_shape_problem

FAMILIES = ("lbm", "fem")

#: integers beyond this are refused in every field (they no longer fit numpy's int64 arithmetic safely)
MAX_INT = 2**53
#: largest case text parsed
MAX_CASE_CHARS = 16 * 2**20


def _tuple_fields(model: type[BaseModel]) -> frozenset[str]:
    """Fields whose type is a tuple (TOML gives arrays as lists)."""
    names = set()
    for name, f in model.model_fields.items():
        ann = f.annotation
        args = typing.get_args(ann) if typing.get_origin(ann) in (typing.Union, types.UnionType) else (ann,)
        if any(typing.get_origin(a) is tuple for a in args):
            names.add(name)
    return frozenset(names)


class StrictModel(BaseModel):
    """Base of every case section: unknown keys are errors, values are never coerced (a string is
    not a number, 64.0 is not an integer, 'yes' is not a boolean), every float is finite and every
    integer within +-2^53."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False, validate_assignment=True,
                              frozen=False)

    @model_validator(mode="before")
    @classmethod
    def _arrays_as_tuples(cls, data):
        # a TOML array is a list; the fixed-length fields (points, pairs) are tuples
        if isinstance(data, dict):
            names = _tuple_fields_of(cls)
            if any(isinstance(data.get(n), list) for n in names):
                data = {k: tuple(v) if k in names and isinstance(v, list) else v for k, v in data.items()}
        return data

    @field_validator("*", mode="before")
    @classmethod
    def _integers_in_range(cls, v):
        # before the field's own validation: a float field turns an integer literal into the nearest float
        # (9007199254740993 -> 9007199254740992.0), so an after-check would no longer see it
        if _big_integer(v):
            raise ValueError(f"allowed: integer literals of magnitude at most 2^53 = {MAX_INT} (beyond it an "
                             f"integer is not exact as a float; a float field takes a float literal, e.g. 1e16)")
        return v


def _big_integer(v, depth: int = 0) -> bool:
    """Whether ``v``, or an element of a (nested) array ``v``, is an integer (not a boolean) beyond 2^53;
    tables are sections, checked by their own model."""
    if isinstance(v, int) and not isinstance(v, bool):
        return abs(v) > MAX_INT
    if isinstance(v, (list, tuple)) and depth <= MAX_DEPTH:
        return any(_big_integer(x, depth + 1) for x in v)
    return False


#: what an integer field (or any field, for an integer literal) allows, said when a literal is too long to read
_INT_ALLOWED = (f"integer literals of magnitude at most 2^53 = {MAX_INT} (a float field takes a float literal, "
                "e.g. 1e16)")
#: an integer literal (TOML: digits with single underscores between them) longer than Python converts to an int
#: (4,300 digits by default); hex, octal and binary literals have no such limit
_LONG_INTEGER = re.compile(r"(?<![\w.])[+-]?(\d(?:_?\d){%d,})(?![\w.])" % 999)


def _long_integer(text: str) -> tuple[int, str, int] | None:
    """(line number, key as written there with its [table] header, digits) of the first integer literal in TOML
    ``text`` with more than 1,000 digits, or None."""
    m = _LONG_INTEGER.search(text)
    if m is None:
        return None
    head = text[:m.start()]
    header = key = None
    for header in re.finditer(r"^[ \t]*\[\[?[ \t]*([^\]\n]*?)[ \t]*\]", head, re.M):
        pass
    for key in re.finditer(r"^[ \t]*([\w\-.\"' ]+?)[ \t]*=", head, re.M):   # the value's key (or its array's)
        pass
    names = (header.group(1).strip() if header else "",
             key.group(1).strip() if key and (header is None or key.start() > header.start()) else "")
    key = ".".join(p for p in names if p)
    return text.count("\n", 0, m.start()) + 1, key, len(m.group(1).replace("_", ""))


def _long_integer_error(text: str, source: str) -> CaseError:
    """The CaseError of a case ``text`` that ``tomllib`` could not read because of an integer literal longer than
    Python converts (a ValueError of its own, not a TOMLDecodeError), naming the key and the line."""
    found = _long_integer(text)
    if found is None:
        return CaseError(f"{clip(source)}: an integer literal too long to read; allowed: {_INT_ALLOWED}", field="case")
    line, key, digits = found
    return _too_long(key or "case", digits, f"{clip(source)}, line {line}")


def _too_long(field: str, digits: int | None, where: str) -> CaseError:
    got = f"an integer literal of {digits:,} digits" if digits else "an integer literal too long to read"
    return CaseError(f"{got} ({where}); allowed: {_INT_ALLOWED}", field=clip(field, 80), allowed=_INT_ALLOWED)


@functools.cache
def _tuple_fields_of(model: type[BaseModel]) -> frozenset[str]:
    return _tuple_fields(model)


def _one_of(value: str, allowed) -> str:
    """``value`` in lower case when it is one of ``allowed``; else the ValueError pydantic turns into a CaseError."""
    value = value.lower()
    if value not in allowed:
        raise ValueError(f"allowed: {', '.join(allowed)}")
    return value


class RunSection(StrictModel):
    backend: str = Field("auto", description="auto, numpy, cupy or numba-cuda")
    precision: str = Field("fp64", description="fp64, fp32, fp16s or fp16c (LBM) or mixed (FEM)")
    strict_validation: bool = Field(False, description="a value outside its published or analytic reference range "
                                    "(the summary's `validation` verdicts) makes the run exit 3 instead of warning")
    precision_guard: str = Field("warn", description="LBM fp16s/fp16c: what to do when a float32 shadow window shows "
                                 "the 16-bit storage no longer carries the flow: warn, error (exit 3) or off; no effect "
                                 "in other precisions")

    @field_validator("precision_guard")
    @classmethod
    def _guard_known(cls, v: str) -> str:
        return _one_of(v, ("warn", "error", "off"))

    @field_validator("backend")
    @classmethod
    def _backend_known(cls, v: str) -> str:
        return _one_of(v, backends.CHOICES)

    @field_validator("precision")
    @classmethod
    def _precision_known(cls, v: str) -> str:
        return _one_of(v, tuple(precision.POLICIES))


class CompareSection(StrictModel):
    fields: tuple[str, ...] | None = Field(
        None, min_length=1, description="what `hpcsolve compare` judges: field names (e.g. velocity) or scalar "
        "metrics of the run (e.g. drag_coefficient); default: the largest error over every field (--fields overrides)")
    reference: str = Field("auto", description="the configuration every other is judged against, BACKEND/PRECISION "
                           "(e.g. numpy/fp64, cupy/fp64) or auto: fp64 on the fastest usable backend, cross-checked "
                           "against numpy/fp64 on a reduced copy of the case (--reference overrides)")
    judge: typing.Literal["solution", "residual"] | None = Field(
        None, description="FEM: what `hpcsolve compare` judges a run by: solution (its solution error against the "
        "discretisation error, accepted at <= 1/10 of it even where its solve stalled above rtol) or residual "
        "(converged, field error within --tolerance); default: solution where the reference knows its "
        "discretisation error (--judge overrides); LBM cases: residual only")


class CaseBase(StrictModel):
    solver: str
    name: str = Field(..., min_length=1, max_length=200, pattern=r"^[A-Za-z0-9_.\-]+$",
                      description="short identifier, used for output directory names")
    description: str = ""
    run: RunSection = Field(default_factory=RunSection)
    compare: CompareSection = Field(default_factory=CompareSection)

    _text: str = PrivateAttr(default="")
    _path: Path | None = PrivateAttr(default=None)
    _overrides: tuple[str, ...] = PrivateAttr(default=())

    @property
    def text(self) -> str:
        """The case file as written (before overrides)."""
        return self._text

    @property
    def path(self) -> Path | None:
        return self._path

    @property
    def base_dir(self) -> Path:
        """Folder that relative paths in the case (e.g. mesh files) are resolved against."""
        return self._path.parent if self._path is not None else Path.cwd()

    @property
    def overrides(self) -> tuple[str, ...]:
        return self._overrides

    def effective_json(self) -> str:
        """The validated case with every default filled in, as JSON (provenance)."""
        return self.model_dump_json(indent=2)

    def with_overrides(self, *assignments: str) -> "CaseBase":
        """A new, re-validated case with ``key.path=value`` assignments applied."""
        data = self.model_dump(mode="python")
        for a in assignments:
            apply_override(data, a)
        new = parse_case_data(data, text=self._text, path=self._path, overrides=assignments)
        new._overrides = self._overrides + tuple(assignments)
        return new


#: family -> "module:attribute" of its case model (a CaseBase subclass), imported on first use: each family
#: defines its sections in its own package (hpcsolve/<family>/case.py), on top of CaseBase
CASE_MODELS = {"lbm": "hpcsolve.lbm.case:LBMCase", "fem": "hpcsolve.fem.case:FEMCase"}


def _family_model(family: str):
    if family not in CASE_MODELS:
        raise CaseError.invalid("solver", family, ", ".join(FAMILIES))
    module, _, attr = CASE_MODELS[family].partition(":")
    return getattr(importlib.import_module(module), attr)


def _format_loc(loc: tuple) -> str:
    parts = []
    for item in loc:
        if isinstance(item, int):
            parts.append(f"[{item}]")
        else:
            parts.append(("." if parts else "") + str(item))
    return "".join(parts)


def _nearest_key(model, parts: tuple) -> str:
    """' (did you mean `a.b`?)' for an unknown key at ``parts``, from the model's fields there; '' if none is close."""
    def submodel(annotation, depth=0):
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            return annotation
        for t in typing.get_args(annotation) if depth < 8 else ():
            inner = submodel(t, depth + 1)
            if inner is not None:
                return inner
        return None

    node = model
    for name in parts[:-1]:
        if isinstance(name, int):
            continue
        f = getattr(node, "model_fields", {}).get(name)
        node = submodel(f.annotation) if f is not None else None
        if node is None:
            return ""
    names = list(getattr(node, "model_fields", {}))
    close = difflib.get_close_matches(str(parts[-1]), names, n=1, cutoff=0.6)
    if not close:
        return ""
    return f" (did you mean `{_format_loc(tuple(parts[:-1]) + (close[0],))}`?)"


def _from_set(loc: str, overrides) -> str:
    """' (from --set k=v)' when the field at ``loc`` was set (or its table replaced) by an override."""
    for a in reversed(tuple(overrides)):
        key = a.split("=", 1)[0].strip()
        if loc == key or loc.startswith(key + ".") or loc.startswith(key + "[") or key.startswith(loc + "."):
            shown = a if len(a) <= 120 else a[:117] + "..."
            return f" (from --set {shown})"
    return ""


def validation_error_to_case_error(exc: ValidationError, source: str = "", model=None, overrides=()) -> CaseError:
    lines = []
    first = None
    for err in exc.errors(include_url=False)[:20]:
        parts = tuple(x for x in err.get("loc", ()) if not (isinstance(x, str) and x.startswith("function-")))
        loc = clip(_format_loc(parts))
        typ = err.get("type", "")
        value = err.get("input")
        msg = err.get("msg", "")
        if msg.startswith("Value error, "):
            msg = msg[len("Value error, "):]
        if typ == "extra_forbidden":
            hint = _nearest_key(model, parts) if model is not None and parts else ""
            text = f"{loc}: unknown key (value {shown(value)}){hint or '; check the spelling against the documented keys'}"
        elif typ == "missing":
            text = f"{loc}: required field is missing"
        elif not loc:  # a rule over several fields: the message names them
            text = msg
        elif isinstance(value, dict):  # a rule over a section's fields: the message names them
            text = f"{loc}: {msg}"
        else:
            text = f"{loc}: got {shown(value)}; {_allowed(typ, msg)}"
        lines.append(text + (_from_set(loc, overrides) if loc else ""))
        if first is None:
            first = (loc, value, msg)
    where = f" in {clip(source)}" if source else ""
    count = exc.error_count()
    head = (f"invalid case{where}: " + lines[0] if count == 1
            else f"invalid case{where} ({count} problems):\n  " + "\n  ".join(lines)
            + (f"\n  ... and {count - len(lines)} more" if count > len(lines) else ""))
    err = CaseError(head)
    if first:
        err.field, err.value, err.allowed = first
    return err


#: what the strict types allow, said for the pydantic error types whose own message names no type
_STRICT_TYPES = {
    "float_type": "allowed: a TOML number (not a string or a boolean)",
    "int_type": "allowed: a TOML integer (not a float, string or boolean)",
    "bool_type": "allowed: true or false",
    "string_type": "allowed: a TOML string",
    "tuple_type": "allowed: a TOML array",
    "list_type": "allowed: a TOML array",
    "finite_number": "allowed: a finite number (not inf or nan)",
}


def _allowed(typ: str, msg: str) -> str:
    return f"{msg}; {_STRICT_TYPES[typ]}" if typ in _STRICT_TYPES else msg


def nesting_problem(value, limit: int = MAX_DEPTH) -> str | None:
    """Where ``value`` (parsed TOML) nests tables and arrays deeper than ``limit``, or None;
    iterative, so any depth is looked at without recursion."""
    stack = [(value, "", 0)]
    while stack:
        node, where, depth = stack.pop()
        if depth > limit:
            return f"{clip(where.lstrip('.'), 80) or 'the case'} nests tables and arrays more than {limit} deep"
        if isinstance(node, dict):
            stack.extend((v, f"{where}.{k}", depth + 1) for k, v in node.items())
        elif isinstance(node, (list, tuple)):
            stack.extend((v, f"{where}[{i}]", depth + 1) for i, v in enumerate(node))
    return None


def parse_case_data(data: dict, *, text: str = "", path: Path | None = None, source: str = "",
                    overrides=()) -> CaseBase:
    if not isinstance(data, dict):
        raise CaseError("a case must be a TOML table")
    deep = nesting_problem(data)
    if deep:
        raise CaseError(f"invalid case{' in ' + clip(source) if source else ''}: {deep}; allowed: at most "
                        f"{MAX_DEPTH} levels", field="case")
    family = data.get("solver")
    if family is None:
        raise CaseError.invalid("solver", None, ", ".join(FAMILIES), why="required field is missing")
    if family not in FAMILIES:
        raise CaseError.invalid("solver", family, ", ".join(FAMILIES))
    model = _family_model(family)
    try:
        case = model.model_validate(data)
    except ValidationError as exc:
        raise validation_error_to_case_error(exc, source or (str(path) if path else ""), model, overrides) from None
    except (TypeError, OverflowError) as exc:  # e.g. a value pydantic cannot even compare
        raise CaseError(f"invalid case{' in ' + clip(source) if source else ''}: {clip(str(exc))}") from None
    check_compare_reference(case, overrides)
    case._text = text
    case._path = path
    return case


def check_compare_reference(case, overrides=()) -> None:
    """``compare.reference`` is ``auto`` or BACKEND/PRECISION with a precision of the case's family, by the rule
    ``hpcsolve compare`` applies (``compare_reference.parse``): ``validate`` refuses what compare refuses. Whether
    the backend can run here is compare's question (a case may be validated on another machine)."""
    if case.compare.judge == "solution" and case.solver != "fem":
        err = CaseError.invalid("compare.judge", "solution", "residual (or leave compare.judge out) for an LBM case",
                                why="solution judges a FEM run by its discretisation error; an LBM case has none")
        raise CaseError(str(err) + _from_set("compare.judge", overrides), field=err.field, value="solution",
                        allowed="residual")
    value = case.compare.reference
    text = value.strip().lower()
    if text == "auto":
        return
    parts = text.split("/")
    fits = len(parts) == 2 and parts[0].strip() in backends.BACKENDS
    if fits and parts[1].strip() not in precision.names(case.solver):
        fits = False
    if not fits:
        allowed = (f"auto, or BACKEND/PRECISION with BACKEND one of {', '.join(backends.BACKENDS)} and PRECISION one "
                   f"of {', '.join(precision.names(case.solver))} (e.g. numpy/fp64)")
        err = CaseError.invalid("compare.reference", value, allowed)
        raise CaseError(str(err) + _from_set("compare.reference", overrides), field=err.field, value=value,
                        allowed=allowed)


#: a --set value TOML cannot parse is taken as a string if it is one plain word (run.backend=cupy)
_BARE_WORD = re.compile(r"[^\s\"'\[\]{}=#,]+")


def parse_override(assignment: str) -> tuple[list[str], Any]:
    """``key.path=value`` -> (["key", "path"], value). The value is a TOML value; a plain word that is
    not one is a string; anything else (text after a value, an unclosed array) is refused."""
    def refuse(why):
        return CaseError.invalid("--set", assignment, "key.path=value with one TOML value, e.g. physics.reynolds=400",
                                 why=why)

    if not isinstance(assignment, str) or "=" not in assignment:
        raise refuse("no '=' in it")
    key, raw = assignment.split("=", 1)
    key = key.strip()
    keys = key.split(".", MAX_KEY_PARTS)
    if len(keys) > MAX_KEY_PARTS:
        raise refuse(f"the key has more than {MAX_KEY_PARTS} parts")
    keys = [k.strip() for k in keys]
    if not key or any(not k for k in keys):
        raise refuse("an empty key or key part")
    raw = raw.strip()
    try:
        parsed = tomllib.loads(f"v = {raw}")
    except tomllib.TOMLDecodeError:
        parsed = None
    except ValueError:   # an integer literal longer than Python converts (sys.get_int_max_str_digits)
        found = _long_integer(raw)
        raise _too_long(".".join(keys), found[2] if found else None, f"from --set {clip(assignment, 60)}") from None
    except RecursionError:
        raise refuse(f"the value nests arrays or tables more than {MAX_DEPTH} deep") from None
    if parsed is None:
        if not _BARE_WORD.fullmatch(raw):
            raise refuse("the value is not a TOML value (strings with spaces or symbols need quotes)")
        return keys, raw
    if set(parsed) != {"v"}:
        raise refuse("text follows the value (one value per --set)")
    deep = nesting_problem(parsed["v"])
    if deep:
        raise refuse(f"the value nests arrays or tables more than {MAX_DEPTH} deep")
    return keys, parsed["v"]


def apply_override(data: dict, assignment: str) -> None:
    keys, value = parse_override(assignment)
    node = data
    for i, k in enumerate(keys[:-1]):
        nxt = node.get(k)
        if nxt is None:
            nxt = node[k] = {}
        if not isinstance(nxt, dict):
            raise CaseError.invalid("--set", assignment, "a path through tables",
                                    why=f"{'.'.join(keys[:i + 1])} is a value, not a table")
        node = nxt
    node[keys[-1]] = value


def parse_case_text(text: str, overrides: list[str] | tuple[str, ...] = (), *, path: Path | None = None,
                    before_validation=None) -> CaseBase:
    """The case of TOML ``text`` with ``overrides`` applied, validated. ``before_validation(data)``: called with the
    parsed, overridden table before the family's model validates it (``hpcsolve.run.prepare`` starts the GPU's probe
    beside the validation from it)."""
    source = str(path) if path else "<text>"
    if len(text) > MAX_CASE_CHARS:
        raise CaseError.invalid("case", clip(source), f"a case text of at most {MAX_CASE_CHARS:,} characters",
                                why=f"it has {len(text):,}")
    shape = toml_shape_problem(text)
    if shape:
        raise CaseError(f"{clip(source)}: {shape}", field="case")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise CaseError.invalid("case", clip(source), "a TOML case file", why=f"not valid TOML: {clip(str(exc))}") from None
    except ValueError:   # an integer literal longer than Python converts (sys.get_int_max_str_digits)
        raise _long_integer_error(text, source) from None
    except RecursionError:
        raise CaseError(f"{clip(source)}: tables and arrays nest too deeply; allowed: at most {MAX_DEPTH} levels",
                        field="case") from None
    raw = copy.deepcopy(data) if overrides else data
    for a in overrides:
        apply_override(raw, a)
    if before_validation is not None:
        before_validation(raw)
    case = parse_case_data(raw, text=text, path=path, source=source, overrides=overrides)
    case._overrides = tuple(overrides)
    return case


def load_case(path: str | Path, overrides: list[str] | tuple[str, ...] = (), *,
              before_validation=None) -> CaseBase:
    """Read, override and validate a case file.

    Parameters
    ----------
    path : str or Path
        A TOML case file (a regular file; a pipe or device is refused unopened). Its ``solver`` field ("lbm",
        "fem") chooses the model it is validated against (``CASE_MODELS``).
    overrides : sequence of str
        ``["key.path=value", ...]``, as ``--set`` on the command line (values in TOML syntax), applied before
        validation.
    before_validation : callable, optional
        As in :func:`parse_case_text`.

    Returns
    -------
    CaseBase
        The family's case model (``LBMCase`` or ``FEMCase``): every section with its defaults filled in, lattice
        or mesh parameters derived when run.

    Raises
    ------
    CaseError
        One message naming the field, the value and what is allowed: a missing or unreadable file, TOML syntax,
        an unknown key, a value out of range, a bad override.

    Examples
    --------
    >>> import tempfile
    >>> from pathlib import Path
    >>> from hpcsolve import CaseError, load_case
    >>> path = Path(tempfile.mkdtemp()) / "cavity.toml"
    >>> _ = path.write_text('''
    ... solver = "lbm"
    ... name = "cavity"
    ... [physics]
    ... reynolds = 100.0
    ... [lattice]
    ... resolution = 32
    ... [boundaries]
    ... top = "moving_wall"
    ... [time]
    ... end_time = 2.0
    ... ''')
    >>> case = load_case(path, ["lattice.resolution=16", "run.precision='fp32'"])
    >>> case.solver, case.lattice.resolution, case.run.precision, case.boundaries.left
    ('lbm', 16, 'fp32', 'wall')
    >>> try:
    ...     load_case(path, ["run.precision='fp8'"])
    ... except CaseError as exc:
    ...     print(exc.field)
    run.precision
    """
    text = read_text(path, "case", "a path to an existing .toml case file (UTF-8 text)",
                     max_bytes=CASE_FILE_MAX_BYTES)
    # a byte-order mark (what some editors put before UTF-8 text) is not TOML: tomllib would only say
    # "Invalid statement (at line 1, column 1)"
    return parse_case_text(text.removeprefix("\ufeff"), overrides, path=Path(path).resolve(),
                           before_validation=before_validation)
