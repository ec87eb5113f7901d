"""Bad input raises the matching typed exception and never kills the
interpreter."""

from __future__ import annotations

import os
import shutil

import lancegen
import pytest

import lance_segmerge as ls
from lance_segmerge.errors import translate


def test_not_a_dataset(tmp_path):
    with pytest.raises(ls.NotFoundError) as ei:
        ls.open(str(tmp_path))
    assert isinstance(ei.value, FileNotFoundError)
    assert "not a Lance dataset" in str(ei.value)
    with pytest.raises(ls.NotFoundError):
        ls.open(str(tmp_path / "missing"))


def test_missing_version(delta_datasets):
    with pytest.raises(ls.NotFoundError, match="no version 999"):
        ls.open(delta_datasets["IVF_PQ"].uri, version=999)


def test_unknown_index_name(delta_datasets):
    with pytest.raises(ls.NotFoundError, match="index \"nope\" does not exist"):
        ls.open(delta_datasets["IVF_PQ"].uri).list_index_segments("nope")


@pytest.mark.parametrize(
    "args",
    [("",), (123,), ("/x", 0), ("/x", -3), ("/x", "7")],
)
def test_invalid_arguments(args):
    with pytest.raises(ls.InvalidInputError) as ei:
        ls.open(*args)
    assert isinstance(ei.value, ValueError)


def test_unsupported_scheme():
    with pytest.raises(ls.UnsupportedError):
        ls.open("abfss://container@account.dfs.core.windows.net/table.lance")
    with pytest.raises(ls.InvalidInputError):
        ls.open("ftp://host/table.lance")


def test_truncated_manifest(delta_datasets, copy_dataset):
    uri = copy_dataset(delta_datasets["IVF_PQ"].uri)
    path = lancegen.latest_manifest_path(uri)
    data = open(path, "rb").read()
    for cut in (len(data) // 2, len(data) - 1, 10):
        with open(path, "wb") as f:
            f.write(data[:cut])
        with pytest.raises(ls.CorruptError):
            ls.open(uri)
    # A manifest of zero bytes, too.
    open(path, "wb").close()
    with pytest.raises(ls.CorruptError):
        ls.open(uri)


def test_unknown_reader_flag(delta_datasets, copy_dataset):
    uri = copy_dataset(delta_datasets["IVF_PQ"].uri)
    lancegen.set_manifest_varint_field(lancegen.latest_manifest_path(uri), 9, 1 << 20)
    # pylance refuses it too: the flag really means "not for older readers".
    with pytest.raises(Exception, match="cannot be read by this version of Lance"):
        lancegen.lance.dataset(uri)
    with pytest.raises(ls.UnsupportedError, match="reader feature flags 0x100000"):
        ls.open(uri)
    # A flag we know (deletion files) is fine.
    lancegen.set_manifest_varint_field(lancegen.latest_manifest_path(uri), 9, 1)
    assert ls.open(uri).list_index_segments()


def test_missing_segment_file(delta_datasets, copy_dataset):
    uri = copy_dataset(delta_datasets["IVF_SQ"].uri)
    seg = ls.open(uri).list_index_segments()[1]
    os.remove(os.path.join(uri, "_indices", seg.uuid, "auxiliary.idx"))
    with pytest.raises(ls.NotFoundError, match="auxiliary.idx"):
        ls.open(uri).list_index_segments()
    # The manifest alone still lists.
    assert len(ls.open(uri).list_index_segments(with_stats=False)) == 4


def test_corrupt_segment_file(delta_datasets, copy_dataset):
    uri = copy_dataset(delta_datasets["IVF_FLAT"].uri)
    seg = ls.open(uri).list_index_segments()[0]
    path = os.path.join(uri, "_indices", seg.uuid, "index.idx")
    data = open(path, "rb").read()
    with open(path, "wb") as f:
        f.write(data[: len(data) - 7])
    with pytest.raises(ls.CorruptError):
        ls.open(uri).list_index_segments()


@pytest.mark.parametrize(
    "text,cls",
    [
        ("[invalid_input] x", ls.InvalidInputError),
        ("[not_found] x", ls.NotFoundError),
        ("[corrupt] x", ls.CorruptError),
        ("[conflict] x", ls.ConflictError),
        ("[cancelled] x", ls.CancelledError),
        ("[unsupported] x", ls.UnsupportedError),
        ("[io] x", ls.StorageError),
        ("[internal] x", ls.InternalError),
        ("[weird] x", ls.InternalError),
        ("no tag", ls.InternalError),
    ],
)
def test_error_tags(text, cls):
    err = translate(RuntimeError(text))
    assert type(err) is cls and isinstance(err, ls.SegmergeError)
    if text.startswith("[") and "weird" not in text:
        assert str(err) == "x"


def test_bad_segment_json_is_typed(delta_datasets):
    from lance_segmerge import _ffi

    with pytest.raises(ls.InvalidInputError):
        _ffi.call("DescribeSegment", "", "", "{not json", False)
    with pytest.raises(ls.InvalidInputError):
        _ffi.call("DescribeSegment", "", "", '{"uuid": "zzz"}', False)
    with pytest.raises(ls.InvalidInputError):
        _ffi.call("ListSegments", delta_datasets["IVF_PQ"].uri, "[1,2]", 0, "", False)


def test_interpreter_survives_many_errors(tmp_path):
    shutil.rmtree(tmp_path, ignore_errors=True)
    for _ in range(200):
        with pytest.raises(ls.NotFoundError):
            ls.open(str(tmp_path))
