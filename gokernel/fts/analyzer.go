package fts

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/fold"
)

// Params are an INVERTED index's analyzer parameters, as the "params"
// JSON of metadata.lance carries them. The field order is the order
// pylance 14.0.2 writes them in; MarshalJSON keeps it, so a segment we
// build carries the text pylance's own build of the same index carries.
type Params struct {
	LanceTokenizer   *string   `json:"lance_tokenizer"`
	BaseTokenizer    string    `json:"base_tokenizer"`
	Language         string    `json:"language"`
	WithPosition     bool      `json:"with_position"`
	MaxTokenLength   *int      `json:"max_token_length"`
	LowerCase        bool      `json:"lower_case"`
	Stem             bool      `json:"stem"`
	RemoveStopWords  bool      `json:"remove_stop_words"`
	CustomStopWords  *[]string `json:"custom_stop_words"`
	ASCIIFolding     bool      `json:"ascii_folding"`
	MinNgramLength   int       `json:"min_ngram_length"`
	MaxNgramLength   int       `json:"max_ngram_length"`
	PrefixOnly       bool      `json:"prefix_only"`
	BlockSize        int       `json:"block_size"`
	SplitIdentifiers bool      `json:"split_identifiers"`
	SplitOnNumerics  bool      `json:"split_on_numerics"`
	PreserveOriginal bool      `json:"preserve_original"`
	IndexOperators   bool      `json:"index_operators"`
	// SkipMerge is recorded by pylance 2.0.1 (FTS format 1): whether its
	// build left partitions unmerged. It does not change the tokens.
	SkipMerge bool `json:"skip_merge,omitempty"`
}

// DefaultParams are pylance 14.0.2's defaults (create_scalar_index with
// no analyzer arguments).
func DefaultParams() Params {
	text, maxLen := "text", 40
	return Params{
		LanceTokenizer: &text, BaseTokenizer: "simple", Language: "English", MaxTokenLength: &maxLen,
		LowerCase: true, Stem: true, RemoveStopWords: true, ASCIIFolding: true,
		MinNgramLength: 3, MaxNgramLength: 3, BlockSize: BlockSize,
	}
}

// ParseParams reads a params JSON text over the defaults (keys absent
// keep their default, as pylance's serde defaults do). Unknown keys are
// InvalidInput: a parameter we do not know could change the tokens.
func ParseParams(text string) (Params, error) {
	p := DefaultParams()
	if strings.TrimSpace(text) == "" {
		return p, nil
	}
	dec := json.NewDecoder(strings.NewReader(text))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return p, fmt.Errorf("%w: INVERTED parameters %q: %v", errkind.InvalidInput, text, err)
	}
	if p.LanceTokenizer == nil {
		text := "text"
		p.LanceTokenizer = &text
	}
	return p, nil
}

// JSON is the params text a segment carries.
func (p Params) JSON() string {
	b, err := json.Marshal(p)
	if err != nil { // plain fields: cannot fail
		panic(err)
	}
	return string(b)
}

// englishStopWords are the words pylance 14.0.2 removes with
// remove_stop_words and no custom list. Found by asking pylance, one
// candidate word per document, over 29,000 English words and the usual
// contractions: it is not tantivy's (Lucene's) list of 33 that Lance's
// source of late 2025 names, but a longer one that keeps negations (no,
// nor, not, don't...). A contraction it removes that was not among the
// candidates would be kept here; only the whitespace tokenizer makes
// such tokens.
var englishStopWords = []string{
	"a", "about", "above", "after", "again", "against", "all", "am", "an", "and", "any", "are", "as",
	"at", "be", "because", "been", "before", "being", "below", "between", "both", "but", "by", "can",
	"did", "do", "does", "doing", "down", "during", "each", "few", "for", "from", "further", "had",
	"has", "have", "having", "he", "her", "here", "hers", "herself", "him", "himself", "his", "how",
	"i", "if", "in", "into", "is", "it", "its", "itself", "just", "me", "more", "most", "my",
	"myself", "now", "of", "off", "on", "once", "only", "or", "other", "our", "ours", "ourselves",
	"out", "over", "own", "re", "same", "she", "should", "so", "some", "such", "than", "that", "the",
	"their", "theirs", "them", "themselves", "then", "there", "these", "they", "this", "those",
	"through", "to", "too", "under", "until", "up", "very", "was", "we", "were", "what", "when",
	"where", "which", "while", "who", "whom", "why", "will", "with", "you", "your", "yours",
	"yourself", "yourselves", "i'm", "you're", "it's", "you'd", "you'll", "you've", "she's",
	"that'll", "he's", "we're", "they're", "i've", "i'll", "i'd", "he'd", "he'll", "she'd", "she'll",
	"we've", "we'll", "we'd", "they've", "they'll", "they'd", "it'll", "should've", "it'd",
}

