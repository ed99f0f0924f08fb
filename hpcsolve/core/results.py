"""Result: fields, time series, metrics, timings and provenance of one run; and its writers.

Output folder of a run::

    result.h5      fields (final and at output times), series, metrics, provenance, case text; the validation
                   verdicts in the group ``validation``: one subgroup per judged value, its verdict as attributes
                   (value, range, verdict, by, by_relative, reference; hpcsolve.core.verdicts)
    result.xdmf    the final fields in result.h5 as one XDMF grid (ParaView, meshio.read; :func:`write_xdmf`)
    result_series.xdmf  the snapshots as a temporal XDMF collection (ParaView; meshio.xdmf.TimeSeriesReader), where
                   the run kept snapshots
    summary.json   metrics, timings, derived parameters, provenance (machine-readable)
    plots/*.png    family-specific plots

A result is first written into a staging folder beside the files (every disk write checked), then renamed into place,
and the marker ``manifest.json`` comes last: it names the result's files and the run id that result.h5 and summary.json
carry too. A folder without the marker is incomplete (a run killed while writing); a failed write (a full disk) leaves
the previous result and the checkpoints as they were.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import math
import os
import shutil
import tempfile
import uuid
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from hpcsolve.core.errors import CaseError, OutputError
from hpcsolve.core.interrupts import deferred
from hpcsolve.core.outdir import (JOURNAL_SUFFIX, MARKER, PLOT_DIR, PREVIOUS_PREFIX, STAGING_PREFIX, SUMMARY_MAX_BYTES,
                                  manifest_files)
from hpcsolve.core.safe_io import FILE_MODE, fsync_folder, open_h5, read_json, write_atomic, write_h5_atomic
from hpcsolve.core.verdicts import console_rows as verdict_rows, outside
from hpcsolve.core.xdmf import SERIES_XDMF, XDMF_POINTS_MAX, write_xdmf, write_xdmf_series

#: 2: fields of a structured grid up to XDMF_POINTS_MAX points stored with one row per grid point (``grid_shape``
#: attribute: (ny, nx)), and the grid's points and quadrilaterals in ``grid/points``, ``grid/cells``, so that readers of
#: unstructured XDMF (meshio) read them; 2-component vectors padded to 3 carry ``components`` = 2
H5_LAYOUT_VERSION = 2


@dataclass
class StructuredGrid:
    """Cell-centred uniform 2D grid; field arrays have shape (ny, nx[, ncomp])."""

    nx: int
    ny: int
    spacing: float = 1.0                   # physical length of one cell
    origin: tuple[float, float] = (0.0, 0.0)  # position of the centre of cell (0, 0)
    unit: str = "lattice"

    def coordinates(self) -> tuple[np.ndarray, np.ndarray]:
        """(x, y): the cell centres along each axis (lengths nx, ny); field[j, i] sits at (x[i], y[j])."""
        x = self.origin[0] + self.spacing * np.arange(self.nx)
        y = self.origin[1] + self.spacing * np.arange(self.ny)
        return x, y

    @property
    def explicit(self) -> bool:
        """Whether result files store this grid's points and cells (:data:`XDMF_POINTS_MAX`)."""
        return self.nx * self.ny <= XDMF_POINTS_MAX

    def points_and_cells(self) -> tuple[np.ndarray, np.ndarray]:
        """(points (nx ny, 2) float64 in row-major (ny, nx) order, quadrilaterals (ncells, 4) int32 between them,
        counter-clockwise): the grid as an unstructured mesh of its cell centres."""
        x, y = self.coordinates()
        X, Y = np.meshgrid(x, y)
        points = np.stack([X.ravel(), Y.ravel()], axis=1)
        j, i = np.divmod(np.arange((self.nx - 1) * (self.ny - 1), dtype=np.int64), max(self.nx - 1, 1))
        n0 = j * self.nx + i
        cells = np.stack([n0, n0 + 1, n0 + 1 + self.nx, n0 + self.nx], axis=1)
        return points, cells.astype(np.int32 if points.shape[0] < 2**31 else np.int64)


