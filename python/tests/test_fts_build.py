"""Full-text (INVERTED) segments built by us, checked against real Lance:
on the same table, pylance 14.0.2's create_scalar_index and our
create_index (fragment-scoped builds, merged or committed side by side)
give every document the same token count and every query the same rows
and BM25 scores, for multilingual text and for English words chosen to
exercise the stemmer and the stop words. A configuration whose tokens we
do not reproduce is refused, and nothing is left behind."""

from __future__ import annotations

import random
import shutil
import subprocess
import sys
from pathlib import Path

import lance
import pyarrow as pa
import pytest
from lance.file import LanceFileReader

import lance_segmerge as ls
from test_fts import _answers, _close

# Words of several scripts and the cases each filter has: capitals and
# İ (lower-casing), ß æ œ ﬁ Ａ ½ ² ₂ (folding), Devanagari's marks, CJK
# runs, Arabic digits, tokens at the 40-byte limit, punctuation inside
# words, a non-breaking space (not a separator), an emoji (a separator).
MULTI = """The Quick brown foxes were running over the lazy dogs! Café naïve résumé über straße ÆSIR œuvre Œuvre déjà
été garçon français Noël Mädchen Größe Fußball Äpfel niño España corazón ¿Qué? ¡Hola! ação coração Москва привет
Россия ЁЛКА Αθήνα ΣΟΦΙΑ λόγος ΟΔΟΣ 日本語 東京 中文 汉字 ひらがな カタカナ 한국어 서울 مرحبا العربية ١٢٣ नमस्ते हिन्दी
İstanbul ılık Tiếng Việt 3.14 2024 ½ ¼ x² H₂O e-mail foo_bar it's don't U.S.A C++ co-operate naïveté ﬁnance
Ａｐｐｌｅ ＡＢＣ１２３ Łódź Ørsted Þór ðe ß µm ª º ǅungla supercalifragilisticexpialidocious
aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb ééééééééééééééééééééé
🙂 emoji👍ok nbsp\u00a0word organization universities international generously happiness dying skies news
added ebbed proceed exceeding evening cats running runs ran easily fairly sky""".replace("\\u00a0", "\u00a0").split()

# English words whose stems differ between Snowball revisions, and stop
# words: each is its own document, so every one is checked.
ENGLISH = """organization organic organs universal university universe lateral later emergency emerge past paste pasted
pasting international interval internal interfere entomologist geologist apologist added adding ebbed erred odd
evening inning outing canning herring earring proceed exceed succeed proceeded exceeding dying lying tying vying
flying skies skis sky news atlas cosmos bias andes generously generate general communism arsenic arsenal happiness
relational conditional rational valency hesitancy digitizer radically differently analogously vietnamization
predication operator feudalism decisiveness hopefulness callousness formality sensitivity sensibility triplicate
formative formalize electricity electrical hopeful goodness revival allowance inference airliner gyroscopic
adjustable defensible irritant replacement adjustment dependent adoption homologous effective bowdlerize ties
cries gas kiwis cats caress consign consigned consigning consignment consist consisted consistency consistent
hoping hopping filing filling controlling generously fluently luxuriously logical biology ecology knightly
quickly early only singly idly gently ugly yelling yes say saying enjoy obeying yearly cry cried crying the of
and a no not nor very about again against himself yourselves should would could re us""".split()


def _table(words: list[str], n: int, seed: int, nulls: bool = True) -> pa.Table:
    rng = random.Random(seed)
    seps = [" ", " ", " ", ", ", ". ", "; ", " - ", "\n", "/", "("]
    text: list[str | None] = []
    for i in range(n):
        if nulls and i % 53 == 0:
            text.append(None)
        elif nulls and i % 59 == 0:
            text.append("" if i % 2 else "the of and")  # no tokens: not a document
        else:
            text.append("".join(rng.choice(words) + rng.choice(seps) for _ in range(rng.randint(1, 20))))
    return pa.table({"id": pa.array(range(n), pa.int64()), "text": pa.array(text)})


def _pair(tmp_path: Path, table: pa.Table, rows_per_file: int, **kw) -> tuple[str, str]:
    a, b = str(tmp_path / "theirs"), str(tmp_path / "ours")
    lance.write_dataset(table, a, max_rows_per_file=rows_per_file, **kw)
    lance.dataset(a).delete("id % 41 = 7")
    shutil.copytree(a, b)
    return a, b


