package verify

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/lance-segmerge/lance-segmerge/gokernel/bitmap"
	"github.com/lance-segmerge/lance-segmerge/gokernel/btree"
	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/fragreuse"
	"github.com/lance-segmerge/lance-segmerge/gokernel/fts"
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/pb"
	"github.com/lance-segmerge/lance-segmerge/gokernel/lancefile"
	"github.com/lance-segmerge/lance-segmerge/gokernel/ngram"
	"github.com/lance-segmerge/lance-segmerge/gokernel/segment"
	"github.com/lance-segmerge/lance-segmerge/gokernel/storage"
	"github.com/lance-segmerge/lance-segmerge/gokernel/table"
	"github.com/lance-segmerge/lance-segmerge/gokernel/vecdata"
	"github.com/lance-segmerge/lance-segmerge/gokernel/zonemap"
)

// DamageOrder: a BTREE segment's rows or pages are not what pylance's
// reader relies on (sorted values, nulls first, page_lookup matching its
// pages).
const DamageOrder = "btree_order"

// verifyBTree checks one BTREE segment (see btree.Check): its files, the
// order of its rows and its page table, and its row ids (unique, of the
// fragments it covers). There is no model, layout or recall to check.
// cheap (the check of an output before its commit) decodes cheapPages
// pages, evenly spread, and the whole page table, not every row.
func verifyBTree(ctx context.Context, st storage.Store, snap *table.Snapshot, im *pb.IndexMetadata, cheap bool) (*SegmentReport, error) {
	sr, ist, err := startSegment(ctx, st, snap, im)
	if err != nil {
		return nil, err
	}
	sr.IndexType = "BTREE"
	if !checkFiles(ctx, ist, im, sr) {
		return sr, nil
	}
	covered := coverage(ctx, st, snap, sr)
	seen := newFragmentSet(sr.FragmentIDs)
	opts := btree.CheckOptions{Covered: func(id uint64) bool { seen.add(uint32(id >> 32)); return covered(uint32(id >> 32)) }}
	if cheap {
		opts.Pages = cheapPages
	}
	res, err := btree.Check(ctx, ist, im, opts)
	if done, err := checkError(ctx, sr, err); done {
		return sr, err
	}
	sr.NumRows = res.Rows
	order, ids := splitProblems(res.Problems)
	nums := map[string]float64{"rows": float64(res.Rows), "pages": float64(res.Pages), "nulls": float64(res.Nulls)}
	if len(order) > 0 {
		sr.add(Check{Name: "structure", Verdict: Failed, Damage: DamageOrder, Message: strings.Join(order, "; "), Numbers: nums})
	} else if cheap && res.Pages > cheapPages {
		sr.add(Check{Name: "structure", Verdict: OK, Numbers: nums,
			Message: fmt.Sprintf("%d rows in %d pages: page_lookup's bounds in order, and %d pages read back sorted by value and matching their page_lookup rows (a sample: the check before a commit)", res.Rows, res.Pages, cheapPages)})
	} else {
		sr.add(Check{Name: "structure", Verdict: OK, Numbers: nums,
			Message: fmt.Sprintf("%d rows in %d pages sorted by value (%d nulls first), page_lookup matches every page", res.Rows, res.Pages, res.Nulls)})
	}
	switch {
	case len(ids) > 0 && strings.Contains(ids[0], "twice"):
		sr.add(Check{Name: "row_ids", Verdict: Failed, Damage: DamageDuplicateRowIDs, Message: strings.Join(ids, "; ")})
	case len(ids) > 0:
		sr.add(Check{Name: "row_ids", Verdict: Failed, Damage: DamageForeignRowIDs, Message: strings.Join(ids, "; ")})
	case cheap && res.Pages > cheapPages:
		sr.add(Check{Name: "row_ids", Verdict: OK, Message: "the row ids of the pages read are unique and of fragments the segment covers"})
	default:
		sr.add(Check{Name: "row_ids", Verdict: OK, Message: "every row id is unique and of a fragment the segment covers"})
	}
	if len(order) == 0 && (!cheap || res.Pages <= cheapPages) && !snap.HasStableRowIDs() { // every row seen
		checkRowCoverage(ctx, st, snap, sr, seen)
	}
	sample, err := btree.Sample(ctx, ist, im, keySample)
	if err != nil {
		return nil, err
	}
	return sr, checkKeys(ctx, st, snap, sr, columnOf(snap, im), sample)
}

// DamageKeys: a scalar segment lists rows under keys that are not their
// values in the column's data.
const DamageKeys = "keys_mismatch"

// keySample is how many of a segment's (key, row) pairs the keys check
// reads back from the data; cheapPages how many BTREE pages the check
// before a commit decodes (of 2,442 at 10M rows: the full check was a
// quarter of an optimize).
const (
	keySample  = 2048
	cheapPages = 64
	// cheapKeys is how many BITMAP and LABEL_LIST keys the check before a
	// commit decodes (of a million: every key's bitmaps decoded were half
	// of an optimize; every key's order and bitmap headers are still read).
	cheapKeys = 4096
)