@dataclass
class TriangleMesh:
    """Unstructured simplex mesh (named after its first kind): nodal fields (npoints[, ncomp]); ``triangles`` the
    cells of ``cell_type`` (``hpcsolve.core.xdmf.CELL_TYPES``: linear or quadratic triangles, tetrahedra)."""

    points: np.ndarray      # (npoints, 2 | 3) float64
    triangles: np.ndarray   # (ncells, nodes per cell) int
    cell_type: str = "triangle"

    def coordinates(self) -> tuple[np.ndarray, np.ndarray]:
        """(x, y) of the nodes (length npoints each): field[k] sits at (x[k], y[k])."""
        return self.points[:, 0], self.points[:, 1]


@dataclass
class Snapshot:
    time: float
    step: int
    fields: dict[str, np.ndarray]


@dataclass
class Result:
    case_name: str
    solver: str                      # "lbm" | "fem"
    backend: str
    precision: str
    grid: StructuredGrid | TriangleMesh | None = None
    fields: dict[str, np.ndarray] = field(default_factory=dict)       # final fields (host arrays)
    snapshots: list[Snapshot] = field(default_factory=list)
    series: dict[str, np.ndarray] = field(default_factory=dict)       # 1D time series / histories
    metrics: dict[str, Any] = field(default_factory=dict)             # JSON-able numbers and strings
    derived: dict[str, Any] = field(default_factory=dict)             # derived parameters (tau, dt, ...)
    timings: dict[str, float] = field(default_factory=dict)
    provenance: dict[str, Any] = field(default_factory=dict)
    status: str = "completed"        # completed | converged | not_steady | not_converged | blew_up | interrupted |
    #   accurate_to_discretisation (FEM: missed rtol, error negligible against the mesh; hpcsolve.fem.judge)
    message: str = ""
    case_text: str = ""
    case_json: str = ""
    plotter: Callable[["Result", Path], list[Path]] | None = None
    #: {value name: {"value", "range", "verdict", "by", "by_relative", "reference"}}: the run's values against their
    #: published ranges or analytic error bounds (hpcsolve.core.verdicts; made by hpcsolve.run); {} without a reference
    validation: dict[str, dict] = field(default_factory=dict)

    def __post_init__(self):
        self.backend = str(self.backend)     # a Backend object is recorded by its name
        self.precision = str(self.precision)

    @property
    def validation_failed(self) -> bool:
        """Whether a verdict is outside its range (the status stays what the run was; ``hpcsolve run`` exits 3 for
        it under ``run.strict_validation``)."""
        return bool(outside(self.validation))

    def summary(self) -> dict:
        return {
            "case": self.case_name,
            "solver": self.solver,
            "backend": self.backend,
            "precision": self.precision,
            "status": self.status,
            "message": self.message,
            "derived": _jsonable(self.derived),
            "metrics": _jsonable(self.metrics),
            "validation": _jsonable(self.validation),
            "timings": _jsonable(self.timings),
            "provenance": _jsonable(self.provenance),
        }

    def console_rows(self) -> dict:
        """The run's summary table for a reader (``hpcsolve run`` prints it; summary.json keeps every value as
        it is): the derived parameters (``steps`` as ``planned_steps``), the metrics and the timings
        (``time_``-prefixed), without empty rows, with a nested multigrid ``preconditioner_info`` as a few rows of
        levels, sizes, complexity and set-up (:func:`preconditioner_rows`), and a probe value shown once; then one
        ``verdict_<name>`` row per validation verdict (value, inside/outside its range, by how much, the reference),
        which replace the bare published ranges (``reference_c_D`` = [5.57, 5.59] and the like)."""
        rows = {("planned_steps" if k == "steps" else k): v for k, v in self.derived.items()}
        for k, v in self.metrics.items():
            if k == "preconditioner_info" and isinstance(v, dict):
                rows.update(preconditioner_rows(v))
            elif k == "probe_u" and v == self.metrics.get("probe_value"):
                continue                  # an older result's duplicate of probe_value
            elif self.validation and k.startswith("reference_") and isinstance(v, (list, tuple)):
                continue                  # a published range: its verdict row says it
            else:
                rows[k] = v
        rows.update(verdict_rows(self.validation))
        rows.update({f"time_{k}": v for k, v in self.timings.items()})
        return {k: v for k, v in rows.items() if v not in ("", None, [], {})}

    def write(self, out_dir: str | Path, plots: bool = True) -> dict[str, Path]:
        """Write result.h5, result.xdmf, summary.json, plots and, last, the marker into ``out_dir``.

        A signal during the write only requests a stop; a failed write raises OutputError and leaves
        the folder's earlier result and checkpoints as they were."""
        out = Path(out_dir)
        with deferred():
            try:
                out.mkdir(parents=True, exist_ok=True)
                return _write_folder(self, out, plots)
            except OSError as exc:
                raise OutputError.invalid(
                    "--out", str(out), "a folder with free space that this user can write",
                    why=f"cannot write the result ({exc.strerror or exc}); the earlier result and "
                        f"checkpoints in it are kept") from None