def _docs(uri: str, name: str = "text_idx") -> list[tuple[int, int]]:
    """Every document of the index's segments: (row id, token count)."""
    out = []
    for seg in ls.open(uri).list_index_segments(name):
        for f in (Path(uri) / "_indices" / seg.uuid).glob("part_*_docs.lance"):
            t = LanceFileReader(str(f)).read_all().to_table()
            out += zip(t["_rowid"].to_pylist(), t["_num_tokens"].to_pylist())
    return sorted(out)


def _queries(words: list[str], phrases: bool = True) -> list[str]:
    """Every word of the corpus on its own, a few together, and (with
    positions) some phrases."""
    qs = sorted(set(words))
    qs += [" ".join(qs[i:i + 3]) for i in range(0, len(qs), 17)]
    return qs + (['"brown foxes"', '"lazy dogs"', '"Москва привет"'] if phrases else [])


def test_build_tokenizes_scores_and_merges_as_pylance(tmp_path):
    """Multilingual text with positions, 3 fragments, deletes, nulls and
    documents without tokens: our build (a segment per fragment on two
    worker processes, merged) has pylance's documents, token counts and
    token set, and answers every word, several words and phrases with
    pylance's rows and scores."""
    theirs, ours = _pair(tmp_path, _table(MULTI, 1500, 1), 500)
    lance.dataset(theirs).create_scalar_index("text", "INVERTED", with_position=True)
    ls.create_index(ours, "text", "FTS", params={"with_position": True}, executor="processes", max_workers=2,
                    fragments_per_task=1, progress=False)

    assert _docs(ours) == _docs(theirs)
    (a,), (b,) = ls.open(theirs).list_index_segments("text_idx"), ls.open(ours).list_index_segments("text_idx")
    assert (b.num_rows, b.distinct_keys, b.index_version, b.index_details) == (a.num_rows, a.distinct_keys, a.index_version, a.index_details)
    qs = _queries(MULTI)
    _close(_answers(ours, qs), _answers(theirs, qs))
    # verify analyzes a sample of documents again, on pylance's index as on ours
    for uri in (ours, theirs):
        rep = ls.verify_index(uri, "text_idx")
        assert rep.clean, rep
        (keys,) = [c for s in rep.segments for c in s.checks if c.name == "keys"]
        assert keys.verdict == "ok" and keys.numbers["checked"] > 100 and keys.numbers["mismatched"] == 0, keys


def test_stemmer_and_stop_words_as_pylance(tmp_path):
    """One English word per document: every document's token count and
    every word's answers equal pylance's (Snowball English 3.x stems, the
    stop-word list pylance 14.0.2 removes)."""
    words = ENGLISH + [w.capitalize() for w in ENGLISH[:40]]
    table = pa.table({"id": pa.array(range(len(words)), pa.int64()), "text": words})
    theirs, ours = str(tmp_path / "theirs"), str(tmp_path / "ours")
    lance.write_dataset(table, theirs)
    shutil.copytree(theirs, ours)
    lance.dataset(theirs).create_scalar_index("text", "INVERTED")
    ls.create_index(ours, "text", "INVERTED", progress=False)
    assert _docs(ours) == _docs(theirs)
    _close(_answers(ours, sorted(set(words))), _answers(theirs, sorted(set(words))))


@pytest.mark.parametrize("params", [
    {"base_tokenizer": "whitespace", "ascii_folding": False, "stem": False, "with_position": True},
    {"lower_case": False, "stem": False, "ascii_folding": False, "remove_stop_words": False, "max_token_length": None},
    {"custom_stop_words": ["quick", "brown"], "max_token_length": 8},
], ids=["whitespace", "raw-case", "custom-stops"])
def test_segments_side_by_side_score_as_one_index(tmp_path, params):
    """Other analyzer parameters, kept in the segments' metadata; three
    segments built apart and committed side by side (no merge) answer as
    pylance's one index: BM25 is computed over the whole corpus. Then
    pylance's own optimize merges them and still answers the same."""
    theirs, ours = _pair(tmp_path, _table(MULTI, 900, 2), 300)
    lance.dataset(theirs).create_scalar_index("text", "INVERTED", **params)
    ls.create_index(ours, "text", "INVERTED", params=params, fragments_per_task=1, target_segments=3, progress=False)
    assert len(ls.open(ours).list_index_segments("text_idx")) == 3
    assert _docs(ours) == _docs(theirs)
    qs = _queries(MULTI, phrases=params.get("with_position", False))
    want = _answers(theirs, qs)
    _close(_answers(ours, qs), want)
    lance.dataset(ours).optimize.optimize_indices(num_indices_to_merge=10)
    assert len(ls.open(ours).list_index_segments("text_idx")) == 1
    _close(_answers(ours, qs), want)