// checkKeys reads the rows of a sample of a segment's (key, row) pairs
// from the column's data and checks that each holds its key (nulls under
// the null key; for a list column, a LABEL_LIST's, that the row's list
// holds the key as one of its items). Rows deleted since are passed over:
// a segment may still list them.
func checkKeys[R ~struct {
	Null  bool
	Key   []byte
	RowID uint64
}](ctx context.Context, st storage.Store, snap *table.Snapshot, sr *SegmentReport, column string, sample []R) error {
	rd, err := keysReader(st, snap, sr, column)
	if rd == nil {
		return err
	}
	type pair = struct {
		Null  bool
		Key   []byte
		RowID uint64
	}
	// a LABEL_LIST row is under several keys: read each row once
	byAddr := make(map[uint64][]int, len(sample))
	addrs := make([]uint64, 0, len(sample))
	for i, r := range sample {
		a := pair(r).RowID
		if byAddr[a] == nil {
			addrs = append(addrs, a)
		}
		byAddr[a] = append(byAddr[a], i)
	}
	slices.Sort(addrs)
	vals, skipped, err := keyValues(ctx, rd, sr, addrs)
	if skipped || err != nil {
		return err
	}
	lists := rd.Column().Item.Kind != lancefile.KindUnknown
	var bad []string
	checked, deleted := 0, 0
	for _, v := range vals {
		if v.Missing {
			deleted += len(byAddr[v.Addr])
			continue
		}
		for _, i := range byAddr[v.Addr] {
			checked++
			r := pair(sample[i])
			if holdsKey(v, lists, r.Null, r.Key) || len(bad) >= maxKeyProblems {
				continue
			}
			if lists {
				bad = append(bad, fmt.Sprintf("row %d (fragment %d, offset %d) is under label %s, its list %s",
					v.Addr, v.Addr>>32, uint32(v.Addr), showKey(r.Null, r.Key), showList(v.Items)))
			} else {
				bad = append(bad, fmt.Sprintf("row %d (fragment %d, offset %d) is under key %s, its value is %s",
					v.Addr, v.Addr>>32, uint32(v.Addr), showKey(r.Null, r.Key), showKey(v.Null, v.Bytes)))
			}
		}
	}
	nums := map[string]float64{"sampled": float64(len(sample)), "checked": float64(checked), "mismatched": float64(len(bad))}
	if len(bad) > 0 {
		sr.add(Check{Name: "keys", Verdict: Failed, Damage: DamageKeys, Numbers: nums, Message: strings.Join(bad, "; ")})
	} else {
		sr.add(Check{Name: "keys", Verdict: OK, Numbers: nums,
			Message: fmt.Sprintf("%d sampled rows hold their keys in the column's data (%d deleted since)", checked, deleted)})
	}
	return nil
}

// holdsKey reports whether a row's value is the key (null: is null), or,
// for a list, holds it among its items (a null list holds no key: its
// row is in the map of null lists).
func holdsKey(v vecdata.Value, list, null bool, key []byte) bool {
	if !list {
		return v.Null == null && (null || bytes.Equal(key, v.Bytes))
	}
	for _, it := range v.Items {
		if holdsKey(it, false, null, key) {
			return true
		}
	}
	return false
}

// showList shows a list of values (null: the list is null).
func showList(items []vecdata.Value) string {
	if items == nil {
		return "is null"
	}
	parts := make([]string, 0, min(len(items), 8))
	for _, it := range items[:min(len(items), 8)] {
		parts = append(parts, showKey(it.Null, it.Bytes))
	}
	if len(items) > 8 {
		parts = append(parts, fmt.Sprintf("... (%d items)", len(items)))
	}
	return "is [" + strings.Join(parts, ", ") + "]"
}

const maxKeyProblems = 8

// showKey shows a key or value: quoted when it reads as text, else its
// bytes in hex (little-endian for numbers).
func showKey(null bool, b []byte) string {
	switch {
	case null:
		return "null"
	case utf8.Valid(b) && !bytes.ContainsFunc(b, func(r rune) bool { return r < ' ' }):
		return strconv.Quote(string(b))
	}
	return "0x" + hex.EncodeToString(b)
}

// coverage says whether a fragment is one the segment covers (or one a
// compaction rewrote into fragments it covers).
func coverage(ctx context.Context, st storage.Store, snap *table.Snapshot, sr *SegmentReport) func(uint32) bool {
	own := newFragmentSet(sr.FragmentIDs)
	for _, f := range sr.FragmentIDs {
		own.add(f)
	}
	if m, err := fragreuse.Load(ctx, st, snap); err == nil && m != nil {
		// pylance's optimize points a segment's bitmap at the fragments a
		// compaction with defer_index_remap wrote, and leaves its rows at
		// the old addresses, for the fragment reuse index to map: rows of
		// a fragment rewritten into one the segment covers are its own.
		var rewritten []uint32
		for _, f := range m.Rewritten() {
			if moved, _ := m.NewFragments([]uint32{f}); slices.ContainsFunc(moved, own.has) {
				rewritten = append(rewritten, f)
			}
		}
		for _, f := range rewritten {
			own.add(f)
		}
	}
	return own.has
}

