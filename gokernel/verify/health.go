package verify

import (
	"context"
	"fmt"
	"math"
	"slices"

	"github.com/lance-segmerge/lance-segmerge/gokernel/encode"
	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/pb"
	"github.com/lance-segmerge/lance-segmerge/gokernel/ivf"
	"github.com/lance-segmerge/lance-segmerge/gokernel/modelio"
	"github.com/lance-segmerge/lance-segmerge/gokernel/search"
	"github.com/lance-segmerge/lance-segmerge/gokernel/segment"
	"github.com/lance-segmerge/lance-segmerge/gokernel/storage"
	"github.com/lance-segmerge/lance-segmerge/gokernel/table"
	"github.com/lance-segmerge/lance-segmerge/gokernel/vecdata"
	"github.com/lance-segmerge/lance-segmerge/gokernel/vecmath"
)

// Health measures how well an index's model (trained once) still fits
// today's data: the IVF partition skew, the distance of recent rows to
// their nearest centroid against rows of the training era, and recall@k
// of queries drawn from recent rows against queries drawn from training-era
// rows, estimated on a sample. It reads the manifest, each segment's IVF
// message and a bounded sample of vectors; nothing is written.
//
// Training era: the model was trained when the index was created, at the
// oldest dataset version among its segments (v0). Fragment ids only grow,
// so rows of fragments whose id is at most the largest id of v0 are the
// training era's, the others arrived since. (A compaction moves old rows
// into new fragments, which then count as recent: the measure is about the
// data's distribution, which compaction does not change.)
//
// Recall estimate: a uniform sample of live rows (SampleRows) stands for
// the table; for each query, the exact k nearest rows of the sample are
// compared with the k that the IVF search (NProbes partitions, the
// quantizer's distances) returns from the sample encoded with the index's
// model. A sample makes neighbours farther apart than in the whole table,
// so the absolute numbers are lower than a query of the real index gets;
// the two eras share the sample and the bias, and their difference is the
// drift.
type HealthOptions struct {
	// SampleRows is the size of the sample that stands for the table.
	// Default 20000 (at least 8 rows per partition).
	SampleRows int `json:"sample_rows"`
	// Queries per era (recent rows, training-era rows). Default 128: the
	// standard error of the difference of two eras' recall@10 is then
	// about 0.025, half the degrading threshold.
	Queries int `json:"queries"`
	// K and NProbes of the recall estimate: default 10 and
	// search.DefaultNProbes (the index's usual query).
	K       int    `json:"k"`
	NProbes int    `json:"nprobes"`
	Seed    uint64 `json:"seed"`
}

// Thresholds of the verdict (part of the report, so that it says what it
// judged by).
type Thresholds struct {
	// RecallDrop: recall of training-era queries minus recent queries.
	RecallDropDegrading float64 `json:"recall_drop_degrading"`
	RecallDropRetrain   float64 `json:"recall_drop_retrain"`
	// ResidualRatio: mean distance to the nearest centroid, recent rows
	// over training-era rows.
	ResidualRatioDegrading float64 `json:"residual_ratio_degrading"`
	ResidualRatioRetrain   float64 `json:"residual_ratio_retrain"`
	// ShareSinceTraining alone makes an index "degrading" (retraining is
	// worth a look once most rows arrived after the model).
	ShareDegrading float64 `json:"share_degrading"`
}

// maxHealthNProbes bounds the partitions one query of the estimate probes.
const maxHealthNProbes = 1 << 20

// DefaultThresholds: see the drift benchmark (bench/drift.py) for how they
// were chosen.
var DefaultThresholds = Thresholds{
	RecallDropDegrading: 0.05, RecallDropRetrain: 0.10,
	ResidualRatioDegrading: 1.15, ResidualRatioRetrain: 1.35,
	ShareDegrading: 0.5,
}

// SegmentHealth is one segment's partition statistics.
type SegmentHealth struct {
	UUID                 string  `json:"uuid"`
	DatasetVersion       uint64  `json:"dataset_version"`
	Rows                 uint64  `json:"num_rows"`
	Partitions           int     `json:"num_partitions"`
	PartitionCV          float64 `json:"partition_cv"`
	PartitionMaxOverMean float64 `json:"partition_max_over_mean"`
}

