"""dcgm-exporter's counters file (``-f/--collectors``): which fields it exports, and how.

The file is CSV: ``DCGM field, Prometheus type, help``, one field per line, ``#`` starts a comment,
blanks around fields are trimmed, and a row of any other shape stops the exporter. The type is
``gauge`` or ``counter`` (the ``# TYPE`` line), or ``label``: the field's value becomes a label of
every series (``DCGM_FI_DRIVER_VERSION, label, Driver Version``). A field the exporter's DCGM does
not know stops it too; the simulator refuses a field it does not model in the same way, so a
counters file the simulator accepts names only fields the real exporter would serve.

The dcgm role renders this file per host for the DCGM version the inventory pins, so the names in
it are that version's (``DCGM_FI_DEV_CLOCK_THROTTLE_REASONS`` for DCGM 3, ``..._CLOCKS_EVENT_...``
for 4); the simulator serves whichever name the file lists.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from pathlib import Path

from opsctl.errors import ConfigError

DEFAULT_PATH = "/etc/dcgm-exporter/default-counters.csv"  # dcgm-exporter's default --collectors
TYPES = ("gauge", "counter", "label")


class CollectorsError(ConfigError):
    """A counters file dcgm-exporter (or its simulator) would refuse to start with."""


@dataclass(frozen=True)
class Counter:
    field: str
    type: str  # gauge | counter | label
    help: str


def parse(text: str, source: str, known: frozenset[str]) -> list[Counter]:
    """The rows of a counters file, in file order; ``known`` is every field name the caller serves."""
    reader = csv.reader(io.StringIO(text))
    out: list[Counter] = []
    for row in reader:
        if not row or row[0].lstrip().startswith("#") or not any(c.strip() for c in row):
            continue
        where = f"{source}:{reader.line_num}"
        if len(row) != 3:
            raise CollectorsError(f"{where}: want 'field, type, help', got {len(row)} fields")
        name, kind, help_ = (c.strip() for c in row)
        if kind not in TYPES:
            raise CollectorsError(f"{where}: {name}: type {kind!r} is not one of {', '.join(TYPES)}")
        if name not in known:
            raise CollectorsError(f"{where}: unknown field {name!r} (not a field this DCGM simulator serves)")
        if any(c.field == name for c in out):
            continue  # the first row of a field wins
        out.append(Counter(name, kind, help_))
    return out


def load(path: str | Path, known: frozenset[str]) -> list[Counter]:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise CollectorsError(f"counters file {path}: {exc.strerror or exc}") from None
    return parse(text, str(path), known)
