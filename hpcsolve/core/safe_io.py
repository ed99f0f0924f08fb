"""Checked file input and output.

Input: every file hpcsolve reads (a case file, mesh, obstacle mask; a result folder's summary.json, marker and
journals; checkpoints and result.h5) is looked at with ``stat`` before it is opened (:func:`open_regular`,
:func:`read_text`, :func:`read_json`, :func:`open_h5`), and refused unless it is a regular file of a sane size
(a named pipe, a device, a socket, a folder or a loop of symbolic links: one error naming the field, exit 2); an ``.npy`` header is read and
checked (dtype, shape, size on disk) before the array is loaded. A named pipe, a device or a folder
never reaches a reader, so nothing blocks and nothing reads without end.

Output: every byte hpcsolve writes into a result folder or a checkpoint goes through
:func:`write_atomic`: the data is written to a temporary name beside the target, synced and renamed;
on any failure (a full disk, a read-only folder) the temporary file is removed and the target is
left as it was. HDF5 writes through a file object that hides a failed write from the HDF5 library
(it can crash the process when a write fails under it) and reports it once the file is closed.
"""

from __future__ import annotations

import contextlib
import errno
import io
import json
import mmap
import os
import re
import stat
import tempfile
from pathlib import Path

import numpy as np

from hpcsolve.core.errors import CaseError, clip

#: a path longer than this, or with a name longer than NAME_MAX, is refused before the OS sees it
PATH_MAX = 4096
NAME_MAX = 255
#: largest case file read (a case is a few kB; this leaves room for generated ones)
CASE_FILE_MAX_BYTES = 16 * 2**20
#: largest mesh file read (a 2D mesh of ~20 M triangles in ASCII gmsh)
MESH_FILE_MAX_BYTES = 2 * 2**30
#: largest HDF5 file read (result.h5, a checkpoint: the populations of the largest grid a 141 GB GPU holds)
H5_FILE_MAX_BYTES = 1 << 40
#: disk writes go out in pieces of this size (each one a separate, checked write)
WRITE_CHUNK_BYTES = 16 * 2**20


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


#: permissions of written files: what open() would give (mkstemp alone makes them private)
FILE_MODE = 0o666 & ~_umask()


def _kind(mode: int) -> str | None:
    """What a non-regular file is, in words; None for a regular file."""
    for test, name in ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a named pipe"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return None if stat.S_ISREG(mode) else "not a regular file"


def path_problem(path: str | os.PathLike) -> str | None:
    """Why ``path`` cannot name a file on this system (too long, NUL byte), or None."""
    try:
        raw = os.fsencode(path)
    except (UnicodeError, TypeError):
        return "the path cannot be encoded for this file system"
    if b"\0" in raw:
        return "the path contains a NUL character"
    if not raw:
        return "the path is empty"
    if len(raw) >= PATH_MAX:
        return f"the path is too long ({len(raw):,} bytes; at most {PATH_MAX - 1})"
    longest = max(len(part) for part in raw.split(b"/"))
    if longest > NAME_MAX:
        return f"a name in the path is too long ({longest:,} bytes; at most {NAME_MAX})"
    return None


def regular_file(path: str | os.PathLike, field: str, allowed: str, *, max_bytes: int) -> os.stat_result:
    """The ``stat`` of ``path`` if it is an existing regular file of at most ``max_bytes``; else a
    CaseError naming ``field``. Nothing is opened."""
    shown = clip(str(path))
    problem = path_problem(path)
    if problem:
        raise CaseError.invalid(field, shown, allowed, why=problem)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise CaseError.invalid(field, shown, allowed, why="file not found") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise CaseError.invalid(field, shown, allowed, why="a loop of symbolic links (it names no file)") from None
        raise CaseError.invalid(field, shown, allowed, why=f"cannot read it ({exc.strerror})") from None
    kind = _kind(st.st_mode)
    if kind:
        raise CaseError.invalid(field, shown, allowed, why=f"it is {kind}, not a regular file")
    if st.st_size > max_bytes:
        raise CaseError.invalid(field, shown, allowed,
                                why=f"the file is {st.st_size:,} bytes; at most {max_bytes:,} are read")
    return st