// checkError files the error of a scalar check into sr: a layout we do
// not know skips the structure check, a file that does not read fails it.
// done says whether the check stops there; the error returned is one
// outside the segment (I/O, cancellation), for the caller to return.
func checkError(ctx context.Context, sr *SegmentReport, err error) (done bool, outside error) {
	switch {
	case err == nil:
		return false, nil
	case ctx.Err() != nil || errkind.Tag(err) == "io":
		return true, err
	case errors.Is(err, errkind.Unsupported):
		sr.add(Check{Name: "structure", Verdict: Skipped, Message: err.Error()})
	default:
		sr.add(Check{Name: "structure", Verdict: Failed, Damage: DamageUnreadable, Message: err.Error()})
	}
	return true, nil
}

// splitProblems splits a scalar check's problems (btree.Problem,
// bitmap.Problem) into those of its structure and those of its row ids.
func splitProblems[P ~struct{ Check, Message string }](ps []P) (structure, rowIDs []string) {
	for _, p := range ps {
		q := struct{ Check, Message string }(p)
		if q.Check == "row_ids" {
			rowIDs = append(rowIDs, q.Message)
		} else {
			structure = append(structure, q.Message)
		}
	}
	return structure, rowIDs
}

// DamageZones: a ZONEMAP segment's zones are out of order, overlap, hold
// more rows than rows_per_zone, or name fragments the segment does not
// cover.
const DamageZones = "zonemap_zones"

// verifyZoneMap checks one ZONEMAP or BLOOMFILTER segment (see
// zonemap.Check).
func verifyZoneMap(ctx context.Context, st storage.Store, snap *table.Snapshot, im *pb.IndexMetadata) (*SegmentReport, error) {
	sr, ist, err := startSegment(ctx, st, snap, im)
	if err != nil {
		return nil, err
	}
	kind := zonemap.ZoneMap
	if segment.OtherType(im) == "BLOOMFILTER" {
		kind = zonemap.BloomFilter
	}
	sr.IndexType = kind.Name
	if !checkFiles(ctx, ist, im, sr) {
		return sr, nil
	}
	in := coverage(ctx, st, snap, sr)
	seen := newFragmentSet(sr.FragmentIDs)
	z, problems, err := zonemap.Check(ctx, ist, im, kind, func(f uint32) bool { seen.add(f); return in(f) })
	if done, err := checkError(ctx, sr, err); done {
		return sr, err
	}
	sr.NumRows = z.Rows
	if len(problems) > 0 {
		sr.add(Check{Name: "structure", Verdict: Failed, Damage: DamageZones, Message: strings.Join(problems, "; ")})
	} else {
		sr.add(Check{Name: "structure", Verdict: OK, Numbers: map[string]float64{"zones": float64(z.Zones), "rows": float64(z.Rows)},
			Message: fmt.Sprintf("%d zones spanning %d rows, in fragment order", z.Zones, z.Rows)})
	}
	if len(problems) > 0 {
		return sr, nil
	}
	if !snap.HasStableRowIDs() { // zones span every row of their fragment
		checkRowCoverage(ctx, st, snap, sr, seen)
	}
	return sr, checkZones(ctx, st, snap, sr, columnOf(snap, im), z)
}

// keysReader opens the column a keys check reads; nil (the check
// skipped, or an error) when it cannot.
func keysReader(st storage.Store, snap *table.Snapshot, sr *SegmentReport, column string) (*vecdata.Reader, error) {
	rd, err := vecdata.NewValueReader(st, snap, column)
	if errors.Is(err, errkind.Unsupported) {
		sr.add(Check{Name: "keys", Verdict: Skipped, Message: err.Error()})
		return nil, nil
	}
	return rd, err
}

// keyValues reads the rows at addrs for a keys check. A layout the data
// reader does not decode (lists of structs...) skips the check (skipped),
// as an index of a column it cannot open does.
func keyValues(ctx context.Context, rd *vecdata.Reader, sr *SegmentReport, addrs []uint64) (vals []vecdata.Value, skipped bool, err error) {
	vals, err = rd.ReadValues(ctx, addrs)
	if errors.Is(err, errkind.Unsupported) {
		sr.add(Check{Name: "keys", Verdict: Skipped, Message: err.Error()})
		return nil, true, nil
	}
	return vals, false, err
}

// zoneSample is how many zones, evenly spread, the keys check of a
// ZONEMAP segment reads back from the data.
const zoneSample = 16

