"""The inputs of a comparison, checked before anything runs: the ``--out`` folder (``check_out``, and the earlier
comparison's files retired before the first run writes), the backends, precisions, tolerance and repeats, and
the preconditioner dimension of a FEM case; and the configurations to run, the reference first."""

from __future__ import annotations

import re
import typing
from pathlib import Path

from hpcsolve.core import backends as backends_mod
from hpcsolve.core import outdir
from hpcsolve.core import precision as precision_mod
from hpcsolve.core.cases import CaseBase, load_case
from hpcsolve.core.errors import CaseError, HpcsolveError, OutputError
from hpcsolve.report.comparison import REFERENCE

#: largest --tolerance: a relative error of 1 is a run off by the size of the reference (1e300 made the Pareto plot's
#: log axis overflow inside matplotlib)
TOLERANCE_MAX = 1.0
REPEATS_LIMIT = 1000         # largest --repeats: each is a whole run of the case, per configuration


COMPARISON_FILES = outdir.COMPARISON_FILES
COMPARISON_PLOTS = ("pareto", "drift", "residuals")       # plots/<name>.png of Comparison.write


def check_out(out: str | Path, overwrite: bool = False) -> None:
    """Refuse, naming ``--out``, a comparison folder that is not a usable folder, or that already holds a
    comparison (its files, or a run folder with a result or checkpoints) unless ``overwrite``: a second comparison into the
    same folder used to replace the first one's files without being asked."""
    # a file, a dangling link, no permission, a run's result: one error naming --out
    outdir.check(out, overwrite=True, comparison=True)
    out = Path(out)
    if overwrite or not out.is_dir():
        return
    try:
        held = [n for n in COMPARISON_FILES if (out / n).exists()]
        held += sorted(p.name + "/" for p in out.iterdir()
                       if p.is_dir() and _run_folder_name(p.name)
                       and (outdir.has_result(p) or outdir.has_checkpoints(p)))
    except OSError as exc:
        raise OutputError.invalid("--out", str(out), "a folder this user can read",
                                  why=f"cannot look at it ({exc.strerror})") from None
    if held:
        names = ", ".join(held[:4]) + (f" and {len(held) - 4} more" if len(held) > 4 else "")
        raise OutputError.invalid("--out", str(out), "a new folder, or --overwrite (overwrite=True) to replace the "
                                  "comparison there", why=f"already holds a comparison's files ({names})")


def _retire_comparison(out: Path) -> None:
    """An earlier comparison's own files go before the first run replaces one of its run folders: a comparison
    stopped part way must not leave comparison.json / .md (and its plots) describing runs that are no longer there
    (the new files are written when every run is done). A comparison refused before its first run keeps them."""
    for name in COMPARISON_FILES + tuple(f"plots/{p}.png" for p in COMPARISON_PLOTS):
        try:
            (out / name).unlink()
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise OutputError.invalid("--out", str(out), "a folder whose comparison files can be replaced",
                                      why=f"cannot remove {name} ({exc.strerror})") from None


def _run_folder_name(name: str) -> bool:
    """``name`` is one compare gives a run's folder: <backend>-<precision>[-<preconditioner>]."""
    for b in backends_mod.BACKENDS:
        for p in precision_mod.POLICIES:
            if name == f"{b}-{p}" or (name.startswith(f"{b}-{p}-") and name[len(b) + len(p) + 2:].isalpha()):
                return True
    return False


PRECONDITIONERS_FIELD = "--preconditioners"


def preconditioner_names() -> tuple[str, ...]:
    """The names ``solve.preconditioner`` of a FEM case accepts (from the case model, so they stay in step)."""
    try:
        from hpcsolve.fem.case import SolverSection   # late: start-up cost (1.8 s, SciPy)

        names = typing.get_args(SolverSection.model_fields["preconditioner"].annotation)
    except (ImportError, KeyError, AttributeError):   # pragma: no cover - the model always has the field
        names = ()
    if not names:   # pragma: no cover - a model that validates the name another way
        from hpcsolve.fem.linalg.precond import NAMES   # late: as SolverSection above

        names = ("auto",) + tuple(NAMES)
    return tuple(str(n) for n in names)