// HealthReport is what Health measured. Numbers that could not be
// measured are -1.
type HealthReport struct {
	IndexName string `json:"index_name"`
	IndexType string `json:"index_type"`
	Metric    string `json:"metric"`
	Column    string `json:"column"`
	Version   uint64 `json:"version"`
	// TrainingVersion is v0 (see Health).
	TrainingVersion    uint64  `json:"training_version"`
	Rows               uint64  `json:"num_rows"`
	RowsSinceTraining  uint64  `json:"rows_since_training"`
	ShareSinceTraining float64 `json:"share_since_training"`
	UnindexedRows      uint64  `json:"unindexed_rows"`
	// Partition sizes over every segment.
	Partitions           int     `json:"num_partitions"`
	PartitionCV          float64 `json:"partition_cv"`
	PartitionMaxOverMean float64 `json:"partition_max_over_mean"`
	// Mean distance to the nearest centroid (L2; under cosine, of the
	// normalised vectors).
	ResidualTrained float64 `json:"residual_trained"`
	ResidualRecent  float64 `json:"residual_recent"`
	ResidualRatio   float64 `json:"residual_ratio"`
	RecallTrained   float64 `json:"recall_trained"`
	RecallRecent    float64 `json:"recall_recent"`
	RecallDrop      float64 `json:"recall_drop"`
	SampleRows      int     `json:"sample_rows"`
	Queries         int     `json:"queries"`
	K               int     `json:"k"`
	NProbes         int     `json:"nprobes"`
	// Verdict: "ok", "degrading" or "retrain"; Reasons say which
	// measurements crossed which threshold.
	Verdict    string          `json:"verdict"`
	Reasons    []string        `json:"reasons"`
	Thresholds Thresholds      `json:"thresholds"`
	Segments   []SegmentHealth `json:"segments"`
}

