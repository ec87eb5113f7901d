"""Tables and rich display for listings, plans and reports.

One small table model, :class:`TableSpec` (a title, summary fields, typed
columns, rows), is rendered four ways: a ``pyarrow.Table``
(:func:`to_arrow`), a ``pandas.DataFrame`` (:func:`to_pandas`), HTML for
notebooks (:func:`to_html`, truncated with totals) and plain text
(:func:`to_text`).

Objects opt in with the :class:`Tabular` mixin. A class that knows its
table overrides ``_table_spec``; any frozen dataclass report that holds a
tuple of record dataclasses (one record per segment, task or check) gets
one by introspection, so reports added later display without code of
their own.
"""

from __future__ import annotations

import dataclasses
import html
import typing
from datetime import datetime
from typing import Any, ClassVar, Iterable, Optional, Sequence

__all__ = [
    "Column", "TableSpec", "Tabular", "options", "to_arrow", "to_pandas", "to_html", "to_text", "human_bytes",
    "compact_ids", "short_id", "plural",
]


class _Options:
    """Display options (module-wide).

    Attributes
    ----------
    max_rows : int
        Rows an HTML table shows before it elides the middle (the first
        ``max_rows - 5`` and the last 5 stay).
    max_text_rows : int
        The same for text (``str`` / ``repr`` of listings).
    """

    max_rows: int = 20
    max_text_rows: int = 10


options = _Options()

#: Column kinds: how a value is shown, and its Arrow type.
KINDS = ("text", "uuid", "int", "bytes", "float", "seconds", "ids", "bool", "time", "list")


@dataclasses.dataclass(frozen=True)
class Column:
    """One column of a table.

    Parameters
    ----------
    name : str
        Column name in Arrow and pandas.
    kind : str
        One of :data:`KINDS`: decides the Arrow type and the shown format.
    label : str, optional
        Header in HTML and text (the name when omitted).
    total : bool
        Sum the column in the totals row.
    show : bool
        Show the column in HTML and text (every column goes to Arrow).
    """

    name: str
    kind: str = "text"
    label: Optional[str] = None
    total: bool = False
    show: bool = True

    @property
    def header(self) -> str:
        return self.label or self.name


@dataclasses.dataclass(frozen=True)
class TableSpec:
    """A table: what every renderer here takes.

    Parameters
    ----------
    title : str
        One line naming what the table shows.
    columns : tuple of Column
    rows : tuple of tuple
        One tuple per row, values in column order (``None`` for unknown).
    summary : tuple of (str, str)
        Fields shown between the title and the table.
    row_name : str
        What a row is (``"segment"``, ``"task"``), for counts.
    """

    title: str
    columns: tuple[Column, ...]
    rows: tuple[tuple[Any, ...], ...]
    summary: tuple[tuple[str, str], ...] = ()
    row_name: str = "row"

    def totals(self) -> dict[str, Any]:
        """Sums of the columns marked ``total`` (over known values)."""
        out: dict[str, Any] = {}
        for i, c in enumerate(self.columns):
            known = [r[i] for r in self.rows if r[i] is not None]
            if c.total:
                out[c.name] = sum(known) if known else None
        return out


def plural(n: int, word: str) -> str:
    return f"{n:,} {word}" + ("" if n == 1 else "s")


def human_bytes(n: Optional[float]) -> str:
    """``1536`` -> ``"1.5 KiB"``; ``None`` -> ``"-"``."""
    if n is None:
        return "-"
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(size) < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return str(n)  # pragma: no cover


def short_id(value: Any) -> str:
    """A uuid as shown in tables and messages: its first 8 characters."""
    return str(value)[:8]


def compact_ids(ids: Sequence[int], limit: int = 4) -> str:
    """``[0, 1, 2, 3, 7]`` -> ``"0-3, 7"`` (at most ``limit`` runs shown)."""
    runs: list[tuple[int, int]] = []
    for i in sorted(ids):
        if runs and i == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], i)
        else:
            runs.append((i, i))
    parts = [str(a) if a == b else f"{a}-{b}" for a, b in runs[:limit]]
    if len(runs) > limit:
        parts.append(f"... ({len(ids)})")
    return ", ".join(parts)


def fmt(value: Any, kind: str) -> str:
    """A value as shown in HTML and text."""
    if value is None:
        return "-"
    if kind == "uuid":
        return short_id(value)
    if kind == "int":
        return f"{int(value):,}"
    if kind == "bytes":
        return human_bytes(value)
    if kind == "float":
        return f"{float(value):.3g}"
    if kind == "seconds":
        return f"{float(value):.2f}s"
    if kind == "ids":
        return compact_ids(list(value))
    if kind == "bool":
        return "yes" if value else "no"
    if kind == "time":
        return value.strftime("%Y-%m-%d %H:%M:%S") if isinstance(value, datetime) else str(value)
    if kind == "list":
        items = [short_id(v) if _looks_like_uuid(v) else str(v) for v in value]
        return ", ".join(items[:3]) + (f", ... ({len(items)})" if len(items) > 3 else "")
    return str(value)


