package ngram

import (
	"errors"
	"slices"
	"testing"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
)

func TestTokens(t *testing.T) {
	for _, tc := range []struct {
		text string
		want []string
		err  error
	}{
		{"", nil, nil},
		{"ab", nil, nil},
		{"Hello World", []string{"hel", "ell", "llo", "wor", "orl", "rld"}, nil},
		{"a-b_c dé9", []string{"de9"}, nil},
		{"Über straße", []string{"ube", "ber", "str", "tra", "ras", "ass", "sse"}, nil},
		{"日本語abc", []string{"abc"}, nil},
		{"İst", nil, nil}, // "i" and a combining dot: no trigram
		{"xİstan", []string{"sta", "tan"}, nil},
		{"q½z", []string{"q12", "12z"}, nil},
		{"ﬁne Ｌａｎｃｅ", []string{"fin", "ine", "lan", "anc", "nce"}, nil},
		{"Việt", []string{"vie", "iet"}, nil},
		{"ℂ", nil, errkind.Unsupported}, // letterlike symbols: pylance's folding of them is not known here
		{"\xff\xfe", nil, errkind.InvalidInput},
	} {
		var got []string
		err := Tokens([]byte(tc.text), func(tok uint32) error {
			got = append(got, TokenText(tok))
			return nil
		})
		if tc.err != nil {
			if !errors.Is(err, tc.err) {
				t.Errorf("%q: error %v, want %v", tc.text, err, tc.err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("%q: tokens %q (%v), want %q", tc.text, got, err, tc.want)
		}
	}
}