// checkZones checks a sample of a ZONEMAP segment's zones against the
// rows they span (zonemap.Segment.Covers).
func checkZones(ctx context.Context, st storage.Store, snap *table.Snapshot, sr *SegmentReport, column string, z *zonemap.Segment) error {
	rd, err := keysReader(st, snap, sr, column)
	if rd == nil {
		return err
	}
	present := snap.FragmentSet()
	var bad []string
	checked := 0
	n := min(z.Zones, zoneSample)
	for j := range n {
		zi := j * z.Zones / n
		frag, start, span := z.Place(zi)
		if !present[frag] {
			continue // a fragment removed since: nothing to read
		}
		w, err := rd.ReadRange(ctx, frag, start, start+span)
		if errors.Is(err, errkind.Unsupported) { // a column type the data reader does not decode
			sr.add(Check{Name: "keys", Verdict: Skipped, Message: err.Error()})
			return nil
		}
		if err != nil {
			return err
		}
		why, err := z.Covers(zi, w.Values, w.Live)
		if err != nil {
			return err
		}
		checked++
		if why != "" && len(bad) < maxKeyProblems {
			bad = append(bad, fmt.Sprintf("zone %d (fragment %d, rows %d+%d): %s", zi, frag, start, span, why))
		}
	}
	if len(bad) > 0 {
		sr.add(Check{Name: "keys", Verdict: Failed, Damage: DamageKeys, Message: strings.Join(bad, "; ")})
		return nil
	}
	sr.add(Check{Name: "keys", Verdict: OK, Numbers: map[string]float64{"zones_checked": float64(checked)},
		Message: fmt.Sprintf("%d zones' bounds, filters and counts hold for the rows they span", checked)})
	return nil
}

// DamageBitmap: a BITMAP or LABEL_LIST segment's keys are out of order or
// repeated, or a row map is malformed.
const DamageBitmap = "bitmap_keys"

// verifyBitmap checks one BITMAP or LABEL_LIST segment (see bitmap.Check).
func verifyBitmap(ctx context.Context, st storage.Store, snap *table.Snapshot, im *pb.IndexMetadata, cheap bool) (*SegmentReport, error) {
	sr, ist, err := startSegment(ctx, st, snap, im)
	if err != nil {
		return nil, err
	}
	typ := segment.OtherType(im)
	sr.IndexType = typ
	if !checkFiles(ctx, ist, im, sr) {
		return sr, nil
	}
	var covered func(uint32) bool
	seen := newFragmentSet(sr.FragmentIDs)
	if !snap.HasStableRowIDs() { // else row maps hold stable ids, whose high halves are not fragments
		in := coverage(ctx, st, snap, sr)
		covered = func(f uint32) bool { seen.add(f); return in(f) }
	}
	opts := bitmap.CheckOptions{Covered: covered, Unique: typ == "BITMAP"}
	if cheap {
		opts.SampleKeys = cheapKeys
	}
	res, err := bitmap.Check(ctx, ist, im, opts)
	if done, err := checkError(ctx, sr, err); done {
		return sr, err
	}
	if typ == "BITMAP" {
		sr.NumRows = res.Rows
	}
	order, ids := splitProblems(res.Problems)
	nums := map[string]float64{"keys": float64(res.Keys), "rows": float64(res.Rows), "null_key_rows": float64(res.NullKeyRows)}
	if len(order) > 0 {
		sr.add(Check{Name: "structure", Verdict: Failed, Damage: DamageBitmap, Message: strings.Join(order, "; "), Numbers: nums})
	} else if res.Decoded < res.Keys {
		sr.add(Check{Name: "structure", Verdict: OK, Numbers: nums,
			Message: fmt.Sprintf("%d keys in order (null first), each row map's fragments and bitmap headers well formed, %d (row, key) pairs; %d keys' bitmaps decoded (a sample: the check before a commit)", res.Keys, res.Rows, res.Decoded)})
	} else {
		sr.add(Check{Name: "structure", Verdict: OK, Numbers: nums,
			Message: fmt.Sprintf("%d keys in order (null first), each row map well formed, %d (row, key) pairs", res.Keys, res.Rows)})
	}
	switch {
	case len(ids) > 0 && strings.Contains(ids[0], "another key"):
		sr.add(Check{Name: "row_ids", Verdict: Failed, Damage: DamageDuplicateRowIDs, Message: strings.Join(ids, "; ")})
	case len(ids) > 0:
		sr.add(Check{Name: "row_ids", Verdict: Failed, Damage: DamageForeignRowIDs, Message: strings.Join(ids, "; ")})
	case covered == nil:
		sr.add(Check{Name: "row_ids", Verdict: Skipped, Message: "the dataset uses stable row ids: rows are not mapped to fragments here"})
	default:
		msg := "every row is of a fragment the segment covers"
		switch {
		case typ == "BITMAP" && res.Decoded < res.Keys:
			msg += ", under one key among the keys decoded"
		case typ == "BITMAP":
			msg += ", under one key"
		}
		sr.add(Check{Name: "row_ids", Verdict: OK, Message: msg})
	}
	if covered == nil {
		// stable ids are not addresses
		return sr, nil
	}
	switch {
	case len(order) > 0:
	case typ == "BITMAP":
		checkRowCoverage(ctx, st, snap, sr, seen)
	default: // LABEL_LIST: a row of a null or empty list is under no label
		if err := checkReadCoverage(ctx, st, snap, sr, columnOf(snap, im), seen, "rows", func(v vecdata.Value) string {
			for _, it := range v.Items {
				if !it.Null {
					return "has labels"
				}
			}
			return ""
		}, nil); err != nil {
			return sr, err
		}
	}
	sample, err := bitmap.Sample(ctx, ist, im, keySample, 4)
	if err != nil {
		return nil, err
	}
	return sr, checkKeys(ctx, st, snap, sr, columnOf(snap, im), sample)
}