// Health measures an index's drift (see HealthOptions). errkind.NotFound
// when the version has no such vector index. Of IVF_HNSW_* indices the
// partitions, rows and residuals are measured, not the recall (their graphs
// are not searched here).
func Health(ctx context.Context, st storage.Store, snap *table.Snapshot, indexName string, opts HealthOptions) (*HealthReport, error) {
	if opts.SampleRows <= 0 {
		opts.SampleRows = 20000
	}
	if opts.Queries <= 0 {
		opts.Queries = 128
	}
	if opts.K <= 0 {
		opts.K = 10
	}
	if opts.NProbes <= 0 {
		opts.NProbes = search.DefaultNProbes
	}
	if opts.SampleRows > maxSampleRows || opts.Queries > maxQueries || opts.K > maxK || opts.NProbes > maxHealthNProbes {
		return nil, fmt.Errorf("%w: health: sample_rows, queries, k or nprobes beyond their limits (%d, %d, %d, %d)",
			errkind.InvalidInput, maxSampleRows, maxQueries, maxK, maxHealthNProbes)
	}
	metas, err := indexSegments(snap, indexName)
	if err != nil {
		return nil, err
	}
	if err := segment.RequireVector(metas[0]); err != nil {
		return nil, err // drift is a vector model's
	}
	rep := &HealthReport{IndexName: indexName, Version: snap.Ref.Version, Column: columnOf(snap, metas[0]),
		Metric: metricOf(metas[0]), Thresholds: DefaultThresholds, K: opts.K, Queries: opts.Queries,
		ResidualTrained: -1, ResidualRecent: -1, ResidualRatio: -1, RecallTrained: -1, RecallRecent: -1, RecallDrop: -1}

	// Partitions, per segment and over the index.
	var total []uint64
	widest, widestParts := metas[0], 0
	v0 := metas[0].GetDatasetVersion()
	covered := map[uint32]bool{}
	for _, im := range metas {
		v0 = min(v0, im.GetDatasetVersion())
		ids, _, err := snap.DecodeCoverage(im)
		if err != nil {
			return nil, err
		}
		for _, id := range ids {
			covered[id] = true
		}
		stats, err := segment.ReadStats(ctx, st, im)
		if err != nil {
			return nil, fmt.Errorf("health: segment %s: %w", table.IndexUUID(im), err)
		}
		if rep.IndexType == "" {
			rep.IndexType = stats.IndexType
		}
		if rep.Metric == "" {
			// pylance's details leave the metric to the files.
			rep.Metric = stats.DistanceType
		}
		// An extended model's segments hold its first partitions (see
		// segment.sameCentroids): partition p is one partition in all.
		if n := len(stats.PartitionRows); n > len(total) {
			total = append(total, make([]uint64, n-len(total))...)
		}
		for p, n := range stats.PartitionRows {
			total[p] += uint64(n)
		}
		if stats.NumPartitions > widestParts {
			widest, widestParts = im, stats.NumPartitions
		}
		cv, mx := skew(stats.PartitionRows)
		rep.Segments = append(rep.Segments, SegmentHealth{UUID: table.IndexUUID(im), DatasetVersion: im.GetDatasetVersion(),
			Rows: stats.NumRows, Partitions: stats.NumPartitions, PartitionCV: cv, PartitionMaxOverMean: mx})
	}
	rep.Partitions = len(total)
	rep.PartitionCV, rep.PartitionMaxOverMean = skew64(total)
	rep.TrainingVersion = v0

	// The eras.
	maxTrained, err := trainingFragments(ctx, st, snap, metas, v0)
	if err != nil {
		return nil, err
	}
	var trained, recent, all []uint64
	live := fragmentLiveRows(snap)
	for _, f := range snap.Manifest.GetFragments() {
		id := f.GetId()
		all = append(all, id)
		n := live[id]
		if covered[uint32(id)] {
			rep.Rows += n
		} else {
			rep.UnindexedRows += n
		}
		if id <= uint64(maxTrained) {
			trained = append(trained, id)
		} else {
			recent = append(recent, id)
			rep.RowsSinceTraining += n
		}
	}
	if t := rep.Rows + rep.UnindexedRows; t > 0 {
		rep.ShareSinceTraining = float64(rep.RowsSinceTraining) / float64(t)
	}
	if len(recent) == 0 {
		// Nothing arrived since training: the newest tenth of the
		// fragments stands for the recent data.
		recent = all[len(all)-max(1, len(all)/10):]
	}

	// The model the index answers with now: the widest segment's (after
	// maintain's extensions; every segment's otherwise).
	o, err := openSegment(ctx, st, snap, widest)
	if err != nil {
		return nil, err
	}
	defer o.close()
	ix := o.index
	if o.model == nil {
		// IVF_HNSW_*: the graphs are not searched here, but the IVF
		// centroids measure the residuals all the same.
		if ix, err = centroidIndex(o.files); err != nil {
			rep.Reasons = append(rep.Reasons, "no drift measured: "+o.noModel.Error())
			rep.Verdict = "ok"
			return rep, nil
		}
	}
	rd, err := vecdata.NewReader(st, snap, rep.Column)
	if err != nil {
		return nil, err
	}
	qTrained, err := rd.Sample(ctx, trained, opts.Queries, opts.Seed^0x7ea1)
	if err != nil {
		return nil, err
	}
	qRecent, err := rd.Sample(ctx, recent, opts.Queries, opts.Seed^0x7ec3)
	if err != nil {
		return nil, err
	}
	rep.NProbes = min(opts.NProbes, ix.NumPartitions())
	resT, qsT := residuals(ix, qTrained)
	resR, qsR := residuals(ix, qRecent)
	if len(qsT) > 0 {
		rep.ResidualTrained = resT
	}
	if len(qsR) > 0 {
		rep.ResidualRecent = resR
	}
	if rep.ResidualTrained > 0 && rep.ResidualRecent >= 0 {
		rep.ResidualRatio = rep.ResidualRecent / rep.ResidualTrained
	}
	if o.model == nil {
		rep.judge()
		rep.Reasons = append(rep.Reasons, "recall not measured: "+o.noModel.Error())
		return rep, nil
	}
	sample, err := rd.Sample(ctx, all, opts.SampleRows, opts.Seed)
	if err != nil {
		return nil, err
	}
	rep.SampleRows = sample.Len()
	if len(qsT) > 0 && len(qsR) > 0 {
		exclude := map[uint64]bool{}
		for _, id := range append(slices.Clone(qTrained.RowIDs), qRecent.RowIDs...) {
			exclude[id] = true
		}
		corpus := withoutRows(sample, exclude, o.model.Dim)
		rep.RecallTrained, err = sampleRecall(o, corpus, qsT, opts.K, rep.NProbes)
		if err != nil {
			return nil, err
		}
		rep.RecallRecent, err = sampleRecall(o, corpus, qsR, opts.K, rep.NProbes)
		if err != nil {
			return nil, err
		}
		rep.RecallDrop = rep.RecallTrained - rep.RecallRecent
	}
	rep.judge()
	return rep, nil
}