@contextlib.contextmanager
def open_regular(path: str | os.PathLike, field: str, allowed: str, *, max_bytes: int):
    """A binary file object of a checked regular file. Opened non-blocking and checked again after
    opening, so a file swapped for a pipe between the check and the open cannot block."""
    regular_file(path, field, allowed, max_bytes=max_bytes)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise CaseError.invalid(field, clip(str(path)), allowed, why=f"cannot open it ({exc.strerror})") from None
    st = os.fstat(fd)
    if _kind(st.st_mode) or st.st_size > max_bytes:
        os.close(fd)
        raise CaseError.invalid(field, clip(str(path)), allowed, why="it changed into something else while opened")
    os.set_blocking(fd, True)
    with os.fdopen(fd, "rb") as f:
        yield f


@contextlib.contextmanager
def open_h5(path: str | os.PathLike, field: str, allowed: str, *, max_bytes: int = H5_FILE_MAX_BYTES):
    """An HDF5 file (h5py, read-only) of a checked regular file (:func:`open_regular`): HDF5 reads through the checked
    file object, so a pipe, a device or a link loop never reaches the library."""
    import h5py   # late: start-up cost (h5py, 0.16 s)

    with open_regular(path, field, allowed, max_bytes=max_bytes) as f, h5py.File(f, "r") as h5:
        yield h5


def read_json(path: str | os.PathLike, field: str, allowed: str, *, max_bytes: int):
    """The JSON value in a checked regular file (:func:`read_text`); ValueError (a CaseError among them) when it is
    not one."""
    return json.loads(read_text(path, field, allowed, max_bytes=max_bytes))


def read_text(path: str | os.PathLike, field: str, allowed: str, *, max_bytes: int) -> str:
    """The UTF-8 text of a checked regular file."""
    with open_regular(path, field, allowed, max_bytes=max_bytes) as f:
        data = f.read(max_bytes + 1)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CaseError.invalid(field, clip(str(path)), allowed,
                                why=f"not UTF-8 text (byte {exc.start:,} cannot be decoded)") from None


# ------------------------------------------------------------------------------------------------
# .npy arrays: header first

#: dtypes a mask file may hold (truthiness is the mask); never objects
MASK_KINDS = "biuf"


def load_npy(path: str | os.PathLike, field: str, *, shape: tuple[int, ...], allowed: str) -> np.ndarray:
    """An ``.npy`` array of exactly ``shape`` with a boolean or numeric dtype, read only after its
    header says so and the file is long enough to hold the data it announces."""
    itemsize_max = 16
    limit = 4096 + int(np.prod(shape, dtype=np.float64) * itemsize_max)
    with open_regular(path, field, allowed, max_bytes=limit) as f:
        size = os.fstat(f.fileno()).st_size
        try:
            version = np.lib.format.read_magic(f)
            if version == (1, 0):
                header_shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
            elif version in ((2, 0), (3, 0)):
                header_shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
            else:
                raise ValueError(f"unknown .npy format version {version}")
        except (ValueError, EOFError, SyntaxError, TypeError, OSError) as exc:
            raise CaseError.invalid(field, clip(str(path)), allowed,
                                    why=f"not an .npy array file ({clip(str(exc), 80)})") from None
        if dtype.kind not in MASK_KINDS or dtype.hasobject:
            raise CaseError.invalid(field, clip(str(path)), allowed, why=f"its dtype is {clip(str(dtype), 40)}")
        if tuple(header_shape) != tuple(shape):
            raise CaseError.invalid(field, clip(str(path)), allowed,
                                    why=f"its header says shape {clip(str(tuple(header_shape)), 60)}")
        need = int(np.prod(shape)) * dtype.itemsize
        if size - f.tell() < need:
            raise CaseError.invalid(field, clip(str(path)), allowed,
                                    why=f"the file is cut short ({size - f.tell():,} of {need:,} data bytes)")
        data = np.frombuffer(f.read(need), dtype=dtype, count=int(np.prod(shape)))
    order = "F" if fortran else "C"
    return data.reshape(shape, order=order)