def _check_preconditioners(case: CaseBase, preconditioners) -> list[str] | None:
    """The preconditioner dimension, checked before anything runs: names known (lower case), none twice, a FEM
    case only."""
    if preconditioners is None:
        return None
    if isinstance(preconditioners, str):
        preconditioners = [preconditioners]
    if case.solver != "fem":
        raise CaseError(f"{PRECONDITIONERS_FIELD} applies to FEM cases only: the preconditioner is a setting of "
                        f"the FEM linear solve (solve.preconditioner), and {case.name} is an {case.solver.upper()} "
                        f"case (solver = {case.solver!r}); leave {PRECONDITIONERS_FIELD} out",
                        field=PRECONDITIONERS_FIELD, value=list(preconditioners), allowed="FEM cases only")
    allowed = preconditioner_names()
    names: list[str] = []
    for p in preconditioners:
        if not isinstance(p, str) or p.strip().lower() not in allowed:
            raise CaseError.invalid(PRECONDITIONERS_FIELD, p, ", ".join(allowed))
        if p.strip().lower() in names:
            raise _repeated(PRECONDITIONERS_FIELD, p, names[names.index(p.strip().lower())])
        names.append(p.strip().lower())
    if not names:
        raise CaseError.invalid(PRECONDITIONERS_FIELD, [], ", ".join(allowed), why="no preconditioner given")
    return names


def _repeated(option: str, value, first) -> CaseError:
    """A name given twice to ``option``: two rows of one configuration, the second writing over the first's run
    folder (``first``: how it was given the first time)."""
    same = "" if str(first) == str(value) else f" (the same as {first!r})"
    return CaseError.invalid(option, value, "each name once",
                             why=f"{value!r} is given more than once{same}: the configuration would run twice and "
                                 "its second run replace the first's folder")


def _no_repeats(option: str, values, key) -> None:
    """Refuse (``_repeated``) a value of ``option`` whose ``key`` (its normalized name) an earlier one has."""
    seen: dict = {}
    for v in values:
        k = key(v)
        if k in seen:
            raise _repeated(option, v, seen[k])
        seen[k] = v


def _with_preconditioner(case: CaseBase, name: str) -> CaseBase:
    """``case`` with solve.preconditioner = ``name``, through the path ``--set`` takes."""
    try:
        return case.with_overrides(f"solve.preconditioner={name}")
    except CaseError as exc:
        raise CaseError(f"{name!r}: {exc}", field=PRECONDITIONERS_FIELD, value=name) from None


def checked_inputs(case, backends, precisions, tolerance, repeats, overrides, as_names):
    """The case (loaded, or validated again with ``overrides``), backends and precisions as names (None: every
    one usable here), with the tolerance and repeats checked; CaseError naming the option otherwise.
    ``as_names``: ``hpcsolve.run.as_names``."""
    overrides = as_names(overrides, "overrides")
    backends = None if backends is None else as_names(backends, "backends")
    precisions = None if precisions is None else as_names(precisions, "precisions")
    for name, value in (("backends", backends), ("precisions", precisions)):
        if value == []:           # used to run the reference alone, as if nothing had been asked
            raise CaseError.invalid(name, value, f"at least one name (None: every {name[:-1]} usable here)")
    if not isinstance(case, CaseBase):
        case = load_case(case, overrides)
    else:       # validated again as a whole (edits in Python skip the rules across fields)
        case = case.with_overrides(*overrides)
    checked_tolerance(tolerance)
    if case.solver == "lbm":    # a lattice the stability rule knows to blow up: refused before the reference runs
        from hpcsolve.lbm.case import derive              # late: the LBM family's modules, for LBM cases only
        from hpcsolve.lbm.runner import refuse_unstable   # late: as above
        refuse_unstable(case, derive(case), "a lattice the stability rule accepts (compare has no --force: a "
                        "lattice past the rule is run alone, with hpcsolve run --force)")
    if repeats is not None and (isinstance(repeats, bool) or not isinstance(repeats, int)
                                or not 1 <= repeats <= REPEATS_LIMIT):
        raise CaseError.invalid("--repeats", repeats, f"an integer in [1, {REPEATS_LIMIT}]",
                                why="each repeat is a whole timed run of the case, for every configuration"
                                if isinstance(repeats, int) and repeats > REPEATS_LIMIT else None)
    return case, backends, precisions