// centroidIndex is a search index over a segment's IVF centroids alone
// (as an IVF_FLAT model), for the residuals of a segment whose quantizer
// is not read here.
func centroidIndex(f *ivf.Files) (*search.Index, error) {
	ct := f.Centroids()
	if ct == nil {
		return nil, fmt.Errorf("%w: no IVF centroids", errkind.Corrupt)
	}
	cv, ok := ct.Float32s()
	if !ok {
		return nil, fmt.Errorf("%w: centroids of type %s", errkind.Unsupported, ct.DType)
	}
	metric, err := encode.ParseMetric(f.Distance)
	if err != nil {
		return nil, err
	}
	return search.New(&encode.Model{Type: ivf.IVFFlat, Metric: metric, Dim: ct.Cols(), Centroids: cv})
}

// judge sets the verdict from the thresholds.
func (r *HealthReport) judge() {
	t := r.Thresholds
	r.Verdict = "ok"
	raise := func(to string, format string, args ...any) {
		r.Reasons = append(r.Reasons, fmt.Sprintf(format, args...))
		if to == "retrain" || r.Verdict == "ok" {
			r.Verdict = to
		}
	}
	if r.RecallDrop >= t.RecallDropRetrain {
		raise("retrain", "recall@%d of recent rows is %.3f, of training-era rows %.3f: a drop of %.3f (retrain at %.2f)", r.K, r.RecallRecent, r.RecallTrained, r.RecallDrop, t.RecallDropRetrain)
	} else if r.RecallDrop >= t.RecallDropDegrading {
		raise("degrading", "recall@%d of recent rows is %.3f, of training-era rows %.3f: a drop of %.3f (degrading at %.2f)", r.K, r.RecallRecent, r.RecallTrained, r.RecallDrop, t.RecallDropDegrading)
	}
	if r.RowsSinceTraining == 0 {
		// The model saw every row (a fresh build or reindex; merges,
		// pylance's and ours, keep their oldest input's version): nothing
		// has drifted from it. The newest tenth of the fragments stood in
		// for recent rows, and the measures are reported, but a
		// difference between them and the rest is the data's shape (the
		// model was trained on both), not drift; judging it would make a
		// reindex call for another one.
		r.Verdict = "ok"
		r.Reasons = []string{fmt.Sprintf("no rows since training (version %d): the model was trained on every row, nothing has drifted (the newest fragments stand in for recent rows in the measures)", r.TrainingVersion)}
		return
	}
	if r.ResidualRatio >= t.ResidualRatioRetrain {
		raise("retrain", "recent rows lie %.2f times as far from their nearest centroid as training-era rows (retrain at %.2f)", r.ResidualRatio, t.ResidualRatioRetrain)
	} else if r.ResidualRatio >= t.ResidualRatioDegrading {
		raise("degrading", "recent rows lie %.2f times as far from their nearest centroid as training-era rows (degrading at %.2f)", r.ResidualRatio, t.ResidualRatioDegrading)
	}
	if r.ShareSinceTraining >= t.ShareDegrading {
		raise("degrading", "%.0f%% of the rows arrived after the model was trained (at version %d)", 100*r.ShareSinceTraining, r.TrainingVersion)
	}
}

// trainingFragments is the largest fragment id of the training era: that
// of version v0 when its manifest is still there, else the largest the
// oldest segments cover.
func trainingFragments(ctx context.Context, st storage.Store, snap *table.Snapshot, metas []*pb.IndexMetadata, v0 uint64) (uint32, error) {
	if v0 > 0 {
		if s0, err := table.Open(ctx, st, v0); err == nil {
			if id, ok := s0.MaxFragmentID(); ok {
				return id, nil
			}
		}
	}
	var top uint32
	for _, im := range metas {
		if im.GetDatasetVersion() != v0 {
			continue
		}
		ids, _, err := snap.DecodeCoverage(im)
		if err != nil {
			return 0, err
		}
		for _, id := range ids {
			top = max(top, id)
		}
	}
	return top, nil
}

// fragmentLiveRows is each fragment's physical rows less its deletions.
func fragmentLiveRows(snap *table.Snapshot) map[uint64]uint64 {
	out := map[uint64]uint64{}
	for _, f := range snap.Manifest.GetFragments() {
		n := f.GetPhysicalRows()
		out[f.GetId()] = n - min(n, f.GetDeletionFile().GetNumDeletedRows())
	}
	return out
}

// skew is the coefficient of variation of partition sizes and the largest
// over the mean (0, 0 without rows).
func skew(parts []uint32) (cv, maxOverMean float64) {
	return skew64(func() []uint64 {
		out := make([]uint64, len(parts))
		for i, n := range parts {
			out[i] = uint64(n)
		}
		return out
	}())
}