def _looks_like_uuid(v: Any) -> bool:
    return isinstance(v, str) and len(v) == 36 and v.count("-") == 4


# -- Arrow and pandas ----------------------------------------------------------


def _need(module: str, extra: str) -> Any:
    try:
        return __import__(module)
    except ImportError as exc:
        raise ImportError(f"this needs {module}: pip install 'lance-segmerge[{extra}]'") from exc


def _arrow_type(pa: Any, kind: str) -> Any:
    return {
        "text": pa.string(),
        "uuid": pa.string(),
        "int": pa.int64(),
        "bytes": pa.int64(),
        "float": pa.float64(),
        "seconds": pa.float64(),
        "ids": pa.list_(pa.int64()),
        "bool": pa.bool_(),
        "time": pa.timestamp("ms", tz="UTC"),
        "list": pa.list_(pa.string()),
    }.get(kind)


def to_arrow(spec: TableSpec) -> Any:
    """The table as a ``pyarrow.Table``: one row per row, every column,
    typed by its kind; the title and summary go to the schema metadata."""
    pa = _need("pyarrow", "lance")
    arrays = {}
    for i, c in enumerate(spec.columns):
        values = [r[i] for r in spec.rows]
        if c.kind == "list":
            values = [None if v is None else [str(x) for x in v] for v in values]
        elif c.kind == "ids":
            values = [None if v is None else [int(x) for x in v] for v in values]
        arrays[c.name] = pa.array(values, type=_arrow_type(pa, c.kind))
    meta = {"title": spec.title, **{f"summary.{k}": v for k, v in spec.summary}}
    return pa.table(arrays).replace_schema_metadata(meta)


def to_pandas(spec: TableSpec) -> Any:
    """The table as a ``pandas.DataFrame`` (needs pandas)."""
    _need("pandas", "notebook")
    return to_arrow(spec).to_pandas()


# -- HTML and text ---------------------------------------------------------------