def preconditioner_rows(info: dict) -> dict:
    """A multigrid's ``preconditioner_info`` (about 1,000 characters of JSON) as a few readable rows: its levels
    and their unknowns, the complexities, the set-up time and the cycles; summary.json keeps the whole object."""
    rows_ = info.get("rows") or []
    kinds = info.get("level_kinds") or []
    out = {"preconditioner_levels": info.get("levels"),
           "preconditioner_unknowns_per_level": " > ".join(f"{r:,}" for r in rows_) if rows_ else None,
           "preconditioner_level_kinds": ", ".join(map(str, kinds)) if kinds else None,
           "preconditioner_hierarchy": " ".join(str(info[k]) for k in ("hierarchy", "smoother") if info.get(k)),
           "preconditioner_operator_complexity": info.get("operator_complexity"),
           "preconditioner_grid_complexity": info.get("grid_complexity"),
           "preconditioner_setup_s": info.get("setup_time_s"),
           "preconditioner_cycles": info.get("cycles")}
    return {k: v for k, v in out.items() if v not in ("", None)}


def human_duration(seconds: float) -> str:
    """'14469.6' seconds as '4 h 01 min', '95' as '1 min 35 s', '2.5' as '2.5 s' (beside the seconds a table
    prints, for a reader)."""
    if not isinstance(seconds, (int, float)) or not math.isfinite(seconds) or seconds < 0:
        return str(seconds)
    if seconds < 60:
        return f"{seconds:.2g} s" if seconds < 10 else f"{seconds:.0f} s"
    minutes, secs = divmod(int(round(seconds)), 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes + (secs >= 30), 60)
    if hours < 48:
        return f"{hours} h {minutes:02d} min"
    return f"{hours / 24:.1f} days"


def _write_folder(result: Result, out: Path, plots: bool) -> dict[str, Path]:
    """Stage every file, then rename them into ``out``; the marker is removed first and written last."""
    run_id = uuid.uuid4().hex
    stage = out / f"{STAGING_PREFIX}{run_id}"
    stage.mkdir()
    try:
        names = ["result.h5"]
        write_h5(result, stage / "result.h5", run_id=run_id)
        if result.grid is not None and (result.fields or result.snapshots):
            write_xdmf(result, stage / "result.xdmf", h5_name="result.h5")
            names.append("result.xdmf")
            if result.snapshots:
                write_xdmf_series(result, stage / SERIES_XDMF, h5_name="result.h5")
                names.append(SERIES_XDMF)
        if plots and result.plotter is not None:
            (stage / PLOT_DIR).mkdir()
            try:
                names += [f"{PLOT_DIR}/{Path(p).name}" for p in result.plotter(result, stage / PLOT_DIR)]
            except OSError:
                raise
            except Exception as exc:  # noqa: BLE001 - a figure matplotlib cannot draw must not lose the result

                warnings.warn(f"plots skipped: {type(exc).__name__}: {exc}", stacklevel=2)
                shutil.rmtree(stage / PLOT_DIR, ignore_errors=True)
        summary = result.summary()
        summary["run_id"] = run_id
        summary["files"] = _file_keys(names)
        names.append("summary.json")
        write_json(summary, stage / "summary.json")
        manifest = {"run_id": run_id, "status": result.status, "case": result.case_name,
                    "written": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                    "files": {n: (stage / n).stat().st_size for n in names}}
        write_json(manifest, stage / MARKER)
        if any(n.startswith(f"{PLOT_DIR}/") for n in names):
            (out / PLOT_DIR).mkdir(exist_ok=True)
        stale = _stale_files(out, names)     # read from the earlier marker before it goes
        # commit: renames only; without the marker the folder reads as incomplete meanwhile
        (out / MARKER).unlink(missing_ok=True)
        for n in names:
            os.replace(stage / n, out / n)
        for p in stale:
            p.unlink(missing_ok=True)
        os.replace(stage / MARKER, out / MARKER)
    finally:
        shutil.rmtree(stage, ignore_errors=True)

    fsync_folder(out)
    files = {key: out / n for key, n in _file_keys(names).items()}
    files["marker"] = out / MARKER
    return files


