"""The XDMF 3 sidecars of a result folder: ``result.xdmf`` (the final fields as one uniform grid, which ParaView and
``meshio.read`` both open) and ``result_series.xdmf`` (the snapshots as a temporal collection: ParaView, and
``meshio.xdmf.TimeSeriesReader`` on explicit grids). They point into result.h5 (:mod:`hpcsolve.core.results` writes
it): a structured grid up to :data:`XDMF_POINTS_MAX` points as its cell centres joined by quadrilaterals
(``grid/points``, ``grid/cells``; its fields one row per point), a simplex mesh as its nodes and cells (triangles, tetrahedra, linear or quadratic), a larger
structured grid as a 2DCoRectMesh, which ParaView reads and meshio does not (meshio reads no structured topology,
meshio issue 404)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from hpcsolve.core.safe_io import write_atomic

#: unstructured cell types (results.TriangleMesh.cell_type): (XDMF topology type, nodes per cell); node order VTK / meshio
CELL_TYPES = {"triangle": ("Triangle", 3), "triangle6": ("Triangle_6", 6), "tetra": ("Tetrahedron", 4),
              "tetra10": ("Tetrahedron_10", 10)}

SERIES_XDMF = "result_series.xdmf"
#: structured grids up to this many points get explicit points and quadrilaterals: at 1024^2 points they add 0.8 MB
#: to a 47 MB result.h5 (gzip; 32 MB raw) and 0.33 s of writing (0.16 s building, 0.17 s compressing; 2-core machine
#: under load); a larger grid keeps the 2DCoRectMesh (nothing added), so a large GPU run's output time stays as it was
XDMF_POINTS_MAX = 1 << 20


def _structured(g) -> bool:
    return hasattr(g, "nx")


def _explicit(g) -> bool:
    return not _structured(g) or g.nx * g.ny <= XDMF_POINTS_MAX


def _rank(g, a: np.ndarray) -> int:
    return a.ndim - (2 if _structured(g) else 1)     # the solver's shape: (ny, nx[, c]) or (npoints[, c])


def _xdmf_attrs(result, fields: dict, h5_name: str, h5_group: str, dims: str) -> list[str]:
    out = []
    for name, a in fields.items():
        a = np.asarray(a)
        rank = _rank(result.grid, a)
        if rank == 0:
            kind, shape = "Scalar", dims
        elif rank == 1:
            kind, shape = "Vector", f"{dims} 3"
        else:
            continue
        num = "Int" if np.issubdtype(a.dtype, np.integer) or a.dtype == np.bool_ else "Float"
        prec = max(a.dtype.itemsize, 1) if num == "Int" else (8 if a.dtype.itemsize >= 8 else 4)
        out.append(
            f'      <Attribute Name="{name}" AttributeType="{kind}" Center="Node">\n'
            f'        <DataItem Dimensions="{shape}" NumberType="{num}" Precision="{prec}" Format="HDF">'
            f'{h5_name}:/{h5_group}/{name}</DataItem>\n      </Attribute>')
    return out


def _xdmf_mesh(g, h5_name: str) -> tuple[str, str, str]:
    """(topology, geometry, point dimensions) of the grid: explicit points and cells (triangles; a structured grid's
    quadrilaterals up to XDMF_POINTS_MAX points), which ParaView and meshio read, else a 2DCoRectMesh (ParaView)."""
    if not _explicit(g):
        dims = f"{g.ny} {g.nx}"
        topo = f'      <Topology TopologyType="2DCoRectMesh" Dimensions="{dims}"/>'
        geom = ('      <Geometry GeometryType="ORIGIN_DXDY">\n'
                f'        <DataItem Dimensions="2" NumberType="Float" Precision="8" Format="XML">{g.origin[1]!r} {g.origin[0]!r}</DataItem>\n'
                f'        <DataItem Dimensions="2" NumberType="Float" Precision="8" Format="XML">{g.spacing!r} {g.spacing!r}</DataItem>\n'
                '      </Geometry>')
        return topo, geom, dims
    if _structured(g):
        npts, ncells, kind, corners = g.nx * g.ny, (g.nx - 1) * (g.ny - 1), "Quadrilateral", 4
        iprec = 4 if npts < 2**31 else 8        # StructuredGrid.points_and_cells: int32 cells where they fit
        points, cells = "grid/points", "grid/cells"
    else:
        kind, corners = CELL_TYPES[getattr(g, "cell_type", "triangle")]
        npts, ncells, iprec = len(g.points), len(g.triangles), 8     # int64 (write_h5)
        points, cells = "mesh/points", "mesh/triangles"
    topo = (f'      <Topology TopologyType="{kind}" NumberOfElements="{ncells}">\n'
            f'        <DataItem Dimensions="{ncells} {corners}" NumberType="Int" Precision="{iprec}" Format="HDF">'
            f'{h5_name}:/{cells}</DataItem>\n      </Topology>')
    xyz = 3 if not _structured(g) and g.points.shape[1] == 3 else 2
    geom = (f'      <Geometry GeometryType="{"XYZ" if xyz == 3 else "XY"}">\n'
            f'        <DataItem Dimensions="{npts} {xyz}" NumberType="Float" Precision="8" Format="HDF">{h5_name}:/{points}'
            '</DataItem>\n      </Geometry>')
    return topo, geom, f"{npts}"


def _xdmf_grid(result, name: str, fields: dict, group: str, h5_name: str, time=None) -> str:
    topo, geom, dims = _xdmf_mesh(result.grid, h5_name)
    lines = [f'    <Grid Name="{name}" GridType="Uniform">', topo, geom]
    if time is not None:
        lines.append(f'      <Time Value="{time!r}"/>')
    lines += _xdmf_attrs(result, fields, h5_name, group, dims)
    lines.append("    </Grid>")
    return "\n".join(lines)


def _xdmf_text(blocks: list[str]) -> bytes:
    return ('<?xml version="1.0" ?>\n<!DOCTYPE Xdmf SYSTEM "Xdmf.dtd" []>\n<Xdmf Version="3.0">\n  <Domain>\n'
            + "\n".join(blocks) + "\n  </Domain>\n</Xdmf>\n").encode("utf-8")


def write_xdmf(result, path: str | Path, h5_name: str = "result.h5") -> Path:
    """XDMF 3 sidecar pointing into result.h5: the final fields (else the last snapshot's) as one uniform grid, the
    form ``meshio.read`` and ParaView both open (no time element: meshio's reader takes one grid without one)."""
    if result.fields:
        block = _xdmf_grid(result, "final", result.fields, "fields", h5_name)
    else:
        last = len(result.snapshots) - 1
        block = _xdmf_grid(result, "final", result.snapshots[last].fields, f"snapshots/{last:06d}", h5_name)
    return write_atomic(path, _xdmf_text([block]))


def write_xdmf_series(result, path: str | Path, h5_name: str = "result.h5") -> Path:
    """XDMF 3 temporal collection of the snapshots (and the final state where the run went on after the last one):
    ParaView's time series; ``meshio.xdmf.TimeSeriesReader`` reads it on explicit grids."""
    inner = [_xdmf_grid(result, f"t{i:06d}", s.fields, f"snapshots/{i:06d}", h5_name, s.time)
             for i, s in enumerate(result.snapshots)]
    final_time = result.metrics.get("simulated_time_s")
    if isinstance(final_time, (int, float)) and final_time > result.snapshots[-1].time and result.fields:
        inner.append(_xdmf_grid(result, "final", result.fields, "fields", h5_name, float(final_time)))
    block = ('    <Grid Name="snapshots" GridType="Collection" CollectionType="Temporal">\n'
             + "\n".join("  " + b.replace("\n", "\n  ") for b in inner) + "\n    </Grid>")
    return write_atomic(path, _xdmf_text([block]))
