"""Exports: a study's results as plain files (Parquet, the spec as YAML, JSON, a sha256 manifest),
readable without ablate or its stores, and read back into the ``Results`` they were written from
(docs/results.md, "Exports")."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl
import yaml

from ablate import design
from ablate.results.frames import Results, Studies
from ablate.results.loading import load
from ablate.spec import SpecError, parse_yaml
from ablate.spec.errors import clip
from ablate.stores import redact

EXPORT_FORMAT = "ablate-export"
EXPORT_VERSION = 1
MANIFEST = "manifest.json"
FRAMES = ("trials", "metrics", "curves")
PROVENANCE_FILE = "provenance.parquet"
SPEC_FILE = "spec.yaml"
STUDY_FILE = "study.json"
#: Every file of an export but the manifest, which lists them; a reader opens no other name, so a
#: manifest cannot lead it out of the directory.
EXPORT_FILES = (*(f"{name}.parquet" for name in FRAMES), PROVENANCE_FILE, SPEC_FILE, STUDY_FILE)
PROVENANCE_SCHEMA = {"item": pl.Utf8, "tag": pl.Utf8, "value": pl.Utf8}
# The JSON files hold names, notes and column types: far below this for any real study, and a
# hostile or damaged file is refused before it is parsed.
MAX_JSON_BYTES = 16_000_000
_SHA256 = re.compile(r"[0-9a-f]{64}")


class ExportError(ValueError):
    """An export that cannot be written or read; the message is one line naming the path and why."""


def _shown(path: str | Path) -> str:
    """A path as an error message shows it: a 10,000-character name must not fill the terminal."""
    text = str(path)
    return text if len(text) <= 200 else f"{text[:120]}…({len(text):,} characters)…{text[-60:]}"


def _oserror(exc: OSError) -> str:
    return exc.strerror or type(exc).__name__


def _regular(path: Path) -> os.stat_result:
    """``path``'s stat; ExportError unless it is a regular file (a link, a device or a FIFO could
    point a reader anywhere, or never end)."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        raise ExportError(f"{_shown(path)} is missing") from None
    except OSError as exc:
        raise ExportError(f"cannot read {_shown(path)}: {_oserror(exc)}") from None
    if not stat.S_ISREG(info.st_mode):
        raise ExportError(f"{_shown(path)} is not a regular file")
    return info


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _json_file(path: Path) -> Any:
    if _regular(path).st_size > MAX_JSON_BYTES:
        raise ExportError(f"{_shown(path)} is larger than {MAX_JSON_BYTES:,} bytes: not one an export writes")
    try:
        return json.loads(path.read_bytes())
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ExportError(f"{_shown(path)} is not valid JSON ({str(exc).splitlines()[0][:200]})") from None
    except OSError as exc:
        raise ExportError(f"cannot read {_shown(path)}: {_oserror(exc)}") from None


def _export_dir(path: Path) -> Path:
    """``path`` if it is a directory; ExportError otherwise."""
    try:
        if not path.exists():
            raise ExportError(f"there is no export at {_shown(path)}: it does not exist")
        if not path.is_dir():
            raise ExportError(f"{_shown(path)} is not a directory (an export is a directory holding {MANIFEST})")
    except OSError as exc:
        raise ExportError(f"cannot read {_shown(path)}: {_oserror(exc)}") from None
    return path