# ------------------------------------------------------------------------------------------------
# gmsh headers: the counts a mesh file announces, checked against its size before meshio reads it

_GMSH_COUNT = re.compile(rb"\$(Nodes|Elements)\r?\n\s*([^\r\n]*)")


def gmsh_counts(path: str | os.PathLike, field: str, allowed: str) -> dict[str, int]:
    """Node and element counts announced by a gmsh ``.msh`` file (versions 2 and 4), refusing a
    file that is not gmsh or announces more entries than its size can hold."""
    with open_regular(path, field, allowed, max_bytes=MESH_FILE_MAX_BYTES) as f:
        size = os.fstat(f.fileno()).st_size
        head = f.read(64)
        if not head.lstrip().startswith(b"$MeshFormat"):
            raise CaseError.invalid(field, clip(str(path)), allowed,
                                    why="not a gmsh file (it does not start with $MeshFormat)")
        if size == 0:
            return {}
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            counts = {}
            for match in _GMSH_COUNT.finditer(m):
                name = match.group(1).decode().lower()
                if name in counts:
                    continue
                numbers = match.group(2).split()
                try:
                    # gmsh 2: "<count>"; gmsh 4: "<blocks> <count> <min tag> <max tag>"
                    count = int(numbers[0] if len(numbers) == 1 else numbers[1])
                except (ValueError, IndexError):
                    raise CaseError.invalid(field, clip(str(path)), allowed,
                                            why=f"the ${match.group(1).decode()} section has no valid count") from None
                if count < 0 or count * 4 > size:   # every entry takes more than 4 bytes, ASCII or binary
                    raise CaseError.invalid(field, clip(str(path)), allowed,
                                            why=f"the ${match.group(1).decode()} section announces {count:,} entries, "
                                                f"more than a {size:,}-byte file can hold")
                counts[name] = count
                if len(counts) == 2:
                    break
            if _gmsh_ascii(head):
                _refuse_negative_ids(m, path, field, allowed)
                _refuse_zero_node_ids(m, head, path, field, allowed)
    return counts


def _gmsh_ascii(head: bytes) -> bool:
    """The file-type of a gmsh $MeshFormat line ("<version> <file-type> <data-size>") is 0 for ASCII."""
    words = head.split(b"\n", 2)[1].split() if head.count(b"\n") >= 2 else []
    return len(words) >= 2 and words[1] == b"0"


_NEGATIVE = re.compile(rb"[ \t\n]-\d")


def _refuse_negative_ids(m, path, field: str, allowed: str) -> None:
    # meshio looks node numbers up in a table, so -2 silently becomes another node: refuse them first
    start, end = m.find(b"$Elements"), m.find(b"$EndElements")
    hit = _NEGATIVE.search(m, start, end) if 0 <= start < end else None
    if hit:
        line_start = m.rfind(b"\n", 0, hit.end()) + 1
        line = m[line_start:m.find(b"\n", hit.end())].decode(errors="replace")
        raise CaseError.invalid(field, clip(str(path)), allowed,
                                why=f"a negative number in $Elements ({clip(line, 60)}); "
                                    f"gmsh numbers nodes and elements from 1")


#: the $Elements section is scanned for node id 0 in pieces of about this size (bounded memory)
_SCAN_CHUNK_BYTES = 32 * 2**20