// DamageNgram: an NGRAM segment's tokens are out of order or repeated, or
// a posting list is malformed or empty.
const DamageNgram = "ngram_tokens"

// verifyNgram checks one NGRAM segment (see ngram.Check).
func verifyNgram(ctx context.Context, st storage.Store, snap *table.Snapshot, im *pb.IndexMetadata) (*SegmentReport, error) {
	sr, ist, err := startSegment(ctx, st, snap, im)
	if err != nil {
		return nil, err
	}
	sr.IndexType = "NGRAM"
	if !checkFiles(ctx, ist, im, sr) {
		return sr, nil
	}
	var covered func(uint32) bool
	seen := newFragmentSet(sr.FragmentIDs)
	if !snap.HasStableRowIDs() {
		in := coverage(ctx, st, snap, sr)
		covered = func(f uint32) bool { seen.add(f); return in(f) }
	}
	res, err := ngram.Check(ctx, ist, im, covered)
	if done, err := checkError(ctx, sr, err); done {
		return sr, err
	}
	order, ids := splitProblems(res.Problems)
	nums := map[string]float64{"tokens": float64(res.Tokens), "rows": float64(res.Rows)}
	addChecks(sr, order, ids, covered == nil, DamageNgram, nums,
		fmt.Sprintf("%d tokens ascending, each posting list well formed, %d (token, row) pairs", res.Tokens, res.Rows),
		"every row is of a fragment the segment covers")
	if len(order) > 0 || covered == nil {
		return sr, nil // stable ids are not addresses
	}
	// a text of fewer than three characters has no trigram, and is under
	// no token; nor need a null text be (pylance 14.0.2's delta over a
	// fragment of null texts holds none of them)
	err = checkReadCoverage(ctx, st, snap, sr, columnOf(snap, im), seen, "rows", func(v vecdata.Value) string {
		n := 0
		switch {
		case v.Null || v.Items != nil:
			return ""
		case ngram.Tokens(v.Bytes, func(uint32) error { n++; return nil }) != nil || n == 0:
			return ""
		}
		return fmt.Sprintf("has text of %d trigrams", n)
	}, nil)
	if err != nil {
		return sr, err
	}
	sample, err := ngram.Sample(ctx, ist, im, keySample, 4)
	if err != nil {
		return nil, err
	}
	return sr, checkTokens(ctx, st, snap, sr, columnOf(snap, im), sample)
}

// checkTokens reads the texts of a sample of an NGRAM segment's (token,
// row) pairs and checks that each text has the token (a null text token
// 0). Rows deleted since are passed over, and so are texts holding a
// character whose folding the tokenizer does not know.
func checkTokens(ctx context.Context, st storage.Store, snap *table.Snapshot, sr *SegmentReport, column string, sample []ngram.TokenRow) error {
	rd, err := keysReader(st, snap, sr, column)
	if rd == nil {
		return err
	}
	byAddr := map[uint64][]uint32{}
	addrs := make([]uint64, 0, len(sample))
	for _, p := range sample {
		if byAddr[p.RowID] == nil {
			addrs = append(addrs, p.RowID)
		}
		byAddr[p.RowID] = append(byAddr[p.RowID], p.Token)
	}
	slices.Sort(addrs)
	vals, skip, err := keyValues(ctx, rd, sr, addrs)
	if skip || err != nil {
		return err
	}
	var bad []string
	checked, skipped := 0, 0
	for _, v := range vals {
		if v.Missing {
			continue
		}
		has := map[uint32]bool{}
		if v.Null {
			has[ngram.NullToken] = true
		} else if err := ngram.Tokens(v.Bytes, func(t uint32) error { has[t] = true; return nil }); err != nil {
			skipped += len(byAddr[v.Addr])
			continue
		}
		for _, t := range byAddr[v.Addr] {
			checked++
			if !has[t] && len(bad) < maxKeyProblems {
				bad = append(bad, fmt.Sprintf("row %d (fragment %d, offset %d) is under token %d (%q), its text is %s",
					v.Addr, v.Addr>>32, uint32(v.Addr), t, ngram.TokenText(t), showKey(v.Null, v.Bytes)))
			}
		}
	}
	nums := map[string]float64{"sampled": float64(len(sample)), "checked": float64(checked), "mismatched": float64(len(bad)), "unknown_characters": float64(skipped)}
	if len(bad) > 0 {
		sr.add(Check{Name: "keys", Verdict: Failed, Damage: DamageKeys, Numbers: nums, Message: strings.Join(bad, "; ")})
		return nil
	}
	sr.add(Check{Name: "keys", Verdict: OK, Numbers: nums,
		Message: fmt.Sprintf("%d sampled (token, row) pairs are trigrams of the rows' text (%d of texts with characters the tokenizer does not fold, passed over)", checked, skipped)})
	return nil
}

// DamageFTS: an INVERTED segment's posting lists, positions or document
// statistics are malformed or disagree with each other.
const DamageFTS = "fts_postings"

