"""Command line: ``hpcsolve run | validate | compare | info | bench``.

Exit codes: 0 success, 2 bad input (case, arguments, unavailable backend), 3 numerical failure
(blow-up, breakdown), 130 interrupted.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import importlib
import json
import os
import select
import signal
import sys
import time
import traceback
import warnings
from pathlib import Path

from hpcsolve.core.version import __version__
from hpcsolve.core import backends, heartbeat, interrupts, outdir, parallel, precision
from hpcsolve.core.errors import CaseError, HpcsolveError


#: options that are gone, and what replaces them (said in argparse's error for them)
REMOVED_OPTIONS = {"--in-place": "--streaming in-place"}


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse's own usage errors: exit 2 with one line
        for old, new in REMOVED_OPTIONS.items():
            if message.startswith("unrecognized arguments:") and old in message.split():
                message += f" ({old} was removed: use {new})"
        if _rank() == 0:   # under mpiexec every rank parses the same arguments: rank 0 says it once
            self.print_usage(sys.stderr)
            _say(f"hpcsolve: error: {message}")
        raise SystemExit(2)


def _folder_arg(text: str) -> Path:
    # an empty value (an unset shell variable, say) would otherwise mean the working directory
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty path; give a folder")
    return Path(text)


def _say(line: str) -> None:
    """One line on stderr in one write, newline included (under mpiexec the ranks' streams are merged: a message
    and its newline written apart ran into another rank's line), flushed at once."""
    sys.stderr.write(line.rstrip("\n") + "\n")
    sys.stderr.flush()


def _add_case_args(p, optional: bool = False, single: bool = True):
    """The case and its options; ``single=False`` (compare) hides --backend/--precision from the help: compare
    takes --backends/--precisions, and says so (a note) when given the singular ones."""
    if optional:
        p.add_argument("case", nargs="?", help="path to a .toml case file (see cases/); "
                       "with --resume, optional (the checkpoint's case is used)")
    else:
        p.add_argument("case", help="path to a .toml case file (see cases/)")
    p.add_argument("--backend", choices=backends.CHOICES,
                   help="override run.backend (default: the case's, else auto)" if single else argparse.SUPPRESS)
    p.add_argument("--precision", choices=list(precision.POLICIES),
                   help="override run.precision" if single else argparse.SUPPRESS)
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY.PATH=VALUE",
                   help="override any case value, e.g. --set physics.reynolds=400 (repeatable)")


