package segment

import (
	"context"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/pb"
	"github.com/lance-segmerge/lance-segmerge/gokernel/policy"
	"github.com/lance-segmerge/lance-segmerge/gokernel/storage"
	"github.com/lance-segmerge/lance-segmerge/gokernel/table"
)

// BenchmarkMergeReal merges real segments (written by pylance; see
// bench/bench_merge.py) in groups of 8 (SEGMERGE_BENCH_GROUP to change it):
// SEGMERGE_BENCH_DATASET names the dataset, SEGMERGE_BENCH_SEGMENTS a JSON
// list of its segment infos.
func BenchmarkMergeReal(b *testing.B) {
	uri, segsPath := os.Getenv("SEGMERGE_BENCH_DATASET"), os.Getenv("SEGMERGE_BENCH_SEGMENTS")
	if uri == "" || segsPath == "" {
		b.Skip("set SEGMERGE_BENCH_DATASET and SEGMERGE_BENCH_SEGMENTS (bench/bench_merge.py --work keeps them)")
	}
	ctx := context.Background()
	raw, err := os.ReadFile(segsPath)
	if err != nil {
		b.Fatal(err)
	}
	metas, err := ParseInfos(raw)
	if err != nil {
		b.Fatal(err)
	}
	var infos []json.RawMessage
	json.Unmarshal(raw, &infos)
	st := storage.NewLocal(uri, uri)
	snap, err := table.Open(ctx, st, 0)
	if err != nil {
		b.Fatal(err)
	}
	var bytes int64
	for _, im := range metas {
		for _, f := range im.GetFiles() {
			bytes += int64(f.GetSizeBytes())
		}
	}
	group := 8
	if g, err := strconv.Atoi(os.Getenv("SEGMERGE_BENCH_GROUP")); err == nil && g > 0 {
		group = g
	}
	b.SetBytes(bytes)
	b.ReportAllocs()
	cpu := startCPU(b)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		var outs []string
		for g := 0; g < len(metas); g += group {
			in := metas[g:min(g+group, len(metas))]
			m, err := Merge(ctx, st, snap, in, MergeOptions{})
			if err != nil {
				b.Fatal(err)
			}
			if len(in) > 1 { // a lone input is returned as it is
				outs = append(outs, table.IndexUUID(m))
			}
		}
		b.StopTimer()
		cpu.pause()
		RemoveUncommitted(ctx, st, outs)
		cpu.resume()
		b.StartTimer()
	}
	cpu.report()
	_ = pb.IndexMetadata{}
}

// cpuMeter reports the process's user and system CPU time per benchmark
// op (what a loaded machine distorts less than wall time).
type cpuMeter struct {
	b            *testing.B
	user, sys    time.Duration
	lastU, lastS time.Duration
}

func rusage() (user, sys time.Duration) {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano()), time.Duration(ru.Stime.Nano())
}

func startCPU(b *testing.B) *cpuMeter {
	m := &cpuMeter{b: b}
	m.resume()
	return m
}

func (m *cpuMeter) pause() {
	u, s := rusage()
	m.user += u - m.lastU
	m.sys += s - m.lastS
}

func (m *cpuMeter) resume() { m.lastU, m.lastS = rusage() }

func (m *cpuMeter) report() {
	m.pause()
	m.b.ReportMetric(float64(m.user.Microseconds())/1e3/float64(m.b.N), "user-ms/op")
	m.b.ReportMetric(float64(m.sys.Microseconds())/1e3/float64(m.b.N), "sys-ms/op")
}