// verifyFTS checks one INVERTED segment (see fts.Check), then a sample
// of its documents against the text column, re-analyzed.
//
// cheap (the check of an output before its commit) decodes a sample of
// each partition's posting lists, not all of them, and does not read the
// text.
func verifyFTS(ctx context.Context, st storage.Store, snap *table.Snapshot, im *pb.IndexMetadata, cheap bool) (*SegmentReport, error) {
	sr, ist, err := startSegment(ctx, st, snap, im)
	if err != nil {
		return nil, err
	}
	sr.IndexType = "INVERTED"
	if !checkFiles(ctx, ist, im, sr) {
		return sr, nil
	}
	var covered func(uint32) bool
	if !snap.HasStableRowIDs() {
		covered = coverage(ctx, st, snap, sr)
	}
	opts := fts.CheckOptions{Covered: covered, Sample: docSample}
	if cheap {
		opts = fts.CheckOptions{Covered: covered, Tokens: cheapTokens}
	}
	res, err := fts.Check(ctx, ist, im, opts)
	if done, err := checkError(ctx, sr, err); done {
		return sr, err
	}
	structure, ids := splitProblems(res.Problems)
	nums := map[string]float64{"documents": float64(res.Docs), "tokens": float64(res.Tokens), "postings": float64(res.Postings), "partitions": float64(res.Partitions)}
	okMsg := fmt.Sprintf("%d documents, %d tokens, %d postings in %d partitions: every posting list and position run decodes, each document's frequencies sum to its token count",
		res.Docs, res.Tokens, res.Postings, res.Partitions)
	if cheap {
		okMsg = fmt.Sprintf("%d documents, %d tokens in %d partitions: the posting lists and positions of up to %d tokens per partition decode, to documents the partition has (a sample: the check before a commit)",
			res.Docs, res.Tokens, res.Partitions, cheapTokens)
	}
	addChecks(sr, structure, ids, covered == nil, DamageFTS, nums, okMsg, "every document is a row of a fragment the segment covers")
	if len(structure) > 0 || covered == nil {
		if cheap {
			sr.add(Check{Name: "keys", Verdict: Skipped, Message: "the text is not read before a commit"})
		}
		return sr, nil // stable ids are not addresses
	}
	if err := checkFTSCoverage(ctx, st, snap, sr, columnOf(snap, im), res); err != nil {
		return sr, err
	}
	if cheap {
		sr.add(Check{Name: "keys", Verdict: Skipped, Message: "the text is not read before a commit"})
		return sr, nil
	}
	return sr, checkDocs(ctx, st, snap, sr, columnOf(snap, im), res)
}

// DamageMissingRows: a segment claims a fragment but holds none of its
// rows that it should: queries trust the claim and never search the
// fragment's rows, in the index or by a scan.
const DamageMissingRows = "missing_rows"

// checkFTSCoverage checks that an INVERTED segment holds documents of
// every fragment it claims that the version still has, where that
// fragment has text that analyzes to tokens (a row whose text is null or
// yields none, stop words only, is no document: pylance indexes it as
// none). A merge that lost a fragment's rows fails here, before its commit
// too.
func checkFTSCoverage(ctx context.Context, st storage.Store, snap *table.Snapshot, sr *SegmentReport, column string, res *fts.CheckResult) error {
	hasDocs := newFragmentSet(sr.FragmentIDs)
	for f := range res.FragmentDocs {
		hasDocs.add(f)
	}
	params, err := fts.ParseParams(res.Params)
	var an *fts.Analyzer
	if err == nil {
		an, err = fts.NewAnalyzer(params)
	}
	return checkReadCoverage(ctx, st, snap, sr, column, hasDocs, "documents", func(v vecdata.Value) string {
		n := 0
		if _, err := analyzeValue(an, v, func([]byte, uint32) error { n++; return nil }); err != nil || n == 0 {
			return ""
		}
		return fmt.Sprintf("has text of %d tokens", n)
	}, err)
}

