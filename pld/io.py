"""Saving and loading PLDs.

A saved PLD is a compressed ``.npz`` archive (no pickles) holding

* ``metadata``: UTF-8 JSON with the format name, format version, the pld
  version that wrote it, and the composition itself: a list of components
  ``{"mechanism": {"type": class name, "fields": {...}}, "count": k}`` (the
  same mechanism encoding as :class:`pld.Accountant` state);
* for inspection and other tools, the dominating (``upper``) and dominated
  (``lower``) grids of each direction at one query ``delta`` (default 1e-5):
  arrays ``{direction}_{side}_losses`` and ``{direction}_{side}_masses``
  (untilted P-masses), with their infinity masses in the metadata.

Loading rebuilds the PLD from its components, so it is *exactly* the PLD that
was saved: same answers, and composing on top of it is exact.  The stored
grids are never used for accounting.  Only mechanism classes defined in
:mod:`pld.mechanisms` can be loaded: a file cannot make the loader import or
call anything else.
"""

from __future__ import annotations

import dataclasses
import io
import json
import math
import os
import tempfile
import typing

import numpy as np

from pld import mechanisms as M
from pld._validate import MAX_COUNT
from pld.distribution import PLD
from pld.mechanisms import Mechanism

__all__ = ["save", "load", "to_bytes", "from_bytes", "read_info",
           "mechanism_to_dict", "mechanism_from_dict", "FORMAT", "VERSION"]

FORMAT = "pld-privacy-loss-distribution"
VERSION = 1
DEFAULT_DELTA = 1e-5


# ------------------------------------------------------------ mechanisms
def _known_classes() -> dict:
    """pld's own mechanism dataclasses by name (defined in any module of the package)."""
    return {name: cls for name, cls in M.Mechanism.pld_classes().items() if dataclasses.is_dataclass(cls)}


def _encode_value(name: str, value):
    if value is None:
        return None  # (an optional field left at its default, e.g. RandomAllocation.tail)
    if isinstance(value, Mechanism):
        return mechanism_to_dict(value)
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        v = float(value)
        if not math.isfinite(v):
            raise ValueError(f"cannot save field {name}={v!r}: not finite")
        return v
    if isinstance(value, str):
        return value
    if isinstance(value, (tuple, list, np.ndarray)):
        return [_encode_value(name, x) for x in value]
    raise TypeError(f"cannot save field {name} of type {type(value).__name__}")


def mechanism_to_dict(mechanism) -> dict:
    """``{"type": class name, "fields": {...}}`` from a mechanism's dataclass init fields."""
    if not isinstance(mechanism, Mechanism) or not dataclasses.is_dataclass(mechanism):
        raise TypeError(f"cannot save {type(mechanism).__name__}: not a pld mechanism")
    cls = type(mechanism)
    if _known_classes().get(cls.__name__) is not cls:
        raise TypeError(f"cannot save {cls.__name__}: only pld's own mechanisms can be saved")
    fields = {f.name: _encode_value(f"{cls.__name__}.{f.name}", getattr(mechanism, f.name))
              for f in dataclasses.fields(mechanism) if f.init}
    return {"type": cls.__name__, "fields": fields}


def _decode_value(path: str, value):
    if isinstance(value, dict):
        return mechanism_from_dict(value, path=path)
    if isinstance(value, list):
        return tuple(_decode_value(f"{path}[{i}]", x) for i, x in enumerate(value))
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise ValueError(f"{path}: unsupported value {value!r}")


def mechanism_from_dict(data, *, path: str = "mechanism"):
    """Inverse of :func:`mechanism_to_dict`; only classes of :mod:`pld.mechanisms`."""
    if not isinstance(data, dict) or set(data) != {"type", "fields"}:
        raise ValueError(f"{path}: expected {{'type': ..., 'fields': {{...}}}}")
    name, fields = data["type"], data["fields"]
    classes = _known_classes()
    if not isinstance(name, str) or name not in classes:
        raise ValueError(f"{path}: unknown mechanism class {name!r} (known: {', '.join(sorted(classes))})")
    cls = classes[name]
    if not isinstance(fields, dict):
        raise ValueError(f"{path}.fields: expected an object")
    allowed = {f.name for f in dataclasses.fields(cls) if f.init}
    extra = set(fields) - allowed
    if extra:
        raise ValueError(f"{path}: {name} has no field(s) {', '.join(sorted(extra))} (unknown fields)")
    kwargs = {k: _decode_value(f"{path}.{k}", v) for k, v in fields.items()}
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{path}: cannot rebuild {name}: {exc}") from None


# ------------------------------------------------------------------ save
def _metadata(pld_obj, delta: float | None) -> dict:
    comps = [{"mechanism": mechanism_to_dict(m), "count": int(k)} for m, k in pld_obj.components]
    return {
        "format": FORMAT,
        "version": VERSION,
        "pld_version": _version(),
        "components": comps,
        "steps": int(pld_obj.steps),
        "symmetric": bool(pld_obj.symmetric),
        "value_discretization_interval": _fixed_spacing(pld_obj),
        "grids": None if delta is None else {"delta": delta, "arrays": {}},
    }