def _add_compare_parser(sub) -> None:
    """The ``compare`` command and its options."""
    p = sub.add_parser("compare", help="accuracy vs speed of a case across backends x precisions (x preconditioners, "
                       "FEM), vs an FP64 reference (fastest usable backend, cross-checked against NumPy)")
    _add_case_args(p, single=False)
    p.add_argument("--backends", nargs="+", choices=backends.BACKENDS,
                   help="backends to compare (default: numpy and the backend hpcsolve run takes, cupy else numba-cuda; "
                        "name both GPU backends to compare them too)")
    p.add_argument("--precisions", nargs="+", choices=list(precision.POLICIES),
                   help="precisions to compare (default: every one the solver family supports)")
    p.add_argument("--preconditioners", nargs="+", metavar="NAME",
                   help="FEM cases: run every backend x precision with each of these solve.preconditioner values "
                        "(auto, none, jacobi, mg, amg); default: the case's own setting only")
    p.add_argument("--tolerance", type=float, default=None,
                   help="largest acceptable relative L2 field error vs the FP64 reference, 0 to 1 (default 1e-3)")
    p.add_argument("--fields", nargs="+", metavar="NAME", default=None,
                   help="fields or scalar metrics the error is judged on (e.g. velocity, or a metric such as "
                        "drag_coefficient); default: the largest error over every field")
    p.add_argument("--out", type=_folder_arg, help="output folder (default: results/<case>-compare-<time>)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace a comparison already in --out (its comparison files and the run folders it "
                        "writes again; folders of configurations it does not run stay)")
    p.add_argument("--no-warmup", action="store_true",
                   help="skip the untimed warm-up run of each configuration, so its first run is timed (start-up, "
                        "compilation and caches included); default: one untimed run first")
    p.add_argument("--repeats", type=int, default=None,
                   help="timed runs per configuration, at most 1000 (default: at least 3, up to 10 while the "
                        "spread is above 5%%; exactly 3 where the first timed run takes 10 s or more)")
    p.add_argument("--quiet", action="store_true",
                   help="no progress bars or progress lines (the table, the results folder and errors are still "
                        "printed)")
    p.add_argument("--reference", default=None, metavar="BACKEND/PRECISION",
                   help="the configuration every other is judged against, e.g. numpy/fp64 or cupy/fp64; default: the "
                        "case's compare.reference, else auto: fp64 on the fastest usable backend, cross-checked "
                        "against numpy/fp64 on a reduced copy of the case (docs/guide/compare.md)")
    p.add_argument("--budget", type=float, default=None, metavar="SECONDS",
                   help="skip (as a row saying why) every configuration whose run is predicted to take longer; a "
                        "reference predicted longer is an error before anything runs")
    p.add_argument("--dry-run", action="store_true",
                   help="print the reference, its cross-check and every configuration's predicted time, then stop")
    p.add_argument("--judge", choices=("solution", "residual"), default=None,
                   help="FEM: judge a run by its solution error against the discretisation error (solution: "
                        "accepted at <= 1/10 of it, even if its solve stalled above rtol) or by convergence and "
                        "--tolerance (residual); default: the case's compare.judge, else solution where the "
                        "reference knows its discretisation error")
    p.add_argument("--wide", action="store_true",
                   help="print the wide table (every column: throughput, memory, residuals, each field's error); "
                        "default: the compact one (the wide one is always in comparison.json)")
    p.add_argument("--rejudge", type=_folder_arg, metavar="DIR",
                   help="judge the comparison saved in DIR again (with --tolerance, --fields, --judge), running "
                        "nothing; written to --out (default DIR/rejudged; DIR itself only with --overwrite)")
    for action in p._actions:           # the case is not needed with --rejudge (the saved comparison names it)
        if action.dest == "case":
            action.nargs, action.required, action.default = "?", False, None


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="hpcsolve", description="GPU LBM and FEM solvers with accuracy-vs-speed reporting.")
    parser.add_argument("--version", action="version", version=f"hpcsolve {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    p = sub.add_parser("run", help="run a case file and write result.h5, result.xdmf, summary.json, plots/")
    _add_case_args(p, optional=True)
    p.add_argument("--resume", type=_folder_arg, metavar="DIR",
                   help="continue the run in DIR from its newest checkpoint (results are written there; "
                        "give --no-plots again if wanted: run options are not kept in the checkpoint)")
    p.add_argument("--force", action="store_true",
                   help="run a lattice the stability rule knows to blow up (validate lists it under warnings); "
                        "with --resume: continue even if the case, backend, precision or version differ "
                        "(another precision continues from the checkpoint's state, rounded to the new storage)")
    p.add_argument("--out", type=_folder_arg, help="output folder (default: results/<case>-<backend>-<precision>-<time>)")
    p.add_argument("--overwrite", action="store_true", help="replace a result already in --out")
    p.add_argument("--quiet", action="store_true", help="no progress bar and no summary table")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    p.add_argument("--dry-run", action="store_true", help="print the derived parameters and memory, then stop")

    p = sub.add_parser("validate", help="check a case file (and --set overrides) without running it")
    _add_case_args(p)
    p.add_argument("--json", action="store_true", help="print the derived parameters as JSON")

    _add_compare_parser(sub)

    p = sub.add_parser("info", help="backends usable here and why not, devices, package versions")
    p.add_argument("--json", action="store_true")

    p = sub.add_parser("bench", help="benchmarks (GPU kernels vs copy bandwidth, CPU references)")
    p.add_argument("family", choices=("lbm", "fem"))
    p.add_argument("--out", type=_folder_arg, default=None,
                   help="folder for bench JSON and markdown (default: $OUT or results/bench/); an earlier "
                   "bench_<family>.json / .md there is replaced, other files are kept")
    p.add_argument("--sizes", type=int, nargs="+", help="problem sizes (grid edge / unknowns per edge); lbm: the NumPy "
                   "reference runs at 256 (the speedup baseline) unless no GPU backend is timed")
    p.add_argument("--backends", nargs="+", help="backends to time (default: every GPU backend usable here)")
    p.add_argument("--precisions", nargs="+", help="precisions to time")
    p.add_argument("--quick", action="store_true", help="small sizes and few repetitions (smoke test)")
    p.add_argument("--mg-sizes", type=int, nargs="+", help="fem: unknowns per edge of the multigrid time-to-solution "
                   "table (2^k - 1 halves to the end; default GPU 255 1023 2047 4095, CPU 127 255 511)")
    p.add_argument("--no-multigrid", action="store_true", help="fem: skip the multigrid and robustness tables")
    p.add_argument("--no-robustness", action="store_true", help="fem: skip the robustness table (anisotropy, jumps, Cook)")
    p.add_argument("--no-whole-run", action="store_true", help="fem: skip the whole-run table (the phases of one "
                   "hpcsolve run of each FEM case: mesh, assembly, BCs, set-up, solve, post, reference, output)")
    p.add_argument("--whole-run-cases", nargs="+", help="fem: the whole-run table's cases: shipped FEM case names "
                   "(e.g. poisson_manufactured) or FEM case files (default: every FEM case in cases/)")
    p.add_argument("--whole-run-levels", type=int, nargs="+", help="fem: the whole-run table's mesh sizes as "
                   "refinement levels: 0 the case's mesh, k its cells halved k times (mesh.nx x 2^k, or mesh.refine "
                   "+ k for a mesh file; default 0 1 2, --quick 0)")
    p.add_argument("--whole-run-repeats", type=int, help="fem: timed runs per whole-run row after a warm-up "
                   "(median; default 3, --quick 1)")
    p.add_argument("--streaming", choices=("auto", "two-buffer", "in-place"), default=None,
                   help="lbm: the GPU steppers' streaming, as a case's lattice.streaming (default auto: in place where "
                   "the one-array lattice fits the L2 cache, fp32/fp64); replaces the removed --in-place")
    return parser


def _print_kv(title: str, mapping: dict) -> None:
    print(title)
    width = max((len(str(k)) for k in mapping), default=0)
    for k, v in mapping.items():
        if isinstance(v, float):
            v = f"{v:.6g}"
        elif isinstance(v, (dict, list)):
            v = json.dumps(v)
        print(f"  {str(k):<{width}}  {v}")


def _check_run_options(args) -> None:
    """Options of ``run`` that cannot go together: an error (exit 2) before anything is read or written, rather
    than one of them silently ignored."""
    if args.resume is None:
        return
    if args.dry_run:
        raise CaseError.invalid("--dry-run", True, "not with --resume",
                                why="--resume continues the run and writes into its folder; a dry run writes nothing "
                                    "(use --dry-run with the case file)")
    if args.out is not None and os.path.realpath(args.out) != os.path.realpath(args.resume):   # (no loop error)
        raise CaseError.invalid("--out", str(args.out), f"the --resume folder ({args.resume}) or nothing",
                                why="a resumed run writes its results into the folder it resumes")
    if args.overwrite:
        raise CaseError.invalid("--overwrite", True, "not with --resume",
                                why="a resumed run continues the result in its folder")


def cmd_run(args) -> int:
    from hpcsolve import run as runmod   # late: start-up cost (1.1 s, the solvers)

    if args.case is None and args.resume is None:
        raise CaseError.invalid("case", None, "a case file, or --resume DIR", why="no case given")
    _check_run_options(args)
    if _rank() != 0:                  # one rank reports and writes: the others step quietly
        args.quiet = True
    if args.resume is not None:
        case, backend, policy, ckpt = runmod.prepare_resume(args.resume, args.case, args.backend, args.precision,
                                                            args.overrides, args.force)
        if not args.quiet:
            print(f"hpcsolve: resuming {case.name} from step {ckpt.step} ({ckpt.path}) on {backend} in {policy.name}",
                  file=sys.stderr)
        result = runmod.run_case(case, backend, policy, progress=not args.quiet, plots=not args.no_plots,
                                 resume=args.resume, force=args.force)
        return _report(args, case, result, args.resume)
    if args.dry_run:
        info = runmod.describe(args.case, args.backend, args.precision, args.overrides, estimate=True)
        _print_kv("dry run (nothing written; the estimate probed the case: a short timed run, a coarser copy "
                  "for a steady stop, or the whole run of a small FEM system):", info)
        runmod.check_memory(info, info["backend"])   # a run that would not fit: exit 2 naming the field
        return 0
    case, backend, policy = runmod.prepare(args.case, args.backend, args.precision, args.overrides)
    comm = parallel.world()
    reserved = args.out is None and comm.Get_rank() == 0
    if reserved:                      # rank 0 creates (reserves) the default folder
        args.out = runmod.default_out_dir(case, backend, policy)
    out = comm.bcast(args.out, root=0)   # rank 0's name
    try:
        runmod.check_out_dir(out, args.overwrite)
        if not args.quiet:
            print(f"hpcsolve: running {case.name} ({case.solver}) on {backend} in {policy.name} -> {out}",
                  file=sys.stderr)
        result = runmod.run_case(case, backend, policy, out=out, progress=not args.quiet, overwrite=args.overwrite,
                                 plots=not args.no_plots, force=args.force)
    except BaseException:
        if reserved:                  # refused before it wrote anything: the reserved folder goes again
            outdir.remove_unused(out)
        raise
    return _report(args, case, result, out)


def _report(args, case, result, out) -> int:
    """The summary table and where the results are; exit 3 for a run that blew up or did not converge, and under
    ``run.strict_validation`` for a value outside its reference range (run_case warned about each one)."""
    failed = result.status in ("blew_up", "not_converged")
    invalid = bool(case.run.strict_validation and result.validation_failed)
    if _rank() != 0:                  # rank 0 reports (and wrote the results) for every rank
        return 3 if failed or invalid else 0
    if not args.quiet:
        _print_kv(f"{case.name}: {result.status}" + (f" ({result.message})" if result.message else ""),
                  result.console_rows())
    plots = ", plots/" if (Path(out) / "plots").is_dir() else ""
    print(f"results in {out}/ (result.h5, result.xdmf, summary.json{plots})")
    if failed:
        _say(f"hpcsolve: error: {case.name}: {result.status.replace('_', ' ')}: {result.message}")
        return 3
    if invalid:
        from hpcsolve.core.verdicts import failure_text   # late: with the run's modules

        _say(f"hpcsolve: error: {failure_text(case.name, result.validation)}")
        return 3
    return 0


def cmd_validate(args) -> int:
    from hpcsolve import run as runmod   # late: start-up cost (1.1 s, the solvers)

    info = runmod.describe(args.case, args.backend, args.precision, args.overrides, check=True)
    if args.json:
        print(json.dumps(info, indent=2, default=str))
    else:
        _print_kv(f"{args.case}: valid", info)
    return 0


def cmd_compare(args) -> int:
    from hpcsolve.core.cases import load_case   # late: start-up cost (0.3 s, pydantic)
    from hpcsolve.report.compare import DEFAULT_TOLERANCE, compare   # late: start-up cost (1.1 s, the solvers)
    from hpcsolve.report.compare_inputs import check_out, fields_note   # late: start-up cost (with compare)

    if args.backend or args.precision:
        _say("hpcsolve: note: compare uses --backends/--precisions; --backend/--precision are ignored")
    if args.rejudge is not None:
        return _rejudge(args)
    if args.case is None:
        raise CaseError.invalid("case", None, "a path to a .toml case file (or --rejudge DIR: a saved comparison)")
    case = load_case(args.case, args.overrides)
    tol = DEFAULT_TOLERANCE if args.tolerance is None else args.tolerance
    if args.dry_run:                    # the plan and its predicted times, nothing run or written
        from hpcsolve.report.compare import plan   # late: as compare above
        the_plan = plan(case, args.backends, args.precisions, tol, preconditioners=args.preconditioners,
                        reference=args.reference, budget=args.budget, warmup=not args.no_warmup, repeats=args.repeats,
                        fields=args.fields, judge=args.judge)
        print("\n".join(f"compare: {line}" for line in the_plan.lines()))
        note = fields_note(case, args.fields if args.fields is not None else case.compare.fields)
        if note:        # names a dry run cannot check: the reference's metrics are known once it has run
            print(f"compare: {note}")
        return 0
    if args.out is not None:   # unusable, or holding a comparison without --overwrite: exit 2 before any run
        check_out(args.out, args.overwrite)
        out = args.out
    else:
        out = outdir.new_folder(Path("results") / f"{case.name}-compare-{_dt.datetime.now():%Y%m%d-%H%M%S}")
    try:
        comp = compare(case, args.backends, args.precisions, tol, out=out, progress=not args.quiet,
                       warmup=not args.no_warmup, repeats=args.repeats, preconditioners=args.preconditioners,
                       overwrite=args.overwrite, fields=args.fields, reference=args.reference, budget=args.budget,
                       judge=args.judge)
    except BaseException:
        if args.out is None:              # the default folder reserved above: removed again while still unused
            outdir.remove_unused(out)
        raise
    print(comp.table(wide=args.wide))
    print(f"results in {out}/ (comparison.md, comparison.json, plots/, one folder per run)")
    if comp.reference_failed:           # nobody could be judged: a failed comparison, not a success
        _say(f"hpcsolve: error: {case.name}: failed reference: {comp.reference_failed}; no run is judged against it")
        return 3
    return 0


def _rejudge(args) -> int:
    """``compare --rejudge DIR``: the saved comparison judged again, nothing run (hpcsolve.report.compare_rejudge)."""
    from hpcsolve.report.compare_rejudge import command   # late: start-up cost (with compare)

    return command(args)


def cmd_info(args) -> int:
    rows = [backends.probe(n) for n in backends.BACKENDS]
    auto = backends.resolve("auto")
    data = {
        "hpcsolve": __version__,
        "auto_backend": auto.name,
        "backends": {r.name: {"available": r.available, "detail": r.reason} for r in rows},
        "precisions": {p.name: {"families": sorted(p.families), "description": p.description}
                       for p in precision.POLICIES.values()},
        "packages": backends.package_versions(),
    }
    if args.json:
        print(json.dumps(data, indent=2))
        return 0
    print(f"hpcsolve {__version__}")
    print("backends:")
    for r in rows:
        print(f"  {r.name:<11} {'usable' if r.available else 'not usable':<11} {r.reason}")
    print(f"  auto        -> {auto}")
    print("precisions:")
    for p in precision.POLICIES.values():
        print(f"  {p.name:<6} {'/'.join(sorted(p.families)):<8} {p.description}")
    print("packages:")
    for k, v in data["packages"].items():
        print(f"  {k:<13} {v}")
    return 0


def cmd_bench(args) -> int:
    if getattr(args, "streaming", None) is not None and args.family != "lbm":
        raise CaseError.invalid("--streaming", args.streaming, "bench lbm only", why="streaming is an LBM option")

    try:
        mod = importlib.import_module(f"hpcsolve.report.bench_{args.family}")
    except ModuleNotFoundError as exc:
        if exc.name == f"hpcsolve.report.bench_{args.family}":
            raise HpcsolveError(f"bench {args.family}: not available in this version") from None
        raise
    return mod.main(args)


def _interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def _set_handlers(handler) -> dict:
    """Set the stop signals (SIGINT, SIGTERM, SIGHUP unless inherited ignored: ``interrupts.STOP_SIGNALS``) to
    ``handler`` (a callable, SIG_IGN, or a dict by signal as returned here) and SIGUSR1 to the status line (ignored
    with SIG_IGN); returns the previous. SIGQUIT keeps its default (docs/design/reliability.md "Signals")."""
    previous = interrupts.set_handlers(handler)
    if _SIGUSR1 is not None and not isinstance(handler, dict):
        try:
            previous[_SIGUSR1] = signal.signal(_SIGUSR1, interrupts.status_line if callable(handler) else handler)
        except ValueError:  # not the main thread: signals stay as they are
            pass
    return previous


_SIGUSR1 = getattr(signal, "SIGUSR1", None)


SIGPIPE_EXIT = 141   # 128 + SIGPIPE: what a shell reports for a command whose output reader went away


def _stdout_reader_gone() -> bool:
    """Whether stdout is a pipe whose reader has closed it (poll reports an error on its write end)."""
    try:
        fd = sys.stdout.fileno()
        poller = select.poll()
        poller.register(fd, select.POLLOUT)
        return any(ev & select.POLLERR for _, ev in poller.poll(0))
    except (AttributeError, OSError, ValueError):   # no poll, or stdout is no file: nothing to say
        return False


_python_formatwarning = warnings.formatwarning


def _format_warning(message, category, filename, lineno, line=None) -> str:
    """hpcsolve's own warnings as one line in the form of its errors; other packages' as Python shows them."""
    if category is UserWarning and Path(__file__).resolve().parent in Path(filename).resolve().parents:
        return f"hpcsolve: warning: {message}\n"
    return _python_formatwarning(message, category, filename, lineno, line)


def _forget_interrupts_seen_by_exec() -> None:
    """Keep the exit code decided here. A KeyboardInterrupt (Ctrl-C, or SIGTERM's handler) raised inside an ``exec``
    or ``eval`` of a string (a dataclass or namedtuple made in a late import) is marked unhandled by CPython even when
    it is caught, and ``python -m hpcsolve.cli`` then ended by SIGINT at its exit (status -2 to a parent process)
    instead of with 130; a string run to its end clears the mark."""
    exec("None")  # noqa: S102 - a constant string: running one is what clears the mark


def _escape_unencodable() -> None:
    """Text the terminal's encoding cannot show (a non-ASCII --out with PYTHONIOENCODING=ascii or an ASCII locale)
    is printed with backslash escapes (``\\xe9``) instead of ending the command with UnicodeEncodeError after its
    result was written; the bytes of files are not affected."""
    for stream in (sys.stdout, sys.stderr):
        if getattr(stream, "errors", None) == "strict" and hasattr(stream, "reconfigure"):
            with contextlib.suppress(AttributeError, ValueError, OSError):
                stream.reconfigure(errors="backslashreplace")


def main(argv=None) -> int:
    _escape_unencodable()
    parser = build_parser()
    args = parser.parse_args(argv)
    handler = {"run": cmd_run, "validate": cmd_validate, "compare": cmd_compare, "info": cmd_info, "bench": cmd_bench}[args.command]
    # SIGTERM and SIGHUP end a command like Ctrl-C (exit 130; a run stops gracefully, see hpcsolve.core.interrupts),
    # SIGUSR1 prints a status line;
    # once the outcome is decided, late signals are ignored so they cannot turn it into a kill mid-exit
    previous = _set_handlers(_interrupt)
    if argv is None:   # the command line: a warning is one line in the form of the errors, not a source line
        warnings.formatwarning = _format_warning
    if _rank() != 0:   # under mpiexec every rank meets the same warnings: rank 0 says them once
        warnings.filterwarnings("ignore", category=UserWarning, module=r"hpcsolve(\.|$)")
    try:
        code, message = _execute(handler, args)
    except BaseException:
        # an unexpected exception: called from Python (tests, notebooks), the caller's handlers come back
        _set_handlers(previous if argv is not None else signal.SIG_IGN)
        if argv is None:
            _end_ranks(1, None, unexpected=True)
        raise
    _set_handlers(signal.SIG_IGN)
    if argv is None:
        _forget_interrupts_seen_by_exec()
    if code == SIGPIPE_EXIT and argv is None:
        # stdout's reader is gone: what is still buffered (and flushed at interpreter exit) goes nowhere
        with contextlib.suppress(OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    if argv is None:
        _end_ranks(code, message)      # says the message (once, under mpiexec)
    else:                              # called from Python (tests, notebooks): put the caller's handlers back
        if message:
            _say(message)
        _set_handlers(previous)
    return code


#: exit codes every rank of a run reaches together (the run's own outcome: done, not converged / blown up,
#: interrupted): a rank with one of these waits for rank 0, which may still be writing the results
SHARED_EXIT_CODES = (0, 3, 130)
RANKS_WAIT_S = 10.0     # how long a failed rank waits for the others before it ends the job


def _rank() -> int:
    try:
        return parallel.world().Get_rank()
    except Exception:   # noqa: BLE001 (no usable MPI: the error was reported already)
        return 0


def _end_ranks(code: int, message: str | None, unexpected: bool = False) -> None:
    """Say ``message`` (the command's error line, or None) and, under ``mpiexec -n N`` (N > 1), end the ranks
    together. A rank meets the others in a barrier; when they do not all come (a rank failed alone, e.g. rank 0
    could not claim the output folder, while the others wait in a halo exchange), it ends the whole job with its
    exit code after RANKS_WAIT_S (MPI Abort) instead of leaving them waiting for ever. A rank whose code is the
    run's shared outcome waits as long as it takes, so that rank 0 finishes writing. An unexpected exception ends
    the job at once (its traceback first).

    The message is said once: rank 0 says its own at once; another rank says its own (``[rank r]`` first) only
    when it ends the job alone, and otherwise rank 0 says, after the barrier, those of other ranks that differ
    from its own. Every rank meeting the same error (a bad case, a refused option) prints one line, not N."""
    try:
        comm = parallel.world()
    except Exception:   # noqa: BLE001 (no usable MPI: nothing to coordinate)
        comm = None
    if comm is None or parallel.ranks(comm) < 2:
        if message:
            _say(message)
        return
    rank = comm.Get_rank()
    if rank == 0 and message:
        _say(message)
    sys.stdout.flush()
    if unexpected:
        traceback.print_exc()
        sys.stderr.flush()
        comm.Abort(code or 1)
    sys.stderr.flush()
    patient = rank != 0 and code in SHARED_EXIT_CODES
    request = comm.Ibarrier()
    deadline = time.monotonic() + RANKS_WAIT_S
    while not request.Test():
        if not patient and time.monotonic() > deadline:
            if rank != 0 and message:     # it fails alone: rank 0 cannot say why
                _say(f"[rank {rank}] {message}")
            comm.Abort(code or 1)
        time.sleep(0.005)
    seen = comm.gather(message, root=0)   # every rank is here: rank 0 says what the others met and it did not
    if rank == 0:
        for r, other in enumerate(seen[1:], start=1):
            if other and other != message:
                _say(f"[rank {r}] {other}")


def _one_process_only(args) -> None:
    """Under ``mpiexec -n N`` (N > 1) only ``hpcsolve run`` (not ``--dry-run``) works on the ranks; the other
    commands would run N times side by side (and their collectives would not match)."""
    n = parallel.ranks(parallel.world())
    if n > 1 and (args.command != "run" or getattr(args, "dry_run", False)):
        what = "run --dry-run" if args.command == "run" else args.command
        raise CaseError.invalid("ranks", n, "1 (one process) for hpcsolve " + what,
                                why=f"hpcsolve {what} runs as one process; under mpiexec use hpcsolve run")


def _execute(handler, args) -> tuple[int, str | None]:
    """The command's exit code and the one line to print on stderr (None when it succeeded)."""
    try:
        _one_process_only(args)
        # a progress line at least every 10 s (compare prints its own per configuration; info is instant)
        quiet = getattr(args, "quiet", False) or args.command in ("compare", "info") or _rank() != 0
        label = " ".join(str(x) for x in (args.command, getattr(args, "case", None) or getattr(args, "family", ""))
                         if x)
        with heartbeat.Heartbeat(label, enabled=not quiet):
            return handler(args), None
    except HpcsolveError as exc:
        label = "interrupted" if exc.exit_code == 130 else "error"
        return exc.exit_code, f"hpcsolve: {label}: {exc}"
    except KeyboardInterrupt:
        return 130, "hpcsolve: interrupted"
    except MemoryError:
        return 2, "hpcsolve: error: out of host memory; reduce the problem size"
    except BrokenPipeError:
        # the reader of stdout went away (`hpcsolve validate CASE | head`): the exit code is a shell's for SIGPIPE,
        # and main() sends the rest of stdout nowhere; a broken pipe elsewhere is an error like any other
        if _stdout_reader_gone():
            return SIGPIPE_EXIT, None
        raise


if __name__ == "__main__":
    raise SystemExit(main())
