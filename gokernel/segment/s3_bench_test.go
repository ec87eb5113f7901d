package segment

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/pb"
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/s3test"
	"github.com/lance-segmerge/lance-segmerge/gokernel/ivf"
	"github.com/lance-segmerge/lance-segmerge/gokernel/storage"
	"github.com/lance-segmerge/lance-segmerge/gokernel/table"
	"golang.org/x/sync/errgroup"
)

// BenchmarkMergeS3 merges every segment of one index of a real dataset
// (SEGMERGE_BENCH_S3_DATASET, a local directory; bench/bench_scale.py
// --preset s3 builds one) into one, on local disk ("local") and on S3
// (moto at SEGMERGE_S3_ENDPOINT, through tools/with_emulators.py, or with
// SEGMERGE_BENCH_S3_SERVER=inprocess a Go server in this process) behind a
// proxy that delays every request by SEGMERGE_BENCH_S3_DELAY (default
// 20ms), with MergeOptions.Parallelism set to each of
// SEGMERGE_BENCH_S3_INFLIGHT (default "4,16,64") reads in flight
// ("s3-inflight-N"). MB/s counts the input index bytes. Each merge starts
// with an empty segment cache, so opening the inputs is measured too.
// "s3-floor" is what no merge there can beat: every input file read whole
// (the store's concurrent 8 MiB ranged reads, 8 files at once) and written
// back as a new object, through the same proxy; "s3-floor-nodelay" the
// same without the delay (the server's own ceiling on this machine).
func BenchmarkMergeS3(b *testing.B) {
	src := os.Getenv("SEGMERGE_BENCH_S3_DATASET")
	if src == "" {
		b.Skip("set SEGMERGE_BENCH_S3_DATASET to a dataset directory (bench/bench_scale.py --preset s3)")
	}
	ctx := context.Background()
	delay := 20 * time.Millisecond
	if v := os.Getenv("SEGMERGE_BENCH_S3_DELAY"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			b.Fatal(err)
		}
		delay = d
	}
	inflight := []int{4, 16, 64}
	if v := os.Getenv("SEGMERGE_BENCH_S3_INFLIGHT"); v != "" {
		inflight = nil
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(f)
			if err != nil {
				b.Fatal(err)
			}
			inflight = append(inflight, n)
		}
	}
	var endpoint string
	switch server := os.Getenv("SEGMERGE_BENCH_S3_SERVER"); server {
	case "", "env":
		endpoint = s3test.Endpoint(b)
	case "inprocess":
		endpoint = s3test.InProcess(b)
	default:
		b.Fatalf("SEGMERGE_BENCH_S3_SERVER=%q: want env (SEGMERGE_S3_ENDPOINT) or inprocess", server)
	}
	bucket := s3test.NewBucketAt(b, endpoint)
	direct := s3Store(b, bucket, endpoint, 3)
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return storage.Put(ctx, direct, filepath.ToSlash(rel), data)
	})
	if err != nil {
		b.Fatal(err)
	}
	local := storage.NewLocal(src, src)
	snap, err := table.Open(ctx, local, 0)
	if err != nil {
		b.Fatal(err)
	}
	var metas []*pb.IndexMetadata
	var files []string
	var bytes int64
	for _, im := range snap.Indices {
		if IsVector(im) {
			metas = append(metas, im)
			for _, f := range im.GetFiles() {
				bytes += int64(f.GetSizeBytes())
				files = append(files, "_indices/"+table.IndexUUID(im)+"/"+f.GetPath())
			}
		}
	}
	copyFloor := func(b *testing.B, st storage.Store) {
		b.SetBytes(bytes)
		for i := 0; i < b.N; i++ {
			g, gctx := errgroup.WithContext(ctx)
			g.SetLimit(8)
			for _, name := range files {
				g.Go(func() error {
					o, err := st.Open(gctx, name)
					if err != nil {
						return err
					}
					defer o.Close()
					buf := make([]byte, o.Size())
					if err := o.ReadAt(gctx, buf, 0); err != nil {
						return err
					}
					return storage.Put(gctx, st, "floor/"+name, buf)
				})
			}
			if err := g.Wait(); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			for _, name := range files {
				if err := st.Delete(ctx, "floor/"+name); err != nil {
					b.Fatal(err)
				}
			}
			b.StartTimer()
		}
	}
	merge := func(b *testing.B, st storage.Store, cleanup storage.Store, parallelism int) {
		b.SetBytes(bytes)
		for i := 0; i < b.N; i++ {
			ivf.SetCacheLimit(ivf.SetCacheLimit(0)) // empty: opening is part of the merge
			snap, err := table.Open(ctx, st, 0)
			if err != nil {
				b.Fatal(err)
			}
			m, err := Merge(ctx, st, snap, metas, MergeOptions{Parallelism: parallelism})
			if err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			if _, err := RemoveUncommitted(ctx, cleanup, []string{table.IndexUUID(m)}); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
	}
	b.Run("local", func(b *testing.B) { merge(b, local, local, 0) })
	proxy := s3test.NewFaultProxy(b, endpoint, 0, 1)
	proxy.SetDelay(delay)
	for _, n := range inflight {
		b.Run(fmt.Sprintf("s3-inflight-%d", n), func(b *testing.B) {
			merge(b, s3Store(b, bucket, proxy.URL, 3), direct, n)
		})
	}
	b.Run("s3-nodelay-default", func(b *testing.B) { merge(b, direct, direct, 0) })
	b.Run("s3-floor", func(b *testing.B) { copyFloor(b, s3Store(b, bucket, proxy.URL, 3)) })
	b.Run("s3-floor-nodelay", func(b *testing.B) { copyFloor(b, direct) })
}