// checkReadCoverage checks that a segment holds rows of every fragment it
// claims that the version still has, where that fragment has a live row
// the index must hold (must says why, "" for a row it need not). Only the
// fragments the check met no row of (seen; rows at addresses a deferred
// compaction moved count for the fragments it wrote) are read, up to
// their first such row. notRead, when set, is why the rows cannot be
// judged here (the check is then skipped).
func checkReadCoverage(ctx context.Context, st storage.Store, snap *table.Snapshot, sr *SegmentReport, column string, seen *fragmentSet,
	what string, must func(vecdata.Value) string, notRead error) error {
	seen.addMoved(ctx, st, snap)
	present := snap.FragmentSet()
	var empty []uint64
	for _, f := range sr.FragmentIDs {
		if present[uint64(f)] && !seen.has(f) {
			empty = append(empty, uint64(f))
		}
	}
	if len(empty) == 0 {
		sr.add(Check{Name: "coverage", Verdict: OK, Message: fmt.Sprintf("%s of every one of the %d fragments it covers", what, len(sr.FragmentIDs))})
		return nil
	}
	if notRead != nil {
		sr.add(Check{Name: "coverage", Verdict: Skipped, Message: fmt.Sprintf("fragments %v have no %s, and their rows are not judged here: %v", empty, what, notRead)})
		return nil
	}
	rd, err := vecdata.NewValueReader(st, snap, column)
	if errors.Is(err, errkind.Unsupported) {
		sr.add(Check{Name: "coverage", Verdict: Skipped, Message: fmt.Sprintf("fragments %v have no %s, and their rows are not read here: %v", empty, what, err)})
		return nil
	}
	if err != nil {
		return err
	}
	var bad []string
	for _, f := range empty {
		found := errors.New("a row the index must hold")
		var row uint64
		var why string
		err := rd.ScanValues(ctx, []uint64{f}, 0, func(w *vecdata.ValueWindow) error {
			for i := range w.Values.Len {
				if w.Live(i) {
					if why = must(w.Value(i)); why != "" {
						row = w.Addr(i)
						return found
					}
				}
			}
			return nil
		})
		switch {
		case errors.Is(err, found):
			if len(bad) < maxKeyProblems {
				bad = append(bad, fmt.Sprintf("it covers fragment %d but holds none of its %s, while row %d (offset %d) %s", f, what, row, uint32(row), why))
			}
		case errors.Is(err, errkind.Unsupported):
			sr.add(Check{Name: "coverage", Verdict: Skipped, Message: fmt.Sprintf("fragment %d has no %s, and its rows are not read here: %v", f, what, err)})
			return nil
		case err != nil:
			return err
		}
	}
	if len(bad) > 0 {
		sr.add(Check{Name: "coverage", Verdict: Failed, Damage: DamageMissingRows, Message: strings.Join(bad, "; ") + ": queries would never find those rows"})
		return nil
	}
	sr.add(Check{Name: "coverage", Verdict: OK, Message: fmt.Sprintf("%s of every fragment it covers that has rows it must hold (fragments %v: none)", what, empty)})
	return nil
}

// fragmentSet is a set of fragments, dense where the ids are small (a
// BTREE check asks once per row).
type fragmentSet struct {
	dense []bool
	other map[uint32]bool
}

func newFragmentSet(claimed []uint32) *fragmentSet {
	var top uint32
	for _, f := range claimed {
		top = max(top, f)
	}
	return &fragmentSet{dense: make([]bool, min(int(top)+1, 1<<20)), other: map[uint32]bool{}}
}

func (s *fragmentSet) add(f uint32) {
	if int(f) < len(s.dense) {
		s.dense[f] = true
	} else {
		s.other[f] = true
	}
}

func (s *fragmentSet) has(f uint32) bool {
	if int(f) < len(s.dense) {
		return s.dense[f]
	}
	return s.other[f]
}

// addMoved adds the fragments a compaction with defer_index_remap wrote
// in place of fragments of the set: rows still at the old addresses are
// rows of the new fragments, for the fragment reuse index to map.
func (s *fragmentSet) addMoved(ctx context.Context, st storage.Store, snap *table.Snapshot) {
	m, err := fragreuse.Load(ctx, st, snap)
	if err != nil || m == nil {
		return
	}
	for _, f := range m.Rewritten() {
		if s.has(f) {
			moved, _ := m.NewFragments([]uint32{f})
			for _, n := range moved {
				s.add(n)
			}
		}
	}
}

// checkRowCoverage checks that a segment holding a row of every live row
// (BTREE, BITMAP: nulls included; ZONEMAP and BLOOMFILTER zones span
// every row of their fragment) holds rows of every fragment it claims
// that the version still has with live rows (its physical rows less its
// deleted ones, from the manifest: nothing is read; a fragment whose rows
// are all deleted is no longer in the version). seen holds the
// fragments of the rows the check met; rows at addresses a deferred
// compaction moved count for the fragments it wrote.
func checkRowCoverage(ctx context.Context, st storage.Store, snap *table.Snapshot, sr *SegmentReport, seen *fragmentSet) {
	seen.addMoved(ctx, st, snap)
	live := fragmentLiveRows(snap)
	var bad []string
	for _, f := range sr.FragmentIDs {
		if n := live[uint64(f)]; n > 0 && !seen.has(f) && len(bad) < maxKeyProblems {
			bad = append(bad, fmt.Sprintf("it covers fragment %d but holds none of its %d live rows", f, n))
		}
	}
	if len(bad) > 0 {
		sr.add(Check{Name: "coverage", Verdict: Failed, Damage: DamageMissingRows, Message: strings.Join(bad, "; ") + ": queries would never find those rows"})
		return
	}
	sr.add(Check{Name: "coverage", Verdict: OK, Message: "rows of every fragment it covers that has live rows"})
}

// analyzeValue analyzes a text value as the build does (a list of texts
// in turn, positions running on) and returns the text shown in messages.
func analyzeValue(an *fts.Analyzer, v vecdata.Value, visit func(tok []byte, pos uint32) error) ([]byte, error) {
	switch {
	case v.Null:
		return nil, nil
	case v.Items == nil:
		return v.Bytes, an.Analyze(v.Bytes, visit)
	}
	var parts [][]byte
	pos := uint32(0)
	for _, it := range v.Items {
		if !it.Null {
			var err error
			if pos, err = an.AnalyzeAt(it.Bytes, pos, visit); err != nil {
				return nil, err
			}
			parts = append(parts, it.Bytes)
		}
	}
	return bytes.Join(parts, []byte(" | ")), nil
}