def _refuse_zero_node_ids(m, head: bytes, path, field: str, allowed: str) -> None:
    """Refuse node id 0 in an ASCII $Elements section (gmsh 2 and 4). meshio subtracts one from each node id
    and looks the result up in a table, so 0 becomes index -1: silently the file's last node."""
    start, end = m.find(b"$Elements"), m.find(b"$EndElements")
    if not 0 <= start < end:
        return
    words = head.split(b"\n", 2)[1].split()
    start = m.find(b"\n", start, end) + 1                   # the section's first line: its counts
    hit = _zero_node_line(m, start, end, gmsh4=words[0].startswith(b"4"))
    if hit is not None:
        line = m[hit:m.find(b"\n", hit, end) if m.find(b"\n", hit, end) >= 0 else end]
        raise CaseError.invalid(field, clip(str(path)), allowed,
                                why=f"node id 0 in $Elements ({clip(line.decode(errors='replace').strip(), 60)}); "
                                    f"gmsh numbers nodes from 1 (meshio would read 0 as another node)")


def _zero_node_line(m, start: int, end: int, *, gmsh4: bool) -> int | None:
    """Byte offset of the first line of ``m[start:end]`` (an ASCII $Elements body, counts line first) that
    has node id 0, or None. gmsh 2 lines are "id type ntags tags... nodes..."; gmsh 4 has block headers
    "dim entity type count" before each block of "id nodes..." lines (their zeros are not node ids).
    Vectorized over pieces of whole lines."""
    pos, line_base = start, 0
    next_header = 1 if gmsh4 else -1                        # gmsh 4: the body's line index of the next block header
    while pos < end:
        cut = end
        if pos + _SCAN_CHUNK_BYTES < end:                  # cut after a newline
            nl = m.rfind(b"\n", pos, pos + _SCAN_CHUNK_BYTES)
            nl = m.find(b"\n", pos + _SCAN_CHUNK_BYTES, end) if nl < 0 else nl
            cut = end if nl < 0 else nl + 1
        c = np.frombuffer(m, dtype=np.uint8, count=cut - pos, offset=pos)
        newlines = np.flatnonzero(c == 10)
        line_starts = np.concatenate(([0], newlines + 1, [len(c)]))
        n_lines = len(newlines) + (0 if c[-1] == 10 else 1)
        headers = []
        while gmsh4 and 0 <= next_header - line_base < n_lines:
            local = next_header - line_base
            fields = bytes(c[line_starts[local]:line_starts[local + 1]]).split()
            if len(fields) != 4 or not fields[3].isdigit():
                return None                                # not laid out one element per line: meshio decides
            headers.append(local)
            next_header += 1 + int(fields[3])
        bad = _zero_tokens_at_nodes(c, newlines, headers, first_line=line_base == 0, gmsh4=gmsh4)
        if bad is not None:
            return pos + int(line_starts[bad])
        line_base += len(newlines)
        pos = cut
    return None


def _zero_tokens_at_nodes(c: np.ndarray, newlines: np.ndarray, headers: list, *, first_line: bool, gmsh4: bool):
    """Local line index of the first line of ``c`` (whole lines of bytes) with a zero token where a node id
    stands, or None."""
    space = c <= 32
    begin = ~space
    begin[1:] &= space[:-1]
    ts = np.flatnonzero(begin)                              # token starts
    if not ts.size:
        return None
    has_zero = np.logical_or.reduceat(c == 48, ts)          # a token (and the spaces after it) with a 0 ...
    nonzero = np.logical_or.reduceat((c >= 49) & (c <= 57), ts)   # ... and no other digit: the number 0
    zero = np.flatnonzero(has_zero & ~nonzero)
    if not zero.size:
        return None
    tline = np.searchsorted(newlines, ts)                   # line of each token
    first = np.searchsorted(tline, tline[zero])             # first token of the line of each zero
    place = zero - first                                    # place of the zero in its line
    line = tline[zero]
    keep = ~np.isin(line, headers) & ~((line == 0) & first_line)
    if gmsh4:
        node = keep & (place >= 1)                          # "id nodes..."
    else:
        k = np.minimum(first + 2, len(ts) - 1)              # "id type ntags tags... nodes...": ntags is third
        ntags = _small_ints(c, ts[k])
        node = keep & (tline[k] == line) & (place >= 3 + ntags)
    return int(line[np.argmax(node)]) if node.any() else None