def _fixed_spacing(pld_obj):
    h = pld_obj.value_discretization_interval
    return None if h is None else float(h)


def _arrays(pld_obj, meta: dict, delta: float) -> dict:
    arrays = {}
    directions = ("remove",) if pld_obj.symmetric else ("remove", "add")
    for d in directions:
        for side in ("upper", "lower"):
            losses, masses, inf_mass = pld_obj.distribution(d, side, delta=delta)
            key = f"{d}_{side}"
            arrays[f"{key}_losses"] = np.asarray(losses, dtype=np.float64)
            arrays[f"{key}_masses"] = np.asarray(masses, dtype=np.float64)
            meta["grids"]["arrays"][key] = {"direction": d, "side": side, "infinity_mass": float(inf_mass),
                                            "points": int(np.size(losses))}
    return arrays


def to_bytes(pld_obj, *, delta: float | None = DEFAULT_DELTA) -> bytes:
    """The saved-file bytes of ``pld_obj`` (see :func:`save`)."""
    if not isinstance(pld_obj, PLD):
        raise TypeError(f"can only save a pld.PLD, got {type(pld_obj).__name__}")
    if delta is not None:
        delta = float(delta)
        if not 0.0 < delta < 1.0:
            raise ValueError(f"delta must be in (0, 1), got {delta!r}")
    meta = _metadata(pld_obj, delta)
    arrays = _arrays(pld_obj, meta, delta) if delta is not None else {}
    blob = json.dumps(meta, sort_keys=True, allow_nan=False).encode("utf-8")
    buf = io.BytesIO()
    np.savez_compressed(buf, metadata=np.frombuffer(blob, dtype=np.uint8), **arrays)
    return buf.getvalue()


def save(pld_obj, path, *, delta: float | None = DEFAULT_DELTA) -> None:
    """Save ``pld_obj`` to ``path`` (a compressed ``.npz``; the name is used as given).

    The file is written to a temporary name and renamed, so a failed save
    never leaves a partial file.

    Parameters
    ----------
    pld_obj : PLD
        What to save: its composition (mechanisms and counts), which
        :func:`load` rebuilds exactly.
    path : str or os.PathLike
        Target file.
    delta : float or None, default 1e-5
        The query at which inspection grids are stored as well, in ``(0, 1)``
        (``None``: only the composition).

    Raises
    ------
    TypeError
        If ``pld_obj`` is not a :class:`pld.PLD`.
    ValueError
        If ``delta`` is out of range.
    OSError
        If the file cannot be written.

    Examples
    --------
    >>> import os, tempfile, pld
    >>> path = os.path.join(tempfile.mkdtemp(), "run.pld")
    >>> pld.save(pld.dpsgd(1.0, 0.01, 100), path)
    >>> pld.load(path).components == pld.dpsgd(1.0, 0.01, 100).components
    True
    """
    data = to_bytes(pld_obj, delta=delta)
    write_atomic(path, data)


def write_atomic(path, data: bytes) -> None:
    """Write ``data`` to ``path`` via a temporary file in the same folder and a rename."""
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".pld-", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; give the usual mode
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


#: the process umask, read once (reading it by setting it is not thread-safe)
_UMASK: int | None = None


def _umask() -> int:
    global _UMASK
    if _UMASK is None:
        try:  # read the process umask from /proc when possible (no race)
            with open("/proc/self/status") as f:
                for line in f:
                    if line.startswith("Umask:"):
                        _UMASK = int(line.split()[1], 8)
                        break
        except OSError:
            pass
        if _UMASK is None:
            _UMASK = os.umask(0o022)
            os.umask(_UMASK)
    return _UMASK