def _file_keys(names: list[str]) -> dict[str, str]:
    """{"h5": "result.h5", "xdmf": ..., "plot0": "plots/...", "summary": ...} for the written names."""
    fixed = {"result.h5": "h5", "result.xdmf": "xdmf", SERIES_XDMF: "xdmf_series", "summary.json": "summary"}
    plots = [n for n in names if n not in fixed]
    return {**{fixed[n]: n for n in names if n in fixed}, **{f"plot{i}": n for i, n in enumerate(plots)}}


def _stale_files(out: Path, names: list[str]) -> list[Path]:
    """Files of an earlier result in ``out`` that this one does not have (its xdmf, the plots its marker names);
    files hpcsolve did not write (a plot of the user's own in plots/) stay."""
    stale = [out / n for n in ("result.xdmf", SERIES_XDMF) if n not in names]
    stale += [out / n for n in manifest_files(out)
              if n.startswith(f"{PLOT_DIR}/") and n not in names and (out / n).is_file()]
    return stale


def read_result_folder(out_dir: str | Path, field: str = "--out") -> dict:
    """The summary of a complete result folder, checked against its marker: every file the marker
    names exists with its size, and result.h5 and summary.json carry the marker's run id. Raises
    OutputError naming ``field`` (the argument that gave the folder) for an incomplete or inconsistent folder."""
    out = Path(out_dir)

    def bad(why):
        return OutputError.invalid(field, str(out), "a complete result folder", why=why)

    def checked(read, name, **kw):
        try:
            return read(out / name, field, f"a result folder whose {name} is a regular file", **kw)
        except CaseError as exc:        # a pipe, a device, a link loop, too large: named, never opened
            raise bad(f"{name}: {str(exc).partition(': ')[2]}") from None

    try:
        if not (out / MARKER).exists() and not (out / MARKER).is_symlink():
            raise FileNotFoundError(MARKER)
        manifest = checked(read_json, MARKER, max_bytes=1 << 20)
    except FileNotFoundError:
        if any(out.glob(f"{PREVIOUS_PREFIX}*{JOURNAL_SUFFIX}")):
            raise bad(f"no {MARKER}: an --overwrite run into it stopped before it finished, and the earlier result "
                      "is set aside there (.previous-*); the next hpcsolve run or compare into this folder (or "
                      "hpcsolve run --resume on it) puts it back (a checkpoint of the stopped run is no result: it "
                      "is removed then)") from None
        raise bad(f"no {MARKER}: the run that wrote it did not finish writing") from None
    for name, size in manifest["files"].items():
        p = out / name
        if not p.is_file() or p.stat().st_size != size:
            raise bad(f"{name} is missing or not the one {MARKER} names")
    summary = checked(read_json, "summary.json", max_bytes=SUMMARY_MAX_BYTES)
    try:
        with open_h5(out / "result.h5", field, "a result folder whose result.h5 is a regular file") as f:
            h5_run = f.attrs.get("run_id")
    except CaseError as exc:
        raise bad(f"result.h5: {str(exc).partition(': ')[2]}") from None
    if not (summary.get("run_id") == _text(h5_run) == manifest["run_id"]):
        raise bad("result.h5, summary.json and the marker come from different runs")
    return summary


