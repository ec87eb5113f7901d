package lancefile

import (
	"context"
	"testing"
)

// FuzzOpen feeds whole files (fixture files, mutated) to the footer, schema
// and column metadata decoders, then reads every global buffer. It must
// only ever return errors.
func FuzzOpen(f *testing.F) {
	for _, b := range fixtureFiles(f) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := openBytes(t, b)
		if err != nil {
			return
		}
		for i := 0; i < r.NumGlobalBuffers(); i++ {
			_, _ = r.GlobalBuffer(context.Background(), i)
		}
	})
}

// FuzzParseFooter checks the footer parser alone against arbitrary tails.
func FuzzParseFooter(f *testing.F) {
	for _, b := range fixtureFiles(f) {
		f.Add(b[len(b)-FooterLen:], int64(len(b)))
	}
	f.Fuzz(func(t *testing.T, tail []byte, size int64) {
		if len(tail) != FooterLen {
			return
		}
		foot, err := parseFooter(tail, size)
		if err != nil {
			return
		}
		if foot.gboStart+16*uint64(foot.numGlobal)+FooterLen != uint64(size) {
			t.Fatalf("accepted a footer whose tables do not end at the footer: %+v size %d", foot, size)
		}
	})
}