// BenchmarkOptimizeReal runs what optimize runs in one process on a real
// delta dataset (SEGMERGE_BENCH_OPTIMIZE names it; bench/bench_scale.py
// --work keeps one): open the latest version, list the index's segments
// with their statistics, plan one task over all of them, merge it and
// commit. Each iteration works on a fresh copy of the dataset (data and
// index files hard-linked, _versions copied; untimed). It reports each
// phase's share (ns per op) next to the total.
func BenchmarkOptimizeReal(b *testing.B) {
	src := os.Getenv("SEGMERGE_BENCH_OPTIMIZE")
	if src == "" {
		b.Skip("set SEGMERGE_BENCH_OPTIMIZE to a delta dataset (bench/bench_scale.py --work keeps them)")
	}
	index := cmpOr(os.Getenv("SEGMERGE_BENCH_INDEX"), "vec_idx")
	// one task over every segment, or tasks of at most
	// SEGMERGE_BENCH_SEGMENTS_PER_TASK (a plan's first level, its tasks
	// run one after another)
	perTask, err := strconv.Atoi(cmpOr(os.Getenv("SEGMERGE_BENCH_SEGMENTS_PER_TASK"), "4096"))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	var phases [5]time.Duration
	tmp := b.TempDir()
	b.ReportAllocs()
	cpu := startCPU(b)
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		cpu.pause()
		dir := filepath.Join(tmp, "ds")
		os.RemoveAll(dir) // the previous iteration's copy: its pages are reused
		if err := linkTree(src, dir); err != nil {
			b.Fatal(err)
		}
		cpu.resume()
		b.StartTimer()
		t0 := time.Now()
		st := storage.NewLocal(dir, dir)
		snap, err := table.Open(ctx, st, 0)
		if err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if _, err := List(ctx, st, snap, Options{IndexName: index}); err != nil {
			b.Fatal(err)
		}
		t2 := time.Now()
		plan, err := PlanIndex(ctx, st, snap, PlanOptions{IndexName: index, Options: policy.Options{SegmentsPerTask: perTask}})
		if err != nil {
			b.Fatal(err)
		}
		t3 := time.Now()
		var merged []*pb.IndexMetadata
		var sources []string
		for _, t := range plan.Tasks {
			var metas []*pb.IndexMetadata
			for _, s := range t.Segments {
				im, err := s.ToMetadata()
				if err != nil {
					b.Fatal(err)
				}
				metas = append(metas, im)
				sources = append(sources, s.UUID)
			}
			m, err := Merge(ctx, st, snap, metas, MergeOptions{})
			if err != nil {
				b.Fatal(err)
			}
			merged = append(merged, m)
		}
		t4 := time.Now()
		if _, err := Commit(ctx, st, snap, CommitRequest{IndexName: index, Column: plan.Column, Segments: merged, Replaces: sources}, nil); err != nil {
			b.Fatal(err)
		}
		t5 := time.Now()
		for k, d := range []time.Duration{t1.Sub(t0), t2.Sub(t1), t3.Sub(t2), t4.Sub(t3), t5.Sub(t4)} {
			phases[k] += d
		}
	}
	cpu.report()
	for k, name := range []string{"open", "list", "plan", "merge", "commit"} {
		b.ReportMetric(float64(phases[k].Nanoseconds())/float64(b.N), name+"-ns/op")
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// linkTree copies a dataset directory for one benchmark iteration: files
// are hard-linked (Lance never changes a file in place), _versions/ is
// copied (commits write there).
func linkTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		out := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(out, 0o755)
		}
		if strings.HasPrefix(rel, "_versions") {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			return os.WriteFile(out, b, 0o644)
		}
		return os.Link(p, out)
	})
}

// BenchmarkReadWriteFloor moves the bytes of a dataset's index files
// through user space, as any merge must: each file read into one reused
// 8 MiB buffer and appended to one output file, removed after each
// iteration (the floor of bench_merge.py, in Go). SEGMERGE_BENCH_FLOOR
// names a dataset directory.
func BenchmarkReadWriteFloor(b *testing.B) {
	src := os.Getenv("SEGMERGE_BENCH_FLOOR")
	if src == "" {
		b.Skip("set SEGMERGE_BENCH_FLOOR to a dataset directory")
	}
	var files []string
	var total int64
	filepath.WalkDir(filepath.Join(src, "_indices"), func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			files = append(files, p)
			if fi, err := d.Info(); err == nil {
				total += fi.Size()
			}
		}
		return nil
	})
	b.SetBytes(total)
	out := filepath.Join(b.TempDir(), "floor.out")
	buf := make([]byte, 8<<20)
	cpu := startCPU(b)
	for i := 0; i < b.N; i++ {
		w, err := os.Create(out)
		if err != nil {
			b.Fatal(err)
		}
		for _, f := range files {
			r, err := os.Open(f)
			if err != nil {
				b.Fatal(err)
			}
			for {
				n, err := r.Read(buf)
				if n > 0 {
					w.Write(buf[:n])
				}
				if err != nil {
					break
				}
			}
			r.Close()
		}
		w.Close()
		b.StopTimer()
		cpu.pause()
		os.Remove(out)
		cpu.resume()
		b.StartTimer()
	}
	cpu.report()
}