# ------------------------------------------------------------------ load
def _read(source, *, arrays: bool):
    """Return ``(metadata, {name: array})`` or raise ``ValueError('not a pld file...')``."""
    label = source if isinstance(source, (str, os.PathLike)) else "<bytes>"
    if isinstance(source, (bytes, bytearray, memoryview)):
        fobj: typing.BinaryIO = io.BytesIO(bytes(source))
    else:
        fobj = open(os.fspath(source), "rb")  # OSError (missing file, ...) propagates as is
    with fobj:
        try:
            magic = fobj.read(4)
            fobj.seek(0)
        except OSError as exc:
            raise ValueError(f"not a pld file: {label} ({_reason(exc)})") from None
        if magic != b"PK\x03\x04":
            raise ValueError(f"not a pld file: {label} (not a compressed .npz archive)")
        try:
            with np.load(fobj, allow_pickle=False) as z:
                names = list(z.files)
                if "metadata" not in names:
                    raise ValueError("no metadata entry")
                raw = z["metadata"]
                if not isinstance(raw, np.ndarray) or raw.dtype != np.uint8 or raw.ndim != 1:
                    raise ValueError("metadata has the wrong type")
                out = {}
                if arrays:  # reading every member checks every CRC
                    for n in names:
                        if n != "metadata":
                            out[n] = np.asarray(z[n])
        except Exception as exc:  # BadZipFile, zlib.error, EOFError, ValueError, ... on foreign/corrupt data
            raise ValueError(f"not a pld file: {label} ({_reason(exc)})") from None
    if raw.size > _MAX_METADATA_BYTES:
        raise ValueError(f"not a pld file: {label} (metadata of {raw.size} bytes, above {_MAX_METADATA_BYTES})")
    try:
        meta = json.loads(raw.tobytes().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise ValueError(f"not a pld file: {label} (metadata is not JSON)") from None
    except RecursionError:
        raise ValueError(f"not a pld file: {label} (metadata nested too deeply)") from None
    _check_depth(meta, label)
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise ValueError(f"not a pld file: {label} (format is not {FORMAT!r})")
    version = meta.get("version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise ValueError(f"not a pld file: {label} (no format version)")
    if version > VERSION or version < 1:
        raise ValueError(f"unsupported version {version} of the pld file format in {label} "
                         f"(this pld {_version()} reads version {VERSION}; written by pld "
                         f"{meta.get('pld_version', '?')})")
    return meta, out


#: the metadata of any PLD pld writes is a few kB per component
_MAX_METADATA_BYTES = 16 << 20
#: deepest nesting of metadata (a mechanism inside a sampled mechanism inside
#: the components list is about 8 levels)
_MAX_DEPTH = 64


def _check_depth(meta, label) -> None:
    """Refuse metadata nested deeper than any PLD needs (iteratively: a file
    nested 50 000 deep must not exhaust the interpreter's recursion limit)."""
    stack = [(meta, 0)]
    while stack:
        obj, depth = stack.pop()
        if depth > _MAX_DEPTH:
            raise ValueError(f"not a pld file: {label} (metadata nested deeper than {_MAX_DEPTH} levels)")
        if isinstance(obj, dict):
            stack.extend((x, depth + 1) for x in obj.values())
        elif isinstance(obj, list):
            stack.extend((x, depth + 1) for x in obj)


def _reason(exc: BaseException) -> str:
    msg = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {msg}" if msg else type(exc).__name__


def _version() -> str:
    # imported here, not at the top: pld/__init__ imports this module before it
    # sets __version__
    from pld import __version__

    return __version__


def _build(meta: dict, label) -> object:
    comps = meta.get("components")
    if not isinstance(comps, list) or not comps:
        raise ValueError(f"not a pld file: {label} (no components)")
    out = []
    for i, c in enumerate(comps):
        if not isinstance(c, dict) or "mechanism" not in c or "count" not in c:
            raise ValueError(f"corrupted pld file {label}: components[{i}] is malformed")
        k = c["count"]
        if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= MAX_COUNT:
            raise ValueError(f"corrupted pld file {label}: components[{i}].count must be an integer in "
                             f"[1, {MAX_COUNT:.0e}]")
        try:
            m = mechanism_from_dict(c["mechanism"], path=f"components[{i}].mechanism")
        except ValueError as exc:
            raise ValueError(f"corrupted pld file {label}: {exc}") from None
        out.append((m, k))
    h = meta.get("value_discretization_interval")
    if h is not None and (not isinstance(h, (int, float)) or isinstance(h, bool) or not h > 0):
        raise ValueError(f"corrupted pld file {label}: bad value_discretization_interval {h!r}")
    try:
        return PLD(out, value_discretization_interval=h)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"corrupted pld file {label}: {exc}") from None


def load(path):
    """Load a PLD saved with :func:`save`: the exact composition that was saved.

    Parameters
    ----------
    path : str or os.PathLike
        A file written by :func:`save` (or ``pld dpsgd --save``).

    Returns
    -------
    PLD
        The saved composition; its queries are computed afresh (and certified).

    Raises
    ------
    ValueError
        "not a pld file ..." or "unsupported version ..." for foreign,
        truncated or corrupted files.
    OSError
        If the file cannot be read.

    Examples
    --------
    See :func:`save`.
    """
    meta, _ = _read(path, arrays=True)
    return _build(meta, os.fspath(path))


def from_bytes(data: bytes):
    """Inverse of :func:`to_bytes`."""
    meta, _ = _read(data, arrays=True)
    return _build(meta, "<bytes>")


def read_info(path) -> dict:
    """Metadata and stored inspection grids of a saved PLD, without rebuilding it.

    Returns the metadata dict with an extra ``"arrays"`` entry mapping names
    like ``"remove_upper_losses"`` to numpy arrays.
    """
    meta, arrays = _read(path, arrays=True)
    meta = dict(meta)
    meta["arrays"] = arrays
    return meta