// Analyzer turns a document into tokens as pylance 14.0.2's analyzer
// does, for the configurations reproduced here: the simple tokenizer
// (maximal runs of Unicode alphanumerics, as Rust's char::is_alphanumeric
// decides) or the whitespace one (runs between ASCII white space), then
// in this order: tokens of max_token_length bytes or more removed,
// lower-casing, English Snowball stemming, stop words removed, ASCII
// folding. A token keeps the position the tokenizer gave it, so removed
// tokens leave gaps.
type Analyzer struct {
	p      Params
	maxLen int // 0: no limit
	stop   map[string]bool
	simple bool
	buf    []byte // the token handed to visit
	// cache maps a token as the tokenizer cut it to what the filters
	// make of it: text follows Zipf's law, so most tokens are seen before
	// and stemming them again is most of the work. Bounded by cacheSize.
	cache map[string]filtered
}

type filtered struct {
	out  string
	drop bool
}

const cacheSize = 1 << 18

// NewAnalyzer returns the analyzer of p, or errkind.Unsupported naming
// the parameter whose tokens are not reproduced here.
func NewAnalyzer(p Params) (*Analyzer, error) {
	unsupported := func(what string) (*Analyzer, error) {
		return nil, fmt.Errorf("%w: INVERTED build: %s (this version builds the simple and whitespace tokenizers, English stemming and stop words; build this index with pylance)", errkind.Unsupported, what)
	}
	switch {
	case p.LanceTokenizer != nil && *p.LanceTokenizer != "text":
		return unsupported(fmt.Sprintf("lance_tokenizer %q", *p.LanceTokenizer))
	case p.BaseTokenizer != "simple" && p.BaseTokenizer != "whitespace":
		return unsupported(fmt.Sprintf("base_tokenizer %q", p.BaseTokenizer))
	case (p.Stem || p.RemoveStopWords && p.CustomStopWords == nil) && p.Language != "English":
		return unsupported(fmt.Sprintf("language %q", p.Language))
	case p.Stem && !p.LowerCase:
		return unsupported("stemming without lower-casing")
	case p.ASCIIFolding && !p.LowerCase:
		return unsupported("ASCII folding without lower-casing")
	case p.SplitIdentifiers || p.SplitOnNumerics || p.PreserveOriginal || p.IndexOperators:
		return unsupported("split_identifiers, split_on_numerics, preserve_original or index_operators")
	case p.BlockSize != BlockSize:
		return unsupported(fmt.Sprintf("block_size %d (posting blocks of %d documents are written)", p.BlockSize, BlockSize))
	case p.MaxTokenLength != nil && *p.MaxTokenLength < 0:
		return nil, fmt.Errorf("%w: INVERTED build: max_token_length %d", errkind.InvalidInput, *p.MaxTokenLength)
	}
	a := &Analyzer{p: p, simple: p.BaseTokenizer == "simple", cache: map[string]filtered{}}
	if p.MaxTokenLength != nil {
		a.maxLen = *p.MaxTokenLength
		if a.maxLen == 0 { // every token is removed: no token is shorter than 0 bytes
			a.maxLen = -1
		}
	}
	if p.RemoveStopWords {
		words := englishStopWords
		if p.CustomStopWords != nil {
			words = *p.CustomStopWords
		}
		a.stop = make(map[string]bool, len(words))
		for _, w := range words {
			a.stop[w] = true
		}
	}
	return a, nil
}

// WithPositions reports whether the index stores positions.
func (a *Analyzer) WithPositions() bool { return a.p.WithPosition }

// isAlnum is Rust's char::is_alphanumeric: the Alphabetic property
// (letters, letter numbers, Other_Alphabetic, Other_Lowercase,
// Other_Uppercase) or a numeric category.
func isAlnum(r rune) bool {
	if r < utf8.RuneSelf {
		return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9'
	}
	return unicode.In(r, unicode.L, unicode.N, unicode.Other_Alphabetic, unicode.Other_Lowercase, unicode.Other_Uppercase)
}

// assigned reports whether r is assigned in Go's Unicode tables. Rust's
// may be of a newer version; a character this version does not know is
// refused rather than classified.
func assigned(r rune) bool {
	return unicode.In(r, unicode.L, unicode.M, unicode.N, unicode.P, unicode.S, unicode.Z, unicode.Cc, unicode.Cf, unicode.Co)
}

func isASCIISpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\f' || c == '\r'
}

// Analyze calls visit with each token of text and its position. The
// token's bytes are only valid during the call. errkind.InvalidInput for
// text that is not UTF-8, errkind.Unsupported for a character whose
// treatment is not reproduced here.
func (a *Analyzer) Analyze(text []byte, visit func(token []byte, pos uint32) error) error {
	_, err := a.AnalyzeAt(text, 0, visit)
	return err
}