# ----------------------------------------------------------------------------------------------
# helpers

def _floats(obj):
    """summary.json's "nan" / "inf" / "-inf" strings (JSON has no such numbers: :func:`_jsonable`) as floats again."""
    if isinstance(obj, dict):
        return {k: _floats(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_floats(v) for v in obj]
    return float(obj) if obj in ("nan", "inf", "-inf") else obj


def _text(v) -> str:
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)


def _jsonable(obj):
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return _jsonable(obj.tolist())
    if isinstance(obj, (np.floating, float)):
        v = float(obj)
        return v if math.isfinite(v) else str(v)
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (np.bool_,)):
        return bool(obj)
    if isinstance(obj, Path):
        return str(obj)
    return obj


@contextlib.contextmanager
def atomic_path(path: str | Path):
    """Yield a temporary path beside ``path``; rename it onto ``path`` only if the block succeeds."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)

    os.fchmod(fd, FILE_MODE)
    os.close(fd)
    try:
        yield Path(tmp)
        # mkstemp makes the file private (0600): give it what a new file gets under the user's umask,
        # so colleagues sharing a results folder can read it
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_json(data: dict, path: str | Path) -> Path:
    return write_atomic(path, (json.dumps(_jsonable(data), indent=2) + "\n").encode("utf-8"))


def _vector3(a: np.ndarray) -> np.ndarray:
    """2-component vectors are stored with a zero third component so ParaView sees vectors."""
    if a.ndim >= 2 and a.shape[-1] == 2:
        return np.concatenate([a, np.zeros(a.shape[:-1] + (1,), dtype=a.dtype)], axis=-1)
    return a


#: fields and snapshots up to this many bytes are stored gzip (level 1, shuffle filter), larger ones uncompressed: the
#: low bits of float64 solution fields are noise, so gzip saved about a quarter of the bytes at ten times the write
#: time (a 4.2 M-node field), and a large run's output became most of its wall time.
COMPRESS_MAX_BYTES = 8 << 20


def _dataset(group, name: str, a: np.ndarray, grid=None) -> None:
    """One field dataset: small ones compressed (standard gzip + shuffle, readable by ParaView's HDF5), large ones
    raw (``COMPRESS_MAX_BYTES``). On an explicit structured grid one row per point (``grid_shape`` = (ny, nx)
    restores the array); 2-component vectors padded to 3 (``components`` = 2)."""
    a = np.asarray(a)
    components = a.shape[-1] if _field_rank(grid, a) == 1 else 0
    a = _vector3(a)
    flat = isinstance(grid, StructuredGrid) and grid.explicit and a.shape[:2] == (grid.ny, grid.nx)
    if flat:
        a = a.reshape((grid.ny * grid.nx,) + a.shape[2:])
    if a.nbytes <= COMPRESS_MAX_BYTES:
        ds = group.create_dataset(name, data=a, compression="gzip", compression_opts=1, shuffle=True)
    else:
        ds = group.create_dataset(name, data=a)
    if flat:
        ds.attrs["grid_shape"] = [grid.ny, grid.nx]
    if components and components != a.shape[-1]:
        ds.attrs["components"] = components


def _field_array(ds, unpad: bool) -> np.ndarray:
    """A stored field as the solver held it: (ny, nx[, 3]) again where stored one row per point; with ``unpad``
    the 2-component vectors without the zero third component they were padded with."""
    a = ds[()]
    shape = ds.attrs.get("grid_shape")
    if shape is not None:
        a = a.reshape(tuple(int(v) for v in shape) + a.shape[1:])
    comps = ds.attrs.get("components")
    if unpad and comps is not None:
        a = a[..., :int(comps)]
    return a


def _field_rank(grid, a: np.ndarray) -> int:
    base = 2 if isinstance(grid, StructuredGrid) else 1     # the solver's shape: (ny, nx[, c]) or (npoints[, c])
    return a.ndim - base  # 0 scalar, 1 vector


def _set_attrs(h5obj, mapping: dict):
    for k, v in _jsonable(mapping).items():
        if isinstance(v, (dict, list)) or v is None:
            h5obj.attrs[k] = json.dumps(v)
        else:
            h5obj.attrs[k] = v


def write_h5(result: Result, path: str | Path, run_id: str = "") -> Path:
    """result.h5, every disk write checked (see hpcsolve.core.safe_io.write_h5_atomic)."""
    def fill(f):
        f.attrs["hpcsolve_layout"] = H5_LAYOUT_VERSION
        f.attrs["run_id"] = run_id
        f.attrs["case"] = result.case_name
        f.attrs["solver"] = result.solver
        f.attrs["backend"] = result.backend
        f.attrs["precision"] = result.precision
        f.attrs["status"] = result.status
        f.attrs["message"] = result.message
        f.attrs["case_text"] = result.case_text
        f.attrs["case_json"] = result.case_json
        _set_attrs(f.require_group("provenance"), result.provenance)
        _set_attrs(f.require_group("metrics"), result.metrics)
        _set_attrs(f.require_group("derived"), result.derived)
        _set_attrs(f.require_group("timings"), result.timings)
        vg = f.require_group("validation")
        for name, verdict in result.validation.items():
            _set_attrs(vg.require_group(name), verdict)
        g = result.grid
        if isinstance(g, StructuredGrid):
            gg = f.create_group("grid")
            gg.attrs.update({"nx": g.nx, "ny": g.ny, "spacing": g.spacing, "origin": list(g.origin), "unit": g.unit})
            x, y = g.coordinates()
            gg["x"], gg["y"] = x, y
            if g.explicit:          # for unstructured XDMF readers (meshio); regular: gzip takes them to ~2 %
                points, cells = g.points_and_cells()
                gg.create_dataset("points", data=points, compression="gzip", compression_opts=1, shuffle=True)
                gg.create_dataset("cells", data=cells, compression="gzip", compression_opts=1, shuffle=True)
        elif isinstance(g, TriangleMesh):
            gm = f.create_group("mesh")
            gm["points"] = np.asarray(g.points, dtype=np.float64)
            gm["triangles"] = np.asarray(g.triangles, dtype=np.int64)
            gm.attrs["cell_type"] = g.cell_type
        fg = f.create_group("fields")
        for name, a in result.fields.items():
            _dataset(fg, name, a, g)
        sg = f.create_group("snapshots")
        for i, snap in enumerate(result.snapshots):
            s = sg.create_group(f"{i:06d}")
            s.attrs["time"] = snap.time
            s.attrs["step"] = snap.step
            for name, a in snap.fields.items():
                _dataset(s, name, a, g)
        tg = f.create_group("series")
        for name, a in result.series.items():
            tg[name] = np.asarray(a)
    return write_h5_atomic(path, fill)


def read_h5(path: str | Path) -> dict:
    """Read a result.h5 back into plain dicts (for tests and compare; a user loads a folder with :func:`load_result`);
    opened through the checked opener (a pipe, a device or a link loop is a CaseError naming ``result.h5``). Fields
    come in the solver's shape, 2-component vectors padded with a zero third component (as stored)."""

    def attrs(obj):
        out = {}
        for k, v in obj.attrs.items():
            if isinstance(v, bytes):
                v = v.decode()
            if isinstance(v, str) and v[:1] in "[{":
                with contextlib.suppress(ValueError):
                    v = json.loads(v)
            out[k] = v.item() if isinstance(v, np.generic) else v
        return out

    with open_h5(path, "result.h5", "a result.h5 that is a regular file") as f:
        data = {"attrs": attrs(f)}
        for grp in ("provenance", "metrics", "derived", "timings"):
            data[grp] = attrs(f[grp]) if grp in f else {}
        data["validation"] = {k: attrs(g) for k, g in f["validation"].items()} if "validation" in f else {}
        data["fields"] = {k: _field_array(f["fields"][k], False) for k in f["fields"]} if "fields" in f else {}
        data["series"] = {k: f["series"][k][()] for k in f["series"]} if "series" in f else {}
        data["snapshots"] = []
        if "snapshots" in f:
            for k in sorted(f["snapshots"]):
                s = f["snapshots"][k]
                data["snapshots"].append({"time": float(s.attrs["time"]), "step": int(s.attrs["step"]),
                                          "fields": {n: _field_array(s[n], False) for n in s}})
        if "grid" in f:
            data["grid"] = attrs(f["grid"])
        if "mesh" in f:
            data["mesh"] = {"points": f["mesh/points"][()], "triangles": f["mesh/triangles"][()]}
    return data


def load_result(folder: str | Path) -> Result:
    """The result a run wrote into ``folder``, as the :class:`Result` that ``run_case`` returned.

    Parameters
    ----------
    folder : str or Path
        A run's output folder (``hpcsolve run --out`` or ``run_case(out=...)``).

    Returns
    -------
    Result
        ``fields`` (name -> NumPy array: (ny, nx[, 2]) on an LBM grid, (npoints[, 2]) on a FEM mesh), ``grid``
        (``x, y = grid.coordinates()``), ``snapshots``, ``series``, ``metrics``, ``timings``, ``status``, ``summary()``.

    Raises
    ------
    OutputError
        A folder that is missing, incomplete or not one run's files (:func:`read_result_folder`).

    Examples
    --------
    >>> import pathlib, tempfile, hpcsolve
    >>> case = pathlib.Path(hpcsolve.__file__).resolve().parents[1] / "cases" / "lid_driven_cavity.toml"
    >>> out = pathlib.Path(tempfile.mkdtemp()) / "cavity"
    >>> _ = hpcsolve.run_case(case, "numpy", "fp32", out=out, progress=False, plots=False, overrides=[
    ...     "lattice.resolution=16", "time.end_time=2", "steady.enabled=false", 'validation.reference="none"'])
    >>> result = hpcsolve.load_result(out)
    >>> result.status, result.precision, result.fields["velocity"].shape, float(result.grid.coordinates()[0][1])
    ('completed', 'fp32', (18, 18, 2), 0.03125)
    """
    summary = read_result_folder(folder, "folder")
    out = Path(folder)
    with open_h5(out / "result.h5", "folder", "a result folder whose result.h5 is a regular file") as f:
        text = {k: _text(f.attrs[k]) for k in ("case_text", "case_json") if k in f.attrs}
        fields = {k: _field_array(f["fields"][k], True) for k in f["fields"]} if "fields" in f else {}
        snapshots = [Snapshot(time=float(g.attrs["time"]), step=int(g.attrs["step"]),
                              fields={n: _field_array(g[n], True) for n in g})
                     for _, g in sorted(f["snapshots"].items())] if "snapshots" in f else []
        series = {k: f["series"][k][()] for k in f["series"]} if "series" in f else {}
        grid = None
        if "grid" in f:
            ga = f["grid"].attrs
            grid = StructuredGrid(int(ga["nx"]), int(ga["ny"]), float(ga["spacing"]),
                                  tuple(float(v) for v in np.ravel(ga["origin"])), _text(ga["unit"]))
        elif "mesh" in f:
            kind = _text(f["mesh"].attrs.get("cell_type", "triangle"))    # layout 2 files: triangles
            grid = TriangleMesh(f["mesh/points"][()], f["mesh/triangles"][()], kind)
    summary = _floats(summary)
    return Result(case_name=summary.get("case", ""), solver=summary.get("solver", ""),
                  backend=summary.get("backend", ""), precision=summary.get("precision", ""), grid=grid,
                  fields=fields, snapshots=snapshots, series=series, metrics=summary.get("metrics", {}),
                  derived=summary.get("derived", {}), timings=summary.get("timings", {}),
                  provenance=summary.get("provenance", {}), status=summary.get("status", ""),
                  message=summary.get("message", ""), case_text=text.get("case_text", ""),
                  case_json=text.get("case_json", ""), validation=summary.get("validation", {}))