// docSample is how many of an INVERTED segment's documents the keys
// check analyzes again; cheapTokens how many tokens' posting lists per
// partition the check before a commit decodes.
const (
	docSample   = 256
	cheapTokens = 1024
)

// checkDocs reads the texts of a sample of an INVERTED segment's
// documents, analyzes them with the segment's parameters and checks that
// each has the tokens, frequencies and token count its postings give it.
// Rows deleted since, and texts the analyzer refuses, are passed over;
// an analyzer not reproduced here skips the check.
func checkDocs(ctx context.Context, st storage.Store, snap *table.Snapshot, sr *SegmentReport, column string, res *fts.CheckResult) error {
	params, err := fts.ParseParams(res.Params)
	var an *fts.Analyzer
	if err == nil {
		an, err = fts.NewAnalyzer(params)
	}
	if err != nil {
		sr.add(Check{Name: "keys", Verdict: Skipped, Message: fmt.Sprintf("the texts are not analyzed again: %v", err)})
		return nil
	}
	rd, err := keysReader(st, snap, sr, column)
	if rd == nil {
		return err
	}
	addrs := make([]uint64, len(res.Sample))
	docs := make(map[uint64]fts.SampledDoc, len(res.Sample))
	for i, d := range res.Sample {
		addrs[i] = d.RowID
		docs[d.RowID] = d
	}
	vals, skip, err := keyValues(ctx, rd, sr, addrs) // res.Sample is in row order
	if skip || err != nil {
		return err
	}
	var bad []string
	checked, skipped := 0, 0
	for _, v := range vals {
		d, ok := docs[v.Addr]
		if v.Missing || !ok {
			continue
		}
		got := map[string]uint32{}
		n := uint32(0)
		count := func(tok []byte, _ uint32) error { got[string(tok)]++; n++; return nil }
		text, err := analyzeValue(an, v, count)
		if err != nil {
			skipped++
			continue
		}
		checked++
		if why := docMismatch(d, got, n); why != "" && len(bad) < maxKeyProblems {
			bad = append(bad, fmt.Sprintf("row %d (fragment %d, offset %d): %s; its text is %s", v.Addr, v.Addr>>32, uint32(v.Addr), why, showKey(v.Null, text)))
		}
	}
	nums := map[string]float64{"sampled": float64(len(res.Sample)), "checked": float64(checked), "mismatched": float64(len(bad)), "refused_texts": float64(skipped)}
	if len(bad) > 0 {
		sr.add(Check{Name: "keys", Verdict: Failed, Damage: DamageKeys, Numbers: nums, Message: strings.Join(bad, "; ")})
		return nil
	}
	sr.add(Check{Name: "keys", Verdict: OK, Numbers: nums,
		Message: fmt.Sprintf("%d sampled documents have, token for token, what their text analyzes to (%d texts the analyzer refuses, passed over)", checked, skipped)})
	return nil
}

// docMismatch says how a document's postings differ from its text's
// tokens ("" when they agree).
func docMismatch(d fts.SampledDoc, got map[string]uint32, n uint32) string {
	if n != d.NumTokens {
		return fmt.Sprintf("the index counts %d tokens, the text has %d", d.NumTokens, n)
	}
	for _, tok := range slices.Sorted(maps.Keys(got)) { // the first in token order: the same message every run
		if f := got[tok]; d.Freqs[tok] != f {
			return fmt.Sprintf("token %q: %d in the index, %d in the text", tok, d.Freqs[tok], f)
		}
	}
	for _, tok := range slices.Sorted(maps.Keys(d.Freqs)) {
		if got[tok] == 0 {
			return fmt.Sprintf("token %q is in the index, not in the text", tok)
		}
	}
	return ""
}

// addChecks records a segment's structure check (failed with damage when
// structure holds problems, else ok with okMsg) and its row_ids check
// (failed on foreign rows, skipped on a dataset with stable row ids,
// else ok with rowsOK).
func addChecks(sr *SegmentReport, structure, ids []string, stable bool, damage string, nums map[string]float64, okMsg, rowsOK string) {
	if len(structure) > 0 {
		sr.add(Check{Name: "structure", Verdict: Failed, Damage: damage, Message: strings.Join(structure, "; "), Numbers: nums})
	} else {
		sr.add(Check{Name: "structure", Verdict: OK, Numbers: nums, Message: okMsg})
	}
	switch {
	case len(ids) > 0:
		sr.add(Check{Name: "row_ids", Verdict: Failed, Damage: DamageForeignRowIDs, Message: strings.Join(ids, "; ")})
	case stable:
		sr.add(Check{Name: "row_ids", Verdict: Skipped, Message: "the dataset uses stable row ids: rows are not mapped to fragments here"})
	default:
		sr.add(Check{Name: "row_ids", Verdict: OK, Message: rowsOK})
	}
}