def _small_ints(c: np.ndarray, starts: np.ndarray, digits: int = 9) -> np.ndarray:
    """The unsigned decimal numbers starting at ``starts`` in ``c`` (at most ``digits`` digits read)."""
    value = np.zeros(len(starts), dtype=np.int64)
    active = np.ones(len(starts), dtype=bool)
    for k in range(digits):
        ch = c[np.minimum(starts + k, len(c) - 1)].astype(np.int64)
        active &= (ch >= 48) & (ch <= 57) & (starts + k < len(c))
        value = np.where(active, value * 10 + ch - 48, value)
    return value


# ------------------------------------------------------------------------------------------------
# output: every write checked, temporary files removed on failure

def _write_all(fd: int, data, offset: int = 0) -> None:
    """Write ``data`` (bytes-like) to ``fd`` at ``offset`` in pieces; a failing write raises OSError."""
    view = memoryview(data).cast("B")
    done = 0
    while done < len(view):
        n = write_chunk(fd, view[done:done + WRITE_CHUNK_BYTES], offset + done)
        if n <= 0:
            raise OSError(errno.EIO, "write returned no progress")
        done += n


def write_chunk(fd: int, piece, offset: int) -> int:
    """One write to disk. Every write of result and checkpoint data passes here (tests inject failures)."""
    return os.pwrite(fd, piece, offset)


def fsync_folder(folder: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@contextlib.contextmanager
def _atomic_fd(path: Path):
    """A file descriptor of a temporary file beside ``path``, renamed onto it if the block succeeds
    (after fsync); removed on any failure, leaving ``path`` as it was."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        try:
            os.fchmod(fd, FILE_MODE)
            yield fd
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write_atomic(path: str | Path, data) -> Path:
    """Write ``data`` (bytes-like) to ``path`` through a temporary file in the same folder, synced and
    renamed; on failure the temporary file is removed and ``path`` keeps its old content."""
    path = Path(path)
    with _atomic_fd(path) as fd:
        _write_all(fd, data)
    return path


class _CheckedDisk(io.RawIOBase):
    """The file object HDF5 writes through. A failed disk write is remembered and every later write
    is dropped, so the HDF5 library never sees a failure (it can crash the process on one); the
    caller raises the remembered error once HDF5 has closed the file."""

    def __init__(self, fd: int):
        super().__init__()
        self.fd, self.pos, self.size, self.failure = fd, 0, 0, None

    def readable(self):
        return True

    def writable(self):
        return True

    def seekable(self):
        return True

    def seek(self, offset, whence=io.SEEK_SET):
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.pos, io.SEEK_END: self.size}[whence]
        self.pos = base + offset
        return self.pos

    def tell(self):
        return self.pos

    def write(self, data):
        n = memoryview(data).nbytes
        if self.failure is None:
            try:
                _write_all(self.fd, data, self.pos)
            except OSError as exc:
                self.failure = exc
        self.pos += n
        self.size = max(self.size, self.pos)
        return n

    def readinto(self, buffer):
        view = memoryview(buffer).cast("B")
        got = b"" if self.failure is not None else os.pread(self.fd, len(view), self.pos)
        view[:len(got)] = got
        view[len(got):] = bytes(len(view) - len(got))
        self.pos += len(view)
        return len(view)

    def truncate(self, size=None):
        size = self.pos if size is None else size
        if self.failure is None:
            try:
                os.ftruncate(self.fd, size)
            except OSError as exc:
                self.failure = exc
        self.size = size
        return size

    def flush(self):
        pass


def write_h5_atomic(path: str | Path, fill) -> Path:
    """An HDF5 file written by ``fill(h5py.File)`` to ``path`` atomically, every disk write checked
    (a full disk raises OSError after HDF5 has closed the file; the temporary file is removed)."""
    import h5py   # late: start-up cost (h5py, 0.16 s)

    path = Path(path)
    with _atomic_fd(path) as fd:
        disk = _CheckedDisk(fd)
        with h5py.File(disk, "w") as f:
            fill(f)
        if disk.failure is not None:
            raise disk.failure
    return path