// AnalyzeAt is Analyze with positions counted from pos; it returns the
// position after text's last token. A document that is a list of texts
// is its texts analyzed in turn, each from where the one before ended:
// pylance 14.0.2 numbers the tokens of a list<string> row on, the tokens
// that filters drop (stop words, long tokens) counted, nulls and empty
// texts adding none (measured with its phrase queries).
func (a *Analyzer) AnalyzeAt(text []byte, pos uint32, visit func(token []byte, pos uint32) error) (uint32, error) {
	for i := 0; i < len(text); {
		// the next token: [i, j)
		start, ascii := -1, true
		j := i
		for j < len(text) {
			c := text[j]
			size := 1
			in := false
			if c < utf8.RuneSelf {
				if a.simple {
					in = isAlnum(rune(c))
				} else {
					in = !isASCIISpace(c)
				}
			} else {
				r, n := utf8.DecodeRune(text[j:])
				if r == utf8.RuneError && n == 1 {
					return pos, fmt.Errorf("%w: INVERTED build: text is not UTF-8 (byte %d)", errkind.InvalidInput, j)
				}
				if !assigned(r) {
					return pos, fmt.Errorf("%w: INVERTED build: character %U is not in this version's Unicode tables (%s)", errkind.Unsupported, r, unicode.Version)
				}
				size = n
				in = !a.simple || isAlnum(r)
				if in {
					ascii = false
				}
			}
			if in && start < 0 {
				start = j
			} else if !in && start >= 0 {
				break
			}
			j += size
		}
		if start < 0 {
			break
		}
		tok := text[start:j]
		i = j
		p := pos
		pos++
		if a.maxLen != 0 && (a.maxLen < 0 || len(tok) >= a.maxLen) {
			continue
		}
		f, ok := a.cache[string(tok)]
		if !ok {
			var err error
			if f, err = a.filter(tok, ascii); err != nil {
				return pos, err
			}
			if len(a.cache) < cacheSize {
				a.cache[string(tok)] = f
			}
		}
		if f.drop {
			continue
		}
		a.buf = append(a.buf[:0], f.out...)
		if err := visit(a.buf, p); err != nil {
			return pos, err
		}
	}
	return pos, nil
}

// filter applies lower-casing, stemming, stop words and folding to one
// token (drop: the token is removed).
func (a *Analyzer) filter(tok []byte, ascii bool) (filtered, error) {
	if !ascii && (a.p.Stem || a.p.ASCIIFolding) {
		for _, r := range string(tok) {
			if r >= utf8.RuneSelf && !isAlnum(r) {
				// punctuation inside a whitespace token: stemming's apostrophe rules
				// and folding's punctuation table are not reproduced for it
				return filtered{}, fmt.Errorf("%w: INVERTED build: character %U inside a token, with stemming or ASCII folding", errkind.Unsupported, r)
			}
		}
	}
	s := string(tok)
	if a.p.LowerCase {
		s = lower(s, ascii)
	}
	if a.p.Stem {
		s = stemEnglish(s)
	}
	if a.stop[s] {
		return filtered{drop: true}, nil
	}
	if a.p.ASCIIFolding && !ascii {
		var err error
		if s, err = foldToken(s); err != nil {
			return filtered{}, err
		}
	}
	return filtered{out: s}, nil
}

// lower lower-cases as tantivy's LowerCaser: ASCII letters, or every
// character by Unicode's full lower-case mapping, where İ (U+0130) alone
// becomes two characters.
func lower(s string, ascii bool) string {
	if ascii {
		return strings.ToLower(s)
	}
	var b strings.Builder
	b.Grow(len(s) + 1)
	for _, r := range s {
		if r == 'İ' {
			b.WriteString("i\u0307")
			continue
		}
		b.WriteRune(unicode.ToLower(r))
	}
	return b.String()
}

// foldToken folds a lower-cased token's characters as tantivy's
// AsciiFoldingFilter does, for the characters package fold knows.
func foldToken(s string) (string, error) {
	var b strings.Builder
	b.Grow(len(s))
	for _, r := range s {
		if r < utf8.RuneSelf {
			b.WriteByte(byte(r))
			continue
		}
		if r == 0x0307 { // İ's lower-cased dot: kept, as pylance keeps it
			b.WriteRune(r)
			continue
		}
		if !fold.Known(r) {
			return "", fmt.Errorf("%w: INVERTED build: character %U (pylance folds text with tantivy's ASCII folding table, which is reproduced here for the Latin blocks, IPA, super- and subscripts, ligatures, fullwidth forms and the letters of scripts that do not fold; build this index with pylance, or without ascii_folding)", errkind.Unsupported, r)
		}
		if to, ok := fold.Letters(r); ok {
			b.WriteString(to)
		} else {
			b.WriteRune(r)
		}
	}
	return b.String(), nil
}
