"""The package's version, and the provenance every commit of ours writes
into its transaction (``transaction_properties``, which pylance's
``read_transaction`` returns unchanged)."""

from __future__ import annotations

from typing import Mapping, Optional

__version__ = "0.1.0"

#: Prefix of the keys the package writes; callers' keys may not use it.
PREFIX = "lance_segmerge."


def transaction_properties(
    verb: str,
    run_id: str,
    caller: Optional[Mapping[str, str]] = None,
    **extra: object,
) -> dict[str, str]:
    """What made a version: our version, the verb, the run (a plan id or a
    fresh id), the verb's own facts (``extra``, e.g. a reindex's model hash)
    and the caller's checked key-values."""
    props = {f"{PREFIX}version": __version__, f"{PREFIX}verb": verb, f"{PREFIX}run": run_id}
    for k, v in extra.items():
        if v is not None:
            props[PREFIX + k] = str(v)
    props.update(caller or {})
    return props
