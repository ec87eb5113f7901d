package fts

import (
	"errors"
	"reflect"
	"testing"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
)

// Stems pylance 14.0.2 gives (each seen in its index of the word), where
// Snowball English 3.x differs from the original Porter2 or the rules
// interact.
func TestStemEnglish(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"organization", "organiz"}, {"organic", "organic"}, {"university", "universiti"}, {"universal", "universal"},
		{"lateral", "lateral"}, {"emergency", "emergenc"}, {"paste", "paste"}, {"pasted", "paste"}, {"pasting", "paste"},
		{"international", "internat"}, {"interval", "interval"}, {"internal", "internal"}, {"interfere", "interfer"},
		{"entomologist", "entomolog"}, {"added", "add"}, {"ebbed", "ebb"}, {"erred", "err"}, {"evening", "evening"},
		{"inning", "inning"}, {"proceed", "proceed"}, {"exceeding", "exceed"}, {"dying", "die"}, {"lying", "lie"},
		{"flying", "fli"}, {"skies", "sky"}, {"skis", "ski"}, {"news", "news"}, {"atlas", "atlas"},
		{"generously", "generous"}, {"communism", "communism"}, {"arsenal", "arsenal"}, {"happiness", "happi"},
		{"relational", "relat"}, {"conditional", "condit"}, {"hopping", "hop"}, {"hoping", "hope"}, {"filing", "file"},
		{"controlling", "control"}, {"quickly", "quick"}, {"early", "earli"}, {"only", "onli"}, {"cries", "cri"},
		{"ties", "tie"}, {"caress", "caress"}, {"cats", "cat"}, {"consistency", "consist"}, {"yelling", "yell"},
		{"saying", "say"}, {"obeying", "obey"}, {"cry", "cri"}, {"crying", "cri"}, {"knightly", "knight"},
		{"biology", "biolog"}, {"goodness", "good"}, {"adjustment", "adjust"}, {"effective", "effect"},
		{"bowdlerize", "bowdler"}, {"a", "a"}, {"by", "by"}, {"naïveté", "naïveté"}, {"straße", "straße"},
	} {
		if got := stemEnglish(c.in); got != c.want {
			t.Errorf("stem(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

type tok struct {
	s   string
	pos uint32
}

func analyze(t *testing.T, p Params, text string) ([]tok, error) {
	t.Helper()
	a, err := NewAnalyzer(p)
	if err != nil {
		return nil, err
	}
	var out []tok
	err = a.Analyze([]byte(text), func(b []byte, pos uint32) error {
		out = append(out, tok{string(b), pos})
		return nil
	})
	return out, err
}

func TestAnalyzer(t *testing.T) {
	def := DefaultParams()
	ws := DefaultParams()
	ws.BaseTokenizer, ws.Stem, ws.ASCIIFolding = "whitespace", false, false
	short := DefaultParams()
	n := 5
	short.MaxTokenLength = &n
	custom := DefaultParams()
	custom.CustomStopWords = &[]string{"fox"}
	for _, c := range []struct {
		name string
		p    Params
		text string
		want []tok
	}{
		// stop words and removed tokens keep their positions: gaps
		{"positions", def, "The Quick brown foxes were running", []tok{{"quick", 1}, {"brown", 2}, {"fox", 3}, {"run", 5}}},
		// stemming sees the unfolded token: fullwidth "ａｐｐｌｅ" is not stemmed to "appl"
		{"folding", def, "Café ÆSIR straße İstanbul ﬁne Ａｐｐｌｅ x² ½", []tok{{"cafe", 0}, {"aesir", 1}, {"strasse", 2}, {"i\u0307stanbul", 3}, {"fine", 4}, {"apple", 5}, {"x2", 6}, {"12", 7}}},
		{"scripts", def, "日本語 Москва १२३ नमस्ते e-mail foo_bar 🙂ok", []tok{{"日本語", 0}, {"москва", 1}, {"१२३", 2}, {"नमस", 3}, {"ते", 4}, {"e", 5}, {"mail", 6}, {"foo", 7}, {"bar", 8}, {"ok", 9}}},
		{"max length in bytes", short, "four fiver éééé", []tok{{"four", 0}}},
		{"whitespace", ws, "Hello, it's ¿Qué?", []tok{{"hello,", 0}, {"¿qué?", 2}}},
		{"custom stop words", custom, "the fox", []tok{{"the", 0}}},
		{"empty", def, "", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := analyze(t, c.p, c.text)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("got %v, want %v", got, c.want)
			}
		})
	}
}

// TestAnalyzeAtRunsOn: the texts of a list<string> row continue one
// another's positions, the tokens filters drop counted (a trailing stop
// word moves the next text's first token), empty texts adding none.
func TestAnalyzeAtRunsOn(t *testing.T) {
	an, err := NewAnalyzer(DefaultParams())
	if err != nil {
		t.Fatal(err)
	}
	var got []tok
	pos := uint32(0)
	for _, text := range []string{"xa the", "", "yb", "the zc"} {
		if pos, err = an.AnalyzeAt([]byte(text), pos, func(b []byte, p uint32) error {
			got = append(got, tok{string(b), p})
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	if want := []tok{{"xa", 0}, {"yb", 2}, {"zc", 4}}; !reflect.DeepEqual(got, want) || pos != 5 {
		t.Errorf("got %v ending at %d, want %v ending at 5", got, pos, want)
	}
}

func TestAnalyzerRefuses(t *testing.T) {
	french := DefaultParams()
	french.Language = "French"
	ngram := DefaultParams()
	ngram.BaseTokenizer = "ngram"
	upper := DefaultParams()
	upper.LowerCase = false
	for _, c := range []struct {
		name string
		p    Params
		text string
		kind error
	}{
		{"language", french, "x", errkind.Unsupported},
		{"tokenizer", ngram, "x", errkind.Unsupported},
		{"stem without lower-casing", upper, "x", errkind.Unsupported},
		{"folding not reproduced", DefaultParams(), "chapter Ⅻ", errkind.Unsupported},
		{"not UTF-8", DefaultParams(), "a\xffb", errkind.InvalidInput},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := analyze(t, c.p, c.text); !errors.Is(err, c.kind) {
				t.Fatalf("err = %v, want %v", err, c.kind)
			}
		})
	}
}

func TestParseParams(t *testing.T) {
	p, err := ParseParams(`{"with_position":true,"max_token_length":null,"custom_stop_words":["a"]}`)
	if err != nil {
		t.Fatal(err)
	}
	if !p.WithPosition || p.MaxTokenLength != nil || !p.Stem || (*p.CustomStopWords)[0] != "a" || *p.LanceTokenizer != "text" {
		t.Fatalf("parsed %+v", p)
	}
	// pylance 14.0.2's text for its defaults
	want := `{"lance_tokenizer":"text","base_tokenizer":"simple","language":"English","with_position":false,"max_token_length":40,"lower_case":true,"stem":true,"remove_stop_words":true,"custom_stop_words":null,"ascii_folding":true,"min_ngram_length":3,"max_ngram_length":3,"prefix_only":false,"block_size":128,"split_identifiers":false,"split_on_numerics":false,"preserve_original":false,"index_operators":false}`
	if got := DefaultParams().JSON(); got != want {
		t.Fatalf("defaults:\n%s\nwant\n%s", got, want)
	}
	if _, err := ParseParams(`{"stemmer":true}`); !errors.Is(err, errkind.InvalidInput) {
		t.Fatalf("unknown key: %v", err)
	}
}
