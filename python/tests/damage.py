"""Damaging a segment on purpose, the way real faults do, for the tests of
verify and repair (the kernel's DamageSegment, a test tool built only with
the segmerge_testtools tag)."""

from __future__ import annotations

import json
from typing import Any

import lance_segmerge as ls
from lance_segmerge import _ffi


def damage_segment(dataset: Any, index_name: str, segment: str, kind: str, **spec: Any) -> str:
    """Damage one segment: ``layout_again``, ``flip_bits``, ``truncate``,
    ``foreign_row_id``, ``wrong_centroid``, ``flip_flag``. Publishes a
    version listing the damaged segment in place of the original
    (``truncate`` cuts the file in place) and returns its uuid."""
    ds = ls.open(dataset)
    return str(_ffi.call("DamageSegment", ds.uri, ds.options_json, index_name, segment, json.dumps({"kind": kind, **spec})))
