package verify

import (
	"testing"

	"github.com/lance-segmerge/lance-segmerge/gokernel/fts"
)

func TestDocMismatch(t *testing.T) {
	doc := fts.SampledDoc{RowID: 7, NumTokens: 3, Freqs: map[string]uint32{"fox": 2, "run": 1}}
	for _, c := range []struct {
		name string
		got  map[string]uint32
		n    uint32
		want string
	}{
		{"agree", map[string]uint32{"fox": 2, "run": 1}, 3, ""},
		{"count", map[string]uint32{"fox": 2, "run": 2}, 4, "the index counts 3 tokens, the text has 4"},
		{"frequency", map[string]uint32{"fox": 1, "run": 2}, 3, `token "fox": 2 in the index, 1 in the text`},
		{"token not in the text", map[string]uint32{"fox": 2, "ran": 1}, 3, `token "ran": 0 in the index, 1 in the text`},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := docMismatch(doc, c.got, c.n); got != c.want {
				t.Fatalf("got %q, want %q", got, c.want)
			}
		})
	}
}