def test_a_segment_joins_pylance_index(tmp_path):
    """A segment we build over an appended fragment joins an index pylance
    built, with that index's parameters; committed, it answers as
    pylance's own optimize delta."""
    theirs, ours = _pair(tmp_path, _table(MULTI, 600, 3), 600)
    for uri in (theirs, ours):
        lance.dataset(uri).create_scalar_index("text", "INVERTED", with_position=True, stem=False)
        lance.write_dataset(_table(MULTI, 200, 4, nulls=False), uri, mode="append")
    lance.dataset(theirs).optimize.optimize_indices(num_indices_to_merge=0)
    new = max(f.fragment_id for f in lance.dataset(ours).get_fragments())
    with pytest.raises(ls.InvalidInputError, match="analyzed with"):
        ls.build_index_segment(ours, "text", "INVERTED", [new], name="text_idx", params={"stem": True})
    seg = ls.build_index_segment(ours, "text", "INVERTED", [new], name="text_idx")
    ls.commit_existing_index_segments(ours, "text_idx", "text", [seg])
    assert _docs(ours) == _docs(theirs)
    qs = _queries(MULTI)
    _close(_answers(ours, qs), _answers(theirs, qs))


def test_configurations_we_do_not_reproduce_are_refused(tmp_path):
    uri = str(tmp_path / "t")
    lance.write_dataset(pa.table({"id": [1, 2], "text": ["plain text", "Roman Ⅻ and circled Ⓐ"]}), uri)
    before = sorted(p.relative_to(uri) for p in Path(uri).rglob("*"))
    for params, match in [
        ({"base_tokenizer": "ngram"}, "base_tokenizer 'ngram'|base_tokenizer \"ngram\""),
        ({"language": "French"}, "language"),
        ({"lower_case": False}, "without lower-casing"),
    ]:
        with pytest.raises(ls.UnsupportedError, match=match):
            ls.create_index(uri, "text", "INVERTED", params=params, progress=False)
    with pytest.raises(ls.UnsupportedError, match="U\\+217B"):  # ⅻ: its folding is not reproduced
        ls.create_index(uri, "text", "INVERTED", progress=False)
    with pytest.raises(ls.InvalidInputError, match="unknown key 'stemmer'"):
        ls.create_index(uri, "text", "INVERTED", params={"stemmer": True}, progress=False)
    with pytest.raises(ls.InvalidInputError, match="with_position"):
        ls.create_index(uri, "text", "INVERTED", params={"with_position": "yes"}, progress=False)
    assert sorted(p.relative_to(uri) for p in Path(uri).rglob("*")) == before
    # without folding the same text builds (here by the command line)
    out = subprocess.run([sys.executable, "-m", "lance_segmerge", "build", uri, "--column", "text", "--index-type", "fts",
                          "--param", "ascii_folding=false", "--param", "with_position=true", "--no-progress"],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert lance.dataset(uri).to_table(full_text_query='"roman ⅻ"')["id"].to_pylist() == [2]


def test_stable_row_ids_documents_are_stable_ids(tmp_path):
    """On a dataset with stable row ids where an update moved rows (their
    ids no longer their addresses), pylance 14.0.2's create_scalar_index
    names documents by stable row id. Segments we build per fragment name
    the same documents; committed, and after our merge, every query
    answers with pylance's rows and BM25 scores, phrases included."""
    theirs, ours = str(tmp_path / "theirs"), str(tmp_path / "ours")
    first = _table(MULTI, 500, 21)
    moved = _table(MULTI, 300, 22)
    moved = moved.set_column(0, "id", pa.array(range(350, 650), pa.int64()))
    lance.write_dataset(first, theirs, enable_stable_row_ids=True)
    lance.write_dataset(_table(MULTI, 400, 23).set_column(0, "id", pa.array(range(500, 900), pa.int64())), theirs, mode="append")
    lance.dataset(theirs).merge_insert("id").when_matched_update_all().execute(moved)  # ids 350-649 move
    lance.dataset(theirs).delete("id % 37 = 0")
    shutil.copytree(theirs, ours)
    rows = lance.dataset(ours).to_table(columns=["id"], with_row_id=True, with_row_address=True)
    assert rows["_rowid"] != rows["_rowaddr"]
    lance.dataset(theirs).create_scalar_index("text", "INVERTED", name="text_idx", with_position=True)
    frags = [f.fragment_id for f in lance.dataset(ours).get_fragments()]
    segs = [ls.build_index_segment(ours, "text", "INVERTED", [f], name="text_idx", params={"with_position": True}) for f in frags]
    ls.commit_existing_index_segments(ours, "text_idx", "text", segs)
    assert _docs(ours) == _docs(theirs)
    assert {r for r, _ in _docs(ours)} - set(rows["_rowaddr"].to_pylist())  # some documents are ids, not addresses
    qs = _queries(MULTI)
    want = _answers(theirs, qs)
    _close(_answers(ours, qs), want)
    ls.optimize(ours, "text_idx", progress=False)
    assert len(ls.open(ours).list_index_segments("text_idx")) == 1
    _close(_answers(ours, qs), want)


def test_a_list_of_strings_is_its_texts_in_turn(tmp_path):
    """An INVERTED index of a list<string> column (pylance 14.0.2 builds
    and optimizes one): a row is one document, its texts analyzed in
    turn with positions running on (stop words counted; null and empty
    texts adding nothing), so phrases span two texts. Our build has
    pylance's documents, token counts, posting lists and positions, every
    query answers with pylance's rows and scores, verify analyzes the
    lists again, and maintain(index_new=True) indexes an append."""
    rng = random.Random(7)

    def texts(n: int, start: int) -> pa.Table:
        rows: list = []
        for i in range(start, start + n):
            if i % 31 == 0:
                rows.append(None)
            else:
                parts: list = []
                for _ in range(rng.randint(0, 4)):
                    k = rng.randint(0, 9)
                    parts.append(None if k == 0 else "" if k == 1 else
                                 " ".join(rng.choice(MULTI[:40] + ["the", "of"]) for _ in range(rng.randint(1, 6))))
                rows.append(parts)
        return pa.table({"id": pa.array(range(start, start + n), pa.int64()), "texts": pa.array(rows, pa.list_(pa.string()))})

    theirs, ours = _pair(tmp_path, texts(1200, 0), 400)
    lance.dataset(theirs).create_scalar_index("texts", "INVERTED", with_position=True)
    ls.create_index(ours, "texts", "INVERTED", params={"with_position": True}, progress=False)
    assert _docs(ours, "texts_idx") == _docs(theirs, "texts_idx")

    def invert(uri: str) -> pa.Table:
        (seg,) = ls.open(uri).list_index_segments("texts_idx")
        return LanceFileReader(f"{uri}/_indices/{seg.uuid}/part_0_invert.lance").read_all().to_table()

    assert invert(ours).equals(invert(theirs))  # posting blocks, scores and positions
    words = sorted(set(MULTI[:40]))
    # phrases across two texts: the last word of one and the first of the next
    ds = lance.dataset(theirs)
    plain = {w for w in MULTI[:40] if w.isascii() and w.isalpha() and w.lower() not in ("the", "of", "were", "over")}
    spans = [f'"{a.split()[-1]} {b.split()[0]}"' for r in ds.to_table(columns=["texts"])["texts"].to_pylist() if r
             for a, b in zip([x for x in r if x], [x for x in r if x][1:]) if a.split()[-1] in plain and b.split()[0] in plain][:15]
    assert spans
    qs = words + spans
    want = _answers(theirs, qs)
    assert all(want[q] for q in spans), {q: want[q] for q in spans}
    _close(_answers(ours, qs), want)
    for uri in (ours, theirs):
        (keys,) = [c for s in ls.verify_index(uri, "texts_idx").segments for c in s.checks if c.name == "keys"]
        assert keys.verdict == "ok" and keys.numbers["checked"] > 100, keys
    more = texts(300, 5000)
    for uri in (ours, theirs):
        lance.write_dataset(more, uri, mode="append")
    lance.dataset(theirs).optimize.optimize_indices(num_indices_to_merge=0)
    assert ls.maintain(ours, "texts_idx", index_new=True).indexed_rows == 300
    _close(_answers(ours, qs), _answers(theirs, qs))
