package segment

import (
	"context"
	"encoding/json"
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/fts"
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/pb"
	"github.com/lance-segmerge/lance-segmerge/gokernel/lancefile"
	"github.com/lance-segmerge/lance-segmerge/gokernel/storage"
	"github.com/lance-segmerge/lance-segmerge/gokernel/table"
	"github.com/lance-segmerge/lance-segmerge/gokernel/vecdata"
)

// ftsIndexVersion is the index version pylance 14.0.2 records for an
// INVERTED segment.
const ftsIndexVersion = 2

// buildFTS writes one uncommitted INVERTED segment over the fragments
// from the text column (documents named by stable row ids on a dataset
// that has them): each live, non-null row analyzed as pylance
// 14.0.2's analyzer of the index's parameters analyzes it (fts.Analyzer;
// parameters whose tokens are not reproduced are errkind.Unsupported),
// the documents collected in memory (bounded by the fragments' rows), then
// written as a segment of one partition.
func buildFTS(ctx context.Context, st storage.Store, snap *table.Snapshot, opts ScalarBuildOptions, rd *vecdata.Reader, col *vecdata.Column, existing *pb.IndexMetadata, version lancefile.Version) (*pb.IndexMetadata, error) {
	prog := opts.Progress
	lists := col.Type.Kind == lancefile.KindList || col.Type.Kind == lancefile.KindLargeList
	if !isText(col.Type) && !(lists && isText(col.Item)) {
		return nil, fmt.Errorf("%w: build: an INVERTED index is built over a string column or a list of strings; column %q is %s", errkind.InvalidInput, opts.Column, col.Type)
	}
	params, format1, err := ftsParams(ctx, st, snap, opts, existing)
	if err != nil {
		return nil, err
	}
	an, err := fts.NewAnalyzer(params)
	if err != nil {
		return nil, err
	}
	b := fts.NewBuilder(params.WithPosition)
	// Documents are stable row ids where the dataset has them, as in
	// pylance 14.0.2's create_scalar_index there.
	rd.NameRowsByStableIDs()
	prog.SetStage("read")
	err = rd.ScanValues(ctx, opts.FragmentIDs, opts.WindowRows, func(w *vecdata.ValueWindow) error {
		v := w.Values
		for i := range v.Len {
			if !w.Live(i) || !v.IsValid(i) {
				continue
			}
			if err := analyzeRow(an, v, i, b.Token); err != nil {
				return fmt.Errorf("build: column %q, row %d of fragment %d: %w", opts.Column, w.Start+uint64(i), w.Fragment, err)
			}
			if err := b.EndDoc(w.RowID(i)); err != nil {
				return err
			}
		}
		prog.RowsRead.Add(int64(v.Len))
		return ctx.Err()
	})
	if err != nil {
		return nil, err
	}
	prog.SetStage("write")
	id, dir, err := outputDir(ctx, st, opts.IndexUUID)
	if err != nil {
		return nil, err
	}
	res, err := b.Write(ctx, st, fts.WriteOptions{Dir: dir, Params: params.JSON(), Version: version, Format1: format1})
	if err != nil {
		return nil, err
	}
	prog.RowsWritten.Add(int64(res.DocsWritten))
	prog.SetStage("done")
	e, err := scalarEntry(id, snap, opts, col, existing, res.Files, ftsDetails(params, 2))
	if err == nil && format1 {
		// As pylance 14.0.2 records its own deltas of a format 1 index.
		iv := int32(1)
		e.IndexVersion, e.IndexDetails.Value = &iv, ftsDetails(params, 1)
	}
	return e, err
}

// isText reports whether t is a string type (utf8 or large_utf8).
func isText(t lancefile.DataType) bool {
	return t.Kind == lancefile.KindBinary && (t.Logical == "string" || t.Logical == "large_string")
}

// analyzeRow analyzes the valid row i of a string column, or of a list of
// strings (its texts in turn, positions running on: fts.AnalyzeAt).
func analyzeRow(an *fts.Analyzer, v *lancefile.Array, i int, visit func([]byte, uint32) error) error {
	if v.Items == nil {
		return an.Analyze(v.Values[v.Offsets[i]:v.Offsets[i+1]], visit)
	}
	it, pos := v.Items, uint32(0)
	for j := int(v.Offsets[i]); j < int(v.Offsets[i+1]); j++ {
		if !it.IsValid(j) {
			continue
		}
		var err error
		if pos, err = an.AnalyzeAt(it.Values[it.Offsets[j]:it.Offsets[j+1]], pos, visit); err != nil {
			return err
		}
	}
	return nil
}

// ftsParams are the analyzer parameters of the segment: the index's own
// when it has segments (opts.Params must then be absent or say the
// same), else opts.Params over pylance's defaults; and whether the
// index's segments are of FTS format 1, which the new one then is too
// (pylance 14.0.2 keeps an index's format in its deltas).
func ftsParams(ctx context.Context, st storage.Store, snap *table.Snapshot, opts ScalarBuildOptions, existing *pb.IndexMetadata) (fts.Params, bool, error) {
	given, err := fts.ParseParams(string(opts.Params))
	if err != nil {
		return given, false, err
	}
	if existing == nil {
		return given, false, nil
	}
	ist, err := snap.IndexStore(ctx, st, existing)
	if err != nil {
		return given, false, err
	}
	seg, err := fts.Open(ctx, ist, existing)
	if err != nil {
		return given, false, fmt.Errorf("build: reading index %q's segment %s: %w", opts.IndexName, table.IndexUUID(existing), err)
	}
	have, err := fts.ParseParams(seg.Meta.Params)
	if err != nil {
		return given, false, err
	}
	if len(opts.Params) > 0 && string(opts.Params) != "null" && given.JSON() != have.JSON() {
		return given, false, fmt.Errorf("%w: build: index %q's segments are analyzed with %s, not %s", errkind.InvalidInput, opts.IndexName, have.JSON(), given.JSON())
	}
	return have, seg.Meta.Format1(), nil
}

// ftsDetails is the InvertedIndexDetails message pylance 14.0.2 records
// in the manifest for an index of parameters p and FTS format format
// (protobuf field numbers from Lance's index proto; 12 and 15, the block
// size and the FTS format, as pylance 14.0.2 writes them).
func ftsDetails(p fts.Params, format uint64) []byte {
	var b []byte
	str := func(num protowire.Number, s string) {
		b = protowire.AppendTag(b, num, protowire.BytesType)
		b = protowire.AppendString(b, s)
	}
	varint := func(num protowire.Number, v uint64) {
		if v != 0 {
			b = protowire.AppendTag(b, num, protowire.VarintType)
			b = protowire.AppendVarint(b, v)
		}
	}
	flag := func(num protowire.Number, on bool) {
		if on {
			varint(num, 1)
		}
	}
	str(1, p.BaseTokenizer)
	lang, _ := json.Marshal(p.Language)
	str(2, string(lang))
	flag(3, p.WithPosition)
	if p.MaxTokenLength != nil { // optional: written when set, even 0
		b = protowire.AppendTag(b, 4, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(*p.MaxTokenLength))
	}
	flag(5, p.LowerCase)
	flag(6, p.Stem)
	flag(7, p.RemoveStopWords)
	flag(8, p.ASCIIFolding)
	varint(9, uint64(p.MinNgramLength))
	varint(10, uint64(p.MaxNgramLength))
	flag(11, p.PrefixOnly)
	varint(12, uint64(p.BlockSize))
	varint(15, format)
	return b
}