def checked_tolerance(tolerance) -> float:
    """``--tolerance`` as a float, a number from 0 to TOLERANCE_MAX; CaseError naming it otherwise."""
    if isinstance(tolerance, bool) or not (isinstance(tolerance, (int, float)) and 0 <= tolerance <= TOLERANCE_MAX):
        raise CaseError.invalid("--tolerance", tolerance, f"a number from 0 to {TOLERANCE_MAX:g} (a relative error: "
                                f"{TOLERANCE_MAX:g} accepts a run off by as much as the reference itself)")
    return float(tolerance)


def default_backends(case: CaseBase | None = None) -> tuple[list[str], list[str]]:
    """(the backends a comparison runs when none are named, the others usable here): NumPy (the CPU reference: its
    rows are run, or skipped by the budget with their predicted time) and the backend ``hpcsolve run`` takes for
    ``case`` (its ``run.backend``; ``auto``, or one not usable here: ``backends.resolve("auto")``, CuPy, else
    Numba-CUDA). The question is which precision to run a case in, on the backend it will run on; a second GPU
    backend would run every precision again for a backend comparison (``hpcsolve bench lbm``/``fem`` answer that),
    which doubled the 2D-2 comparison at D = 80 on the H200 (docs/guide/compare.md). Named with ``--backends``, every one
    runs."""
    usable = [b for b in backends_mod.BACKENDS if backends_mod.probe(b).available and not backends_mod.probe(b).simulator]
    named = getattr(getattr(case, "run", None), "backend", None)
    try:
        runs_on = backends_mod.resolve(named, field="run.backend").name
    except HpcsolveError:           # the case names a backend this machine cannot run: compare on the automatic one
        runs_on = backends_mod.resolve(None).name
    chosen = {REFERENCE[0], runs_on}
    return [b for b in usable if b in chosen], [b for b in usable if b not in chosen]


def configurations(case: CaseBase, backends, precisions, pc_names, reference: tuple = REFERENCE) -> tuple[list, dict]:
    """The configurations (backend, precision, preconditioner) to run, the ``reference`` ones first (default CPU
    FP64; the reference is the first of them that runs), and the case of each preconditioner (None: the case's own
    setting); every name checked (backends asked for by name must not all be unusable here)."""
    family = case.solver
    explicit = backends is not None
    if backends is None:
        backends = default_backends(case)[0]
    for b in backends:
        if str(b) not in backends_mod.BACKENDS:
            raise CaseError.invalid("--backends", b, ", ".join(backends_mod.BACKENDS))
    backends = [str(b) for b in backends]   # Backend objects or names: compared and labelled by name
    if explicit:
        _no_repeats("--backends", backends, str)
    if explicit:
        # asked for by name: when none of them can run here, the comparison would hold the reference alone
        why = {b: backends_mod.probe(b).reason for b in backends if not backends_mod.probe(b).available}
        if backends and len(why) == len(backends):
            usable = [b for b in backends_mod.BACKENDS if backends_mod.probe(b).available]
            raise CaseError.invalid("--backends", " ".join(backends), "backends usable here: " + ", ".join(usable),
                                    why="none of them can run here (" + "; ".join(f"{b}: {r}" for b, r in why.items())
                                        + ")")
    if precisions is None:
        precisions = precision_mod.names(family)
    for p in precisions:
        precision_mod.get_precision(p, family=family, field="--precisions")
    _no_repeats("--precisions", precisions, lambda p: precision_mod.get_precision(p, family=family).name)
    # one case per preconditioner, validated now: a name the case model refuses stops before any run
    if pc_names is None:
        pc_cases: dict = {None: case}
        ref_pcs: list = [None]
    else:
        pc_cases = {name: _with_preconditioner(case, name) for name in pc_names}
        own = getattr(getattr(case, "solve", None), "preconditioner", None)
        ref_pcs = ([own] if own in pc_names else []) + [n for n in pc_names if n != own]
    reference = tuple(reference)
    configs = [(*reference, pc) for pc in ref_pcs]
    configs += [(b, p, pc) for b in backends for p in precisions for pc in pc_cases if (b, p) != reference]
    return configs, pc_cases