func skew64(parts []uint64) (cv, maxOverMean float64) {
	if len(parts) == 0 {
		return 0, 0
	}
	var sum, mx float64
	for _, n := range parts {
		sum += float64(n)
		mx = math.Max(mx, float64(n))
	}
	mean := sum / float64(len(parts))
	if mean == 0 {
		return 0, 0
	}
	var ss float64
	for _, n := range parts {
		d := float64(n) - mean
		ss += d * d
	}
	return math.Sqrt(ss/float64(len(parts))) / mean, mx / mean
}

// residuals prepares the batch's vectors as queries and returns their mean
// L2 distance to the nearest centroid (the vector as the index sees it:
// normalised under cosine), with the queries.
func residuals(ix *search.Index, b *vecdata.Batch) (float64, []*search.Query) {
	dim := ix.Model().Dim
	c := ix.Model().Centroids
	var qs []*search.Query
	var sum float64
	for i := 0; i < b.Len(); i++ {
		q, ok := ix.NewQuery(b.Vectors[i*dim : (i+1)*dim])
		if !ok {
			continue
		}
		p := q.Probe(1)[0]
		sum += math.Sqrt(float64(vecmath.L2Sq(q.Vector(), c[p*dim:(p+1)*dim])))
		qs = append(qs, q)
	}
	if len(qs) == 0 {
		return 0, nil
	}
	return sum / float64(len(qs)), qs
}

// withoutRows is the batch without the given row addresses.
func withoutRows(b *vecdata.Batch, drop map[uint64]bool, dim int) *vecdata.Batch {
	out := &vecdata.Batch{}
	for i, id := range b.RowIDs {
		if drop[id] {
			continue
		}
		out.RowIDs = append(out.RowIDs, id)
		out.Vectors = append(out.Vectors, b.Vectors[i*dim:(i+1)*dim]...)
	}
	return out
}

// sampleRecall is recall@k of the queries over the sample: the IVF search
// of the sample encoded with the segment's model (the partitions each
// query probes, the quantizer's distances) against the exact top-k.
func sampleRecall(o *opened, corpus *vecdata.Batch, qs []*search.Query, k, nprobes int) (float64, error) {
	if corpus.Len() == 0 {
		return -1, nil
	}
	probing := make([][]int, o.index.NumPartitions())
	truth := make([]*search.TopK, len(qs))
	got := make([]*search.TopK, len(qs))
	for qi, q := range qs {
		truth[qi], got[qi] = search.NewTopK(k), search.NewTopK(k)
		for _, p := range q.Probe(nprobes) {
			probing[p] = append(probing[p], qi)
		}
	}
	vecs := slices.Clone(corpus.Vectors) // scoreWindow prepares them in place
	if err := scoreWindow(&opened{model: o.model, index: o.index}, qs, truth, got, probing, corpus.RowIDs, vecs, o.model.Dim); err != nil {
		return -1, err
	}
	t, g := make([][]search.Hit, len(qs)), make([][]search.Hit, len(qs))
	for qi := range qs {
		t[qi], g[qi] = truth[qi].Sorted(), got[qi].Sorted()
	}
	return overlap(g, t), nil
}

// VerifyBuild checks that a segment a build wrote over fragments of snap
// (a run journal's output of level 0: a resumed reindex) finished and is
// intact, as segment.VerifyOutput does for merge outputs, and returns its
// manifest entry rebuilt as the build built it (its model read from its
// files), with the model.
func VerifyBuild(ctx context.Context, st storage.Store, snap *table.Snapshot, indexName, column string, fragments []uint64, output string, want []segment.File) (*pb.IndexMetadata, error) {
	if len(fragments) == 0 {
		return nil, fmt.Errorf("%w: a build covers at least one fragment", errkind.InvalidInput)
	}
	id, sizes, files, err := segment.OpenOutput(ctx, st, output, want)
	if err != nil {
		return nil, err
	}
	defer files.Close()
	m, err := modelio.FromFiles(ctx, files, output)
	if err != nil {
		return nil, fmt.Errorf("output %s: %w", output, err)
	}
	col, err := vecdata.ResolveColumn(snap, column)
	if err != nil {
		return nil, err
	}
	return segment.BuiltMetadata(id, snap, indexName, fragments, m, col.FieldID, sizes[ivf.AuxiliaryFileName], sizes[ivf.IndexFileName])
}