def _window(n: int, max_rows: int) -> tuple[list[int], list[int]]:
    """Row indices shown before and after the elision mark."""
    if n <= max_rows:
        return list(range(n)), []
    tail = min(5, max(1, max_rows // 4))
    head = max(1, max_rows - tail)
    return list(range(head)), list(range(n - tail, n))


_CSS = (
    "<style>.lsm-table{border-collapse:collapse;font-size:12px}"
    ".lsm-table th,.lsm-table td{padding:2px 8px;text-align:right;border-bottom:1px solid #ddd}"
    ".lsm-table th.l,.lsm-table td.l{text-align:left}"
    ".lsm-table tfoot td,.lsm-table tfoot th{font-weight:bold;border-top:2px solid #999}"
    ".lsm-sum{margin:2px 0 6px 0;font-size:12px;color:#444}</style>"
)

_LEFT = {"text", "uuid", "ids", "list", "time", "bool"}


def _summary_html(spec: TableSpec) -> str:
    return " &middot; ".join(
        f"{html.escape(k)}: <code>{html.escape(v)}</code>" if k else html.escape(v) for k, v in spec.summary
    )


def to_html(spec: TableSpec, max_rows: Optional[int] = None) -> str:
    """The table as HTML: title, summary, the first and last rows with the
    middle elided past ``max_rows`` (default :data:`options.max_rows`), and
    a totals row."""
    max_rows = options.max_rows if max_rows is None else max_rows
    cols = [(i, c) for i, c in enumerate(spec.columns) if c.show]
    esc = html.escape
    out = [_CSS, '<div class="lance-segmerge">', f"<div><b>{esc(spec.title)}</b></div>"]
    if spec.summary:
        out.append(f'<div class="lsm-sum">{_summary_html(spec)}</div>')
    if not cols:
        out.append("</div>")
        return "".join(out)
    out.append('<table class="lsm-table"><thead><tr>')
    out += [f'<th class="{"l" if c.kind in _LEFT else ""}">{esc(c.header)}</th>' for _, c in cols]
    out.append("</tr></thead><tbody>")
    head, tail = _window(len(spec.rows), max_rows)

    def row(r: tuple[Any, ...]) -> str:
        cells = []
        for i, c in cols:
            text = esc(fmt(r[i], c.kind))
            title = f' title="{esc(str(r[i]))}"' if c.kind in ("uuid", "ids", "list") and r[i] is not None else ""
            cells.append(f'<td class="{"l" if c.kind in _LEFT else ""}"{title}>{text}</td>')
        return "<tr>" + "".join(cells) + "</tr>"

    out += [row(spec.rows[i]) for i in head]
    if tail:
        hidden = len(spec.rows) - len(head) - len(tail)
        out.append(f'<tr><td class="l" colspan="{len(cols)}">&hellip; {esc(plural(hidden, spec.row_name))} more &hellip;</td></tr>')
        out += [row(spec.rows[i]) for i in tail]
    out.append("</tbody>")
    totals = spec.totals()
    if totals or len(spec.rows) != 1:
        cells = []
        for n, (_, c) in enumerate(cols):
            if c.name in totals:
                cells.append(f"<td>{esc(fmt(totals[c.name], c.kind))}</td>")
            elif n == 0:
                cells.append(f'<td class="l">{esc("total: " + plural(len(spec.rows), spec.row_name))}</td>')
            else:
                cells.append("<td></td>")
        out.append("<tfoot><tr>" + "".join(cells) + "</tr></tfoot>")
    out.append("</table></div>")
    return "".join(out)


def to_text(spec: TableSpec, max_rows: Optional[int] = None) -> str:
    """The table as aligned plain text, elided past ``max_rows`` (default
    :data:`options.max_text_rows`), with a totals line."""
    max_rows = options.max_text_rows if max_rows is None else max_rows
    cols = [(i, c) for i, c in enumerate(spec.columns) if c.show]
    lines = [spec.title]
    if spec.summary:
        lines.append("  " + ", ".join(f"{k}: {v}" if k else v for k, v in spec.summary))
    if not cols or not spec.rows:
        return "\n".join(lines)
    head, tail = _window(len(spec.rows), max_rows)
    table: list[Optional[list[str]]] = [[c.header for _, c in cols]]
    table += [[fmt(spec.rows[r][i], c.kind) for i, c in cols] for r in head]
    if tail:
        table.append(None)  # the elision mark
        table += [[fmt(spec.rows[r][i], c.kind) for i, c in cols] for r in tail]
    widths = [max(len(t[k]) for t in table if t is not None) for k in range(len(cols))]
    for t in table:
        if t is None:
            lines.append(f"  ... {plural(len(spec.rows) - len(head) - len(tail), spec.row_name)} more ...")
            continue
        cells = [v.ljust(w) if c.kind in _LEFT else v.rjust(w) for v, w, (_, c) in zip(t, widths, cols)]
        lines.append("  " + "  ".join(cells).rstrip())
    totals = spec.totals()
    parts = [plural(len(spec.rows), spec.row_name)]
    parts += [f"{c.header} {fmt(totals[c.name], c.kind)}" for _, c in cols if c.name in totals]
    lines.append("  total: " + ", ".join(parts))
    return "\n".join(lines)


def kv_html(title: str, items: Iterable[tuple[str, Any]]) -> str:
    """A vertical key/value table (for one record, e.g. one segment)."""
    esc = html.escape
    rows = "".join(f'<tr><th class="l">{esc(k)}</th><td class="l">{esc(str(v))}</td></tr>' for k, v in items)
    return f'{_CSS}<div class="lance-segmerge"><div><b>{esc(title)}</b></div><table class="lsm-table">{rows}</table></div>'


# -- introspection for dataclass reports -------------------------------------------

_SCALARS = (str, int, float, bool, datetime)


def _hints(cls: type) -> dict[str, Any]:
    """The resolved type hints of a dataclass (empty when they do not
    resolve)."""
    try:
        return typing.get_type_hints(cls)
    except Exception:  # noqa: BLE001 - a hint naming what is not importable here
        return {}


def _unwrap(hint: Any) -> Any:
    """``Optional[X]`` -> ``X``."""
    args = typing.get_args(hint)
    if typing.get_origin(hint) is typing.Union and type(None) in args:
        rest = [a for a in args if a is not type(None)]
        return rest[0] if len(rest) == 1 else hint
    return hint


def _record_type(hint: Any) -> Optional[type]:
    """The record class of a ``tuple[Record, ...]`` hint, if it is a dataclass."""
    hint = _unwrap(hint)
    if typing.get_origin(hint) in (tuple, list):
        args = [a for a in typing.get_args(hint) if a is not Ellipsis]
        if len(args) == 1 and isinstance(args[0], type) and dataclasses.is_dataclass(args[0]):
            return args[0]
    return None


def _kind_of_hint(name: str, hint: Any) -> Optional[str]:
    """The column kind of a record field, from its name and type; None when
    it does not fit a column (nested records, mappings)."""
    hint = _unwrap(hint)
    words = set(name.split("_"))
    if hint is bool:
        return "bool"
    if hint is int:
        return "bytes" if "bytes" in words else "int"
    if hint is float:
        return "seconds" if "seconds" in words or name.endswith("_s") else "float"
    if hint is datetime:
        return "time"
    if hint is str:
        return "uuid" if name == "uuid" or name.endswith("_uuid") else "text"
    if typing.get_origin(hint) in (tuple, list):
        args = [a for a in typing.get_args(hint) if a is not Ellipsis]
        if len(args) == 1 and args[0] is int:
            return "ids"
        if len(args) == 1 and args[0] in (str, float):
            return "list"
    return None


def _kind_of(name: str, values: Sequence[Any]) -> Optional[str]:
    """The column kind of a field from its values (when its type hint does
    not resolve)."""
    known = [v for v in values if v is not None]
    if not known:
        return "text"
    v = known[0]
    if isinstance(v, bool):
        return "bool"
    words = set(name.split("_"))
    if isinstance(v, int):
        return "bytes" if "bytes" in words else "int"
    if isinstance(v, float):
        return "seconds" if "seconds" in words or name.endswith("_s") else "float"
    if isinstance(v, datetime):
        return "time"
    if isinstance(v, str):
        return "uuid" if name == "uuid" or name.endswith("_uuid") or _looks_like_uuid(v) else "text"
    if isinstance(v, (tuple, list)) and all(isinstance(x, _SCALARS) for x in v):
        return "ids" if all(isinstance(x, int) and not isinstance(x, bool) for x in v) and v else "list"
    return None


def _totalled(name: str, kind: str) -> bool:
    words = set(name.split("_"))
    return kind in ("int", "bytes", "seconds") and (bool(words & {"rows", "bytes", "seconds"}) or name.startswith("num_"))


def spec_from_records(
    title: str,
    records: Sequence[Any],
    summary: Sequence[tuple[str, str]] = (),
    row_name: str = "row",
    record_type: Optional[type] = None,
) -> TableSpec:
    """A table with one row per record dataclass: its plain fields are the
    columns (nested records are left out); numeric fields whose name has a
    word ``rows``, ``bytes`` or ``seconds`` (``rows_read``, ``index_bytes``)
    or starts with ``num_`` are totalled. The columns come from the record
    type's hints, so an empty table has its columns too."""
    cls = record_type or (type(records[0]) if records else None)
    if cls is None:
        return TableSpec(title, (), (), tuple(summary), row_name)
    hints = _hints(cls)
    columns: list[Column] = []
    keep: list[str] = []
    for f in dataclasses.fields(cls):
        if f.name in hints:
            kind = _kind_of_hint(f.name, hints[f.name])
        else:
            kind = _kind_of(f.name, [getattr(r, f.name) for r in records])
        if kind is None:
            continue
        columns.append(Column(f.name, kind, total=_totalled(f.name, kind)))
        keep.append(f.name)
    rows = tuple(tuple(getattr(r, n) for n in keep) for r in records)
    return TableSpec(title, tuple(columns), rows, tuple(summary), row_name)


def _summary_value(v: Any) -> Optional[str]:
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        return f"{v:.3g}"
    if isinstance(v, (str, datetime)):
        return str(v)
    return None


class Tabular:
    """Mixin: ``to_arrow()``, ``to_pandas()``, ``_repr_html_()`` and
    ``to_text()`` from one :class:`TableSpec`.

    The default ``_table_spec`` reads a dataclass: its first field typed
    ``tuple[Record, ...]`` (a dataclass record) gives the rows (name it
    with ``_table_field``), its plain fields the summary. Override it for
    a table of one's own.
    """

    _table_field: ClassVar[Optional[str]] = None
    _row_name: ClassVar[str] = "row"

    def _table_spec(self) -> TableSpec:
        if not dataclasses.is_dataclass(self):
            raise TypeError(f"{type(self).__name__} must define _table_spec")
        hints = _hints(type(self))
        records: Sequence[Any] = ()
        record_type: Optional[type] = None
        summary: list[tuple[str, str]] = []
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            rtype = _record_type(hints.get(f.name))
            if rtype is None and isinstance(v, (tuple, list)) and v and all(dataclasses.is_dataclass(x) for x in v):
                rtype = type(v[0])
            if rtype is not None and record_type is None and self._table_field in (None, f.name):
                records, record_type = v, rtype
                continue
            if f.name == "format_version":
                continue
            shown = _summary_value(v)
            if shown is not None:
                summary.append((f.name, shown))
        return spec_from_records(type(self).__name__, records, summary, self._row_name, record_type)

    def to_arrow(self) -> Any:
        """The table as a ``pyarrow.Table``, one row per record."""
        return to_arrow(self._table_spec())

    def to_pandas(self) -> Any:
        """The table as a ``pandas.DataFrame`` (needs pandas)."""
        return to_pandas(self._table_spec())

    def to_text(self, max_rows: Optional[int] = None) -> str:
        """The table as aligned text, elided past ``max_rows``."""
        return to_text(self._table_spec(), max_rows)

    def _repr_html_(self) -> str:
        return to_html(self._table_spec())

    def __str__(self) -> str:
        return self.to_text()