#: the fields a run's result holds that a comparison judges (floating fields, less compare.SKIP_FIELDS), known from
#: the case: by family and, for FEM, problem kind (tests/test_messages_text.py runs each kind to keep them in step)
CASE_FIELDS = {("lbm", None): ("velocity", "pressure", "density_lattice", "vorticity"),
               ("fem", "poisson"): ("u",), ("fem", "elasticity"): ("displacement",)}


def case_fields(case: CaseBase) -> tuple[str, ...]:
    """The fields a run of ``case`` will hold that ``--fields`` can name (without running it)."""
    kind = getattr(getattr(case, "problem", None), "kind", None) if case.solver == "fem" else None
    return CASE_FIELDS.get((case.solver, kind), ())


def check_fields_known(case: CaseBase, fields) -> list[str]:
    """Refuse (naming ``--fields``), before anything runs, a name of ``fields`` that is a field of another kind of
    case (velocity for a FEM case, u for an elasticity case): its runs cannot have it. Returns the names left to be
    checked once the reference has run: those that are not fields of the case, taken as scalar metrics (which
    metrics a run reports depends on the run: its validation, its solver, its precision)."""
    have = case_fields(case)
    other = {f for names in CASE_FIELDS.values() for f in names} - set(have)
    wrong = [f for f in fields or () if f in other]
    if wrong:
        raise CaseError.invalid("--fields", " ".join(wrong), "fields of this case: " + ", ".join(have)
                                + ", or scalar metrics of its runs",
                                why=f"{case.name} is a {case.solver.upper()} case whose runs have no field "
                                    + " or ".join(repr(f) for f in wrong))
    left = [f for f in fields or () if f not in have]
    unknown = [f for f in left if not _could_be_metric(case.solver, f)]
    if unknown:
        raise CaseError.invalid("--fields", " ".join(unknown), "fields of this case: " + ", ".join(have)
                                + ", or scalar metrics its runs report (e.g. " + ", ".join(EXAMPLE_METRICS.get(
                                    case.solver, ())) + ")",
                                why=f"no {case.solver.upper()} run reports a field or metric of that name")
    return left


#: metrics named in the error of an unknown ``--fields`` name, by family (a few; summary.json lists them all)
EXAMPLE_METRICS = {"lbm": ("drag_coefficient", "lift_coefficient", "strouhal"),
                   "fem": ("probe_value", "error_l2", "tip_displacement")}
_WORDS: dict = {}


def _could_be_metric(family: str, name: str) -> bool:
    """Whether a run of ``family`` could report a scalar metric called ``name``, known without running one: every
    word of it (split at "_") is a word of the family's source code or of hpcsolve.core (metric names are written
    there, whole or, as ``f"{key}_window_mean"``, in parts). A misspelt name ("velocty", "drag_coeficient") is
    refused before anything runs; a name that passes is checked against the reference's metrics once it has run."""
    if family not in _WORDS:
        root = Path(__file__).resolve().parents[1]
        words: set = set()
        for folder in (root / family, root / "core"):
            for path in folder.rglob("*.py"):
                words.update(re.findall(r"[a-z0-9]+", path.read_text(encoding="utf-8", errors="replace").lower()))
        _WORDS[family] = words
    parts = [w for w in name.lower().split("_") if w]
    return bool(parts) and all(w in _WORDS[family] for w in parts)


def fields_note(case: CaseBase, fields) -> str | None:
    """The dry run's line on ``--fields`` names it cannot check without a run (taken as scalar metrics)."""
    left = check_fields_known(case, fields)
    if not left:
        return None
    return (f"--fields {' '.join(left)}: not a field of this case (its fields: {', '.join(case_fields(case))}); "
            "taken as scalar metrics, checked once the reference has run (a name the reference does not report is "
            "refused then)")
