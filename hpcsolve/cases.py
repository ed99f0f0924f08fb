"""Case files: TOML, validated with pydantic, with ``--set key.path=value`` overrides.

Every problem with a case becomes one :class:`~hpcsolve.errors.CaseError` that names the
field, the value and what is allowed. A case file says which solver family it is for
(``solver = "lbm"`` or ``"fem"``); each family defines its own sections in
``hpcsolve/<family>/case.py`` on top of :class:`CaseBase`.
"""

from __future__ import annotations

import copy
import json
import tomllib
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator

from hpcsolve import backends, precision
from hpcsolve.errors import CaseError

FAMILIES = ("lbm", "fem")


class StrictModel(BaseModel):
    """Base of every case section: unknown keys are errors, values are not silently coerced."""

    model_config = ConfigDict(extra="forbid", strict=False, validate_assignment=True, frozen=False)


class RunSection(StrictModel):
    backend: str = Field("auto", description="auto, numpy, cupy or numba-cuda")
    precision: str = Field("fp64", description="fp64, fp32, fp16s (LBM) or mixed (FEM)")

    @field_validator("backend")
    @classmethod
    def _backend_known(cls, v: str) -> str:
        v = v.lower()
        if v not in backends.CHOICES:
            raise ValueError(f"allowed: {', '.join(backends.CHOICES)}")
        return v

    @field_validator("precision")
    @classmethod
    def _precision_known(cls, v: str) -> str:
        v = v.lower()
        if v not in precision.POLICIES:
            raise ValueError(f"allowed: {', '.join(precision.POLICIES)}")
        return v


class CaseBase(StrictModel):
    solver: str
    name: str = Field(..., min_length=1, max_length=200, pattern=r"^[A-Za-z0-9_.\-]+$",
                      description="short identifier, used for output directory names")
    description: str = ""
    run: RunSection = Field(default_factory=RunSection)

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


def _family_model(family: str):
    if family == "lbm":
        from hpcsolve.lbm.case import LBMCase

        return LBMCase
    if family == "fem":
        from hpcsolve.fem.case import FEMCase

        return FEMCase
    raise CaseError.invalid("solver", family, ", ".join(FAMILIES))


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
    import difflib
    import typing

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
    for err in exc.errors(include_url=False):
        parts = tuple(x for x in err.get("loc", ()) if not (isinstance(x, str) and x.startswith("function-")))
        loc = _format_loc(parts)
        typ = err.get("type", "")
        value = err.get("input")
        msg = err.get("msg", "")
        if msg.startswith("Value error, "):
            msg = msg[len("Value error, "):]
        if typ == "extra_forbidden":
            hint = _nearest_key(model, parts) if model is not None and parts else ""
            text = (f"{loc}: unknown key (value {value!r}){hint or '; check the spelling against the documented keys'}")
        elif typ == "missing":
            text = f"{loc}: required field is missing"
        elif not loc:  # a rule over several fields: the message names them
            text = msg
        else:
            shown = value if not isinstance(value, dict) else "{...}"
            text = f"{loc}: got {shown!r}; {msg}"
        lines.append(text + (_from_set(loc, overrides) if loc else ""))
        if first is None:
            first = (loc, value, msg)
    where = f" in {source}" if source else ""
    head = f"invalid case{where}: " + lines[0] if len(lines) == 1 else f"invalid case{where} ({len(lines)} problems):\n  " + "\n  ".join(lines)
    err = CaseError(head)
    if first:
        err.field, err.value, err.allowed = first
    return err


def parse_case_data(data: dict, *, text: str = "", path: Path | None = None, source: str = "",
                    overrides=()) -> CaseBase:
    if not isinstance(data, dict):
        raise CaseError("a case must be a TOML table")
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
        raise CaseError(f"invalid case{' in ' + source if source else ''}: {exc}") from None
    case._text = text
    case._path = path
    return case


def parse_override(assignment: str) -> tuple[list[str], Any]:
    if "=" not in assignment:
        raise CaseError.invalid("--set", assignment, "key.path=value, e.g. physics.reynolds=400")
    key, raw = assignment.split("=", 1)
    key = key.strip()
    keys = key.split(".")
    if not key or any(not k for k in keys):
        raise CaseError.invalid("--set", assignment, "key.path=value, e.g. physics.reynolds=400")
    raw = raw.strip()
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw  # a bare word: take it as a string (e.g. run.backend=cupy)
    return keys, value


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


def parse_case_text(text: str, overrides: list[str] | tuple[str, ...] = (), *, path: Path | None = None) -> CaseBase:
    source = str(path) if path else "<text>"
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise CaseError(f"{source}: not valid TOML: {exc}") from None
    raw = copy.deepcopy(data)
    for a in overrides:
        apply_override(raw, a)
    case = parse_case_data(raw, text=text, path=path, source=source, overrides=overrides)
    case._overrides = tuple(overrides)
    return case


def load_case(path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> CaseBase:
    """Read, override and validate a case file."""
    p = Path(path)
    if not p.exists():
        raise CaseError.invalid("case", str(path), "a path to an existing .toml case file", why="file not found")
    if p.is_dir():
        raise CaseError.invalid("case", str(path), "a .toml file, not a folder")
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise CaseError.invalid("case", str(path), "a UTF-8 TOML text file", why="not a text file") from None
    return parse_case_text(text, overrides, path=p.resolve())


def case_summary(case: CaseBase) -> dict:
    return json.loads(case.effective_json())
