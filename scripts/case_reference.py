"""Write docs/guide/case_reference.md: every key of the LBM and FEM case files, from the pydantic models.

    python scripts/case_reference.py            # rewrite the page
    python scripts/case_reference.py --check    # exit 1 if the page is out of date (tests use this)
"""

from __future__ import annotations

import sys
import typing
from pathlib import Path

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "guide" / "case_reference.md"


def _type_name(tp) -> str:
    origin = typing.get_origin(tp)
    if origin is typing.Literal:
        return " \\| ".join(repr(a).replace("'", '"') for a in typing.get_args(tp))
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        return " or ".join(_type_name(a) for a in typing.get_args(tp) if a is not type(None))
    if origin in (list, tuple):
        args = [a for a in typing.get_args(tp) if a is not Ellipsis]
        return f"{origin.__name__}[{', '.join(_type_name(a) for a in args)}]"
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return "table"
    return getattr(tp, "__name__", str(tp))


def _model_of(tp):
    for a in (tp, *typing.get_args(tp)):
        if isinstance(a, type) and issubclass(a, BaseModel):
            return a
        for b in typing.get_args(a):
            if isinstance(b, type) and issubclass(b, BaseModel):
                return b
    return None


def _constraint(m) -> str:
    for attr, sym in (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<="), ("min_length", "min length"),
                      ("max_length", "max length"), ("pattern", "pattern")):
        v = getattr(m, attr, None)
        if v is not None:
            return f"{sym} {v}"
    return str(m)


def _rows(model, prefix=""):
    for name, f in model.model_fields.items():
        key = prefix + name
        if f.is_required():
            default = "required"
        elif f.default is not PydanticUndefined:
            default = repr(f.default).replace("'", '"')
        else:
            default = "(defaults)"
        desc = f.description or ""
        cons = ", ".join(_constraint(m) for m in f.metadata)
        yield key, _type_name(f.annotation), default, desc + (f" [{cons}]" if cons else "")
        sub = _model_of(f.annotation)
        if sub is not None and sub is not model:
            is_list = typing.get_origin(f.annotation) is list
            yield from _rows(sub, key + ("[]." if is_list else "."))


def render() -> str:
    from hpcsolve.fem.case import FEMCase  # late: the families' case models load when the page is rendered
    from hpcsolve.lbm.case import LBMCase  # late: as above

    out = ["# Case-file reference", "",
           "Generated from the case models by `python scripts/case_reference.py`; do not edit by hand.",
           "Every case file is TOML with `solver = \"lbm\"` or `\"fem\"`; unknown keys are errors. Any value can",
           "be overridden on the command line with `--set key.path=value`.", ""]
    for title, model in (("LBM cases (`solver = \"lbm\"`)", LBMCase), ("FEM cases (`solver = \"fem\"`)", FEMCase)):
        out += [f"## {title}", "", "| key | type | default | meaning |", "|---|---|---|---|"]
        for key, typ, default, desc in _rows(model):
            out.append(f"| `{key}` | {typ} | {default} | {desc.replace('|', '/')} |")
        out.append("")
    return "\n".join(out)


if __name__ == "__main__":
    text = render()
    if "--check" in sys.argv:
        ok = PAGE.exists() and PAGE.read_text() == text
        print("docs/guide/case_reference.md is up to date" if ok else "docs/guide/case_reference.md is out of date: run "
              "python scripts/case_reference.py")
        sys.exit(0 if ok else 1)
    PAGE.write_text(text)
    print(f"wrote {PAGE.relative_to(ROOT)}")