def read_manifest(path: str | Path) -> dict[str, Any]:
    """The manifest of the export in the directory ``path``, its shape checked (not the files':
    ``read_export`` checks them). ExportError says what is wrong, on one line."""
    folder = _export_dir(Path(path))
    where = folder / MANIFEST
    if not os.path.lexists(where):
        raise ExportError(f"{_shown(folder)} has no {MANIFEST}: it is not an ablate export "
                          "(`ablate export STUDY DIR` writes one)")
    data = _json_file(where)
    if not isinstance(data, dict) or data.get("format") != EXPORT_FORMAT:
        raise ExportError(f"{_shown(where)} is not the manifest of an ablate export (no \"format\": \"{EXPORT_FORMAT}\")")
    version = data.get("format_version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise ExportError(f"{_shown(where)}: format_version must be a positive integer")
    if version > EXPORT_VERSION:
        raise ExportError(f"{_shown(where)}: format version {version} is newer than this ablate reads "
                          f"({EXPORT_VERSION}); update ablate")
    if not isinstance(data.get("study"), str) or not data["study"]:
        raise ExportError(f"{_shown(where)}: \"study\" must name the study")
    files = data.get("files")
    if not isinstance(files, dict):
        raise ExportError(f"{_shown(where)}: \"files\" must map each file to its sha256 and size")
    unknown = [name for name in files if name not in EXPORT_FILES]
    if unknown:
        raise ExportError(f"{_shown(where)} lists {_shown(repr(unknown[0]))}, which is not a file of an export "
                          f"(those are {', '.join(EXPORT_FILES)})")
    for name in EXPORT_FILES:
        entry = files.get(name)
        if not isinstance(entry, dict):
            raise ExportError(f"{_shown(where)} does not list {name}")
        size = entry.get("bytes")
        if not isinstance(entry.get("sha256"), str) or not _SHA256.fullmatch(entry["sha256"]) or \
                not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise ExportError(f"{_shown(where)}: {name} needs a \"sha256\" (64 hex digits) and \"bytes\"")
    rows = data.get("rows")
    if not isinstance(rows, dict) or any(not isinstance(rows.get(n), int) or isinstance(rows.get(n), bool)
                                         for n in (*FRAMES, "provenance")):
        raise ExportError(f"{_shown(where)}: \"rows\" must count the rows of {', '.join(FRAMES)} and provenance")
    return data


def check_export_dir(path: str | Path, study: str) -> list[str]:
    """The files a previous export of ``study`` left in the directory ``path`` (none for a new or
    empty one); ExportError when it holds anything else, so an export never deletes or overwrites
    what it did not write. ``export`` calls it first; a caller writing several exports calls it
    for each before writing any."""
    target = Path(path)
    try:
        try:
            os.lstat(target)  # not lexists: a name too long, or under a file, is an error, not "new"
        except FileNotFoundError:
            return []
        if not target.is_dir():
            raise ExportError(f"{_shown(target)} exists and is not a directory")
        entries = sorted(os.listdir(target))
    except OSError as exc:
        raise ExportError(f"cannot use {_shown(target)} as an export directory: {_oserror(exc)}") from None
    if not entries:
        return []
    refuse = f"{_shown(target)} is not empty and is not an export of study {study!r}"
    advice = "give a new or empty directory"
    try:
        manifest = read_manifest(target)
    except ExportError as exc:
        raise ExportError(f"{refuse} ({exc}); {advice}") from None
    if manifest["study"] != study:
        raise ExportError(f"{refuse} (it holds study {_shown(repr(manifest['study']))}); {advice}")
    try:  # what it did not write, or a name of it that is now a folder or a link
        extra = [e for e in entries if e != MANIFEST and e not in manifest["files"]
                 or not stat.S_ISREG(os.lstat(target / e).st_mode)]
    except OSError as exc:
        raise ExportError(f"cannot use {_shown(target)} as an export directory: {_oserror(exc)}") from None
    if extra:
        more = f" and {len(extra) - 1} more" if len(extra) > 1 else ""
        raise ExportError(f"{_shown(target)} holds an export of {study!r} and also {_shown(repr(extra[0]))}{more}, "
                          f"which an export did not write; {advice}")
    return [*manifest["files"], MANIFEST]


def _columns(frame: pl.DataFrame) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for name, dtype in frame.schema.items():
        out[name] = {"dtype": str(dtype)}
        if isinstance(dtype, pl.Enum):
            out[name]["categories"] = list(dtype.categories)
    return out


def _provenance_frame(provenance: dict[str, dict[str, str]]) -> pl.DataFrame:
    rows = [(item, tag, value) for item, tags in provenance.items() for tag, value in tags.items()]
    return pl.DataFrame(rows, schema=PROVENANCE_SCHEMA, orient="row")


def export(res: Results, path: str | Path) -> dict[str, Any]:
    """Write ``res`` into the directory ``path`` as files any Parquet and JSON reader opens, with
    nothing of ablate, and return the manifest (docs/results.md, "Exports"). ``read_export`` gives
    the same ``Results`` back.

    ``path`` must be new, empty, or a previous export of the same study (its files are replaced);
    anything else is an ExportError, raised before anything is written. The files are written
    beside ``path`` first and moved in, the manifest last."""
    if not isinstance(res, Results):
        raise TypeError(f"export takes one study's Results, not a {type(res).__name__}: export each of them")
    target = Path(path)
    old = check_export_dir(target, res.study)
    spec_data = res.spec_data or res.spec.model_dump(mode="json")
    spec_text = yaml.safe_dump(spec_data, sort_keys=False, allow_unicode=True, width=100)
    if parse_yaml(spec_text, SPEC_FILE) != spec_data:  # a value YAML would read back as another
        raise ExportError(f"the spec of {res.study!r} does not read back from YAML as it was stored")
    frames = {name: getattr(res, name) for name in FRAMES}
    info = {
        "study": res.study, "spec_hash": res.spec_hash, "stores": {k: redact(v) for k, v in res.stores.items()},
        "factors": list(res.factors), "missing": list(res.missing), "sequential": res.sequential,
        "columns": {name: _columns(frame) for name, frame in frames.items()},
    }
    provenance = _provenance_frame(res.trial_provenance)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(prefix=".ablate-export-", dir=target.parent))
    except OSError as exc:
        raise ExportError(f"cannot write an export beside {_shown(target)}: {_oserror(exc)}") from None
    try:
        for name, frame in frames.items():
            frame.write_parquet(scratch / f"{name}.parquet", compression="zstd", compression_level=9)
        provenance.write_parquet(scratch / PROVENANCE_FILE, compression="zstd", compression_level=9)
        (scratch / SPEC_FILE).write_text(spec_text, encoding="utf-8")
        (scratch / STUDY_FILE).write_text(json.dumps(info, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        manifest = {
            "format": EXPORT_FORMAT, "format_version": EXPORT_VERSION, "ablate_version": _ablate_version(),
            "study": res.study, "spec_hash": res.spec_hash,
            "rows": {**{name: frame.height for name, frame in frames.items()}, "provenance": provenance.height},
            "files": {name: {"sha256": _sha256(scratch / name), "bytes": (scratch / name).stat().st_size}
                      for name in EXPORT_FILES},
        }
        (scratch / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
        target.mkdir(exist_ok=True)
        for name in (*EXPORT_FILES, MANIFEST):  # the manifest last: until then the old one stands
            os.replace(scratch / name, target / name)
        for name in old:
            if name not in manifest["files"] and name != MANIFEST:
                (target / name).unlink(missing_ok=True)
    except OSError as exc:
        raise ExportError(f"cannot write the export to {_shown(target)}: {_oserror(exc)}") from None
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return manifest


def _ablate_version() -> str:
    from importlib import metadata

    try:
        return metadata.version("ablate")
    except metadata.PackageNotFoundError:
        return "unknown"


def read_export(path: str | Path) -> Results:
    """The ``Results`` an export holds (``export``), equal to what ``load`` gave when it was written:
    the same frames (dtypes, the factors' level order), spec, provenance and notes. Reads no store.

    Every file is checked against the manifest's sha256 first; ExportError says, on one line,
    what is missing, changed or malformed."""
    folder = Path(path)
    manifest = read_manifest(folder)
    for name in EXPORT_FILES:
        file, entry = folder / name, manifest["files"][name]
        if _regular(file).st_size != entry["bytes"] or _sha256(file) != entry["sha256"]:
            raise ExportError(f"{_shown(file)} does not match the sha256 in its manifest: it changed after the export")
    info = _json_file(folder / STUDY_FILE)
    shape = {"study": str, "spec_hash": str, "stores": dict, "factors": list, "missing": list, "columns": dict}
    bad = [k for k, kind in shape.items() if not isinstance(info, dict) or not isinstance(info.get(k), kind)]
    if bad:
        raise ExportError(f"{_shown(folder / STUDY_FILE)}: \"{bad[0]}\" is missing or not a {shape[bad[0]].__name__}")
    if info["study"] != manifest["study"]:
        raise ExportError(f"{_shown(folder)}: the manifest names study {_shown(repr(manifest['study']))}, "
                          f"{STUDY_FILE} {_shown(repr(info['study']))}")
    try:
        spec_data = parse_yaml((folder / SPEC_FILE).read_bytes(), str(folder / SPEC_FILE))
        spec = design.validate(spec_data, f"the spec of export {folder}")
    except SpecError as exc:
        lines = str(exc).splitlines() or [""]
        more = f" (and {len(lines) - 1} more problems)" if len(lines) > 1 else ""
        raise ExportError(f"{_shown(folder / SPEC_FILE)}: {clip(lines[0])}{more}") from None
    frames = {}
    for name in FRAMES:
        file = folder / f"{name}.parquet"
        frames[name] = _restore(_parquet(file), info["columns"].get(name), file)
        if frames[name].height != manifest["rows"][name]:
            raise ExportError(f"{_shown(file)} has {frames[name].height} rows, the manifest says "
                              f"{manifest['rows'][name]}")
    prov_frame = _parquet(folder / PROVENANCE_FILE)
    if dict(prov_frame.schema) != PROVENANCE_SCHEMA:
        raise ExportError(f"{_shown(folder / PROVENANCE_FILE)} does not have the columns item, tag, value (String)")
    provenance: dict[str, dict[str, str]] = {}
    for item, tag, value in prov_frame.iter_rows():
        provenance.setdefault(item, {})[tag] = value
    return Results(
        study=info["study"], spec=spec, spec_hash=info["spec_hash"],
        stores={str(k): str(v) for k, v in info["stores"].items()}, factors=[str(f) for f in info["factors"]],
        trials=frames["trials"], metrics=frames["metrics"], curves=frames["curves"],
        trial_provenance=provenance, missing=[str(m) for m in info["missing"]], spec_data=spec_data,
        sequential=info.get("sequential") if isinstance(info.get("sequential"), dict) else None,
    )


def read_exports(paths: Sequence[str | Path]) -> Studies:
    """Several exports as one ``Studies``, in the order given: what ``load`` of their studies gave
    when they were written (a comparison report rendered from exports is the one rendered from the
    stores). Every export is checked as ``read_export`` checks it; two exports of one study are an
    ExportError (which to show is not this function's guess)."""
    folders = [Path(p) for p in paths]
    if not folders:
        raise ExportError("no export given: name at least one directory `ablate export` wrote")
    read: dict[str, tuple[Path, Results]] = {}
    for folder in folders:
        res = read_export(folder)
        if res.study in read:
            raise ExportError(f"{_shown(read[res.study][0])} and {_shown(folder)} are both exports of study "
                              f"{_shown(repr(res.study))}: give one of them")
        read[res.study] = (folder, res)
    return Studies.of([res for _, res in read.values()])


def exports_in(folder: str | Path) -> list[Path]:
    """The exports a ``--data`` folder names: the folder itself when it is one (or is not a
    folder), else its subfolders that are exports (what ``ablate export A B DIR`` writes), in name
    order; none: the folder itself, whose reading says why it is not an export."""
    folder = Path(folder)
    try:
        if os.path.lexists(folder / MANIFEST) or not folder.is_dir():
            return [folder]
        found = sorted(d for d in folder.iterdir() if d.is_dir() and os.path.lexists(d / MANIFEST))
    except OSError as exc:
        raise ExportError(f"cannot read {folder}: {exc.strerror or type(exc).__name__}") from None
    return found or [folder]


def read_exports_in(folders: Sequence[str | Path], studies: Sequence[str] = ()) -> Studies:
    """The exports under ``folders`` (each an export or a folder of them, ``exports_in``) as one
    ``Studies``, as ``read_exports`` reads them: those of ``studies`` in that order when it names
    some, else all in the order found. Every export is verified before this returns; ExportError
    for one that cannot be read, or a study they do not hold."""
    read = read_exports([export for folder in folders for export in exports_in(folder)])
    if not studies:
        return read
    absent = [s for s in studies if s not in read.names]
    if absent:
        raise ExportError(f"the exports hold no study {absent[0]!r} (they hold: {', '.join(read.names)})")
    return Studies.of([read[s] for s in studies])


@dataclass(frozen=True)
class Exported:
    """A study ``export_many`` wrote: into ``path``, its ``manifest`` (``export``'s) and what
    could not be read of it (``Results.missing``)."""

    study: str
    path: Path
    manifest: dict[str, Any]
    missing: list[str]

    @property
    def rows(self) -> dict[str, int]:
        """Rows written per frame (``trials``, ``metrics``, ``curves``) and of provenance."""
        return self.manifest["rows"]

    @property
    def files(self) -> int:
        """The files written, the manifest included."""
        return len(self.manifest["files"]) + 1

    @property
    def size(self) -> int:
        """The bytes of the files the manifest lists (its own not counted)."""
        return sum(f["bytes"] for f in self.manifest["files"].values())


def export_many(studies: Sequence[str], path: str | Path, storage: str | None = None,
                tracking_uri: str | None = None, home: str | Path | None = None) -> Iterator[Exported]:
    """Export each of ``studies`` (each once, found as ``locate`` says): one into the directory
    ``path``, several into ``path/STUDY`` each (``ablate export``). Every directory is checked
    (``check_export_dir``: new, empty, or an export of the same study) and every study read before
    anything is written: this call raises ExportError or StorageError. The iterator it returns
    writes one study at a time and yields it written; an ExportError there leaves the studies
    before it written."""
    names = list(dict.fromkeys(studies))
    if not names:
        raise ValueError("export_many() needs at least one study name")
    dest = Path(path)
    targets = {name: dest if len(names) == 1 else dest / name for name in names}
    try:
        if len(names) > 1 and os.path.lexists(dest) and not dest.is_dir():
            raise ExportError(f"{dest} exists and is not a directory")
        for name, target in targets.items():
            check_export_dir(target, name)
    except OSError as exc:
        raise ExportError(str(exc)) from None
    read = {name: load(name, storage, tracking_uri, home=home) for name in names}
    return (Exported(name, targets[name], export(res, targets[name]), list(res.missing)) for name, res in read.items())


def _parquet(file: Path) -> pl.DataFrame:
    try:
        return pl.read_parquet(file)
    except Exception as exc:  # polars raises its own kinds for a file that is not Parquet
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        raise ExportError(f"{_shown(file)} cannot be read as Parquet: {type(exc).__name__}: {first}") from None


def _restore(frame: pl.DataFrame, columns: Any, file: Path) -> pl.DataFrame:
    """``frame`` with the factor columns' Enum (and its level order) that ``study.json`` records:
    Parquet keeps it for polars, but another writer of the file may not have."""
    if not isinstance(columns, dict) or list(columns) != frame.columns:
        raise ExportError(f"{_shown(file)} does not have the columns {STUDY_FILE} lists for it")
    enums = {name: c["categories"] for name, c in columns.items()
             if isinstance(c, dict) and isinstance(c.get("categories"), list)}
    casts = [pl.col(name).cast(pl.Enum([str(x) for x in cats])) for name, cats in enums.items()
             if frame.schema[name] != pl.Enum([str(x) for x in cats])]
    try:
        return frame.with_columns(casts) if casts else frame
    except pl.exceptions.PolarsError as exc:
        raise ExportError(f"{_shown(file)}: a factor column holds a value its levels do not "
                          f"({(str(exc).splitlines() or [''])[0][:200]})") from None
