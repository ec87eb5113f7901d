package ngram

import (
	"context"
	"encoding/binary"
	"fmt"
	"unicode/utf8"

	"github.com/RoaringBitmap/roaring/v2/roaring64"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/fold"
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/pb"
	"github.com/lance-segmerge/lance-segmerge/gokernel/keysort"
	"github.com/lance-segmerge/lance-segmerge/gokernel/lancefile"
	"github.com/lance-segmerge/lance-segmerge/gokernel/storage"
)

// NullToken is the token pylance 14.0.2 files a null text under.
const NullToken = 0

// How pylance 14.0.2 turns a text into tokens: the whole text lower-cased
// and ASCII-folded (tantivy's LowerCaser and AsciiFoldingFilter), then
// every run of three consecutive characters made only of ASCII letters
// and digits is a token, numbered in base 37 (digits 1-10, letters
// 11-36, the first character most significant). Texts shorter than three
// characters have none; a null text has NullToken.
//
// Folding is package fold's: a text with a character whose folding it
// does not know is refused, never guessed.

// Tokens calls visit with the token of each trigram of text (a token may
// come more than once). errkind.Unsupported for a character whose folding
// is not known here, InvalidInput for text that is not UTF-8.
func Tokens(text []byte, visit func(uint32) error) error {
	// the folded text, one byte per character: an ASCII letter or digit,
	// or 0 for any other character (it ends every trigram it is part of)
	var buf [256]byte
	chars := buf[:0]
	emit := func(c byte) {
		switch {
		case c >= 'A' && c <= 'Z':
			chars = append(chars, c+'a'-'A')
		case c >= 'a' && c <= 'z' || c >= '0' && c <= '9':
			chars = append(chars, c)
		default:
			chars = append(chars, 0)
		}
	}
	for i := 0; i < len(text); {
		c := text[i]
		if c < utf8.RuneSelf {
			emit(c)
			i++
			continue
		}
		r, size := utf8.DecodeRune(text[i:])
		if r == utf8.RuneError && size == 1 {
			return fmt.Errorf("%w: ngram: text is not UTF-8 (byte %d)", errkind.InvalidInput, i)
		}
		i += size
		if !fold.Known(r) {
			return fmt.Errorf("%w: ngram build: character %U (pylance folds text with tantivy's ASCII folding table, which is reproduced here for the Latin blocks, IPA, super- and subscripts, ligatures, fullwidth forms and the letters of scripts that do not fold; build this index with pylance)", errkind.Unsupported, r)
		}
		if r == 'İ' { // lower-cased to "i" and a combining dot
			chars = append(chars, 'i', 0)
			continue
		}
		f, ok := fold.Letters(r)
		if !ok {
			chars = append(chars, 0)
			continue
		}
		for j := 0; j < len(f); j++ {
			emit(f[j])
		}
	}
	for i := 0; i+3 <= len(chars); i++ {
		a, b, c := chars[i], chars[i+1], chars[i+2]
		if a == 0 || b == 0 || c == 0 {
			continue
		}
		if err := visit(digit(a)*37*37 + digit(b)*37 + digit(c)); err != nil {
			return err
		}
	}
	return nil
}

// TokenText is the trigram a token stands for ("" for NullToken).
func TokenText(t uint32) string {
	if t == NullToken {
		return ""
	}
	b := make([]byte, 0, 3)
	for _, m := range []uint32{37 * 37, 37, 1} {
		d := t / m % 37
		switch {
		case d == 0:
			b = append(b, '?')
		case d <= 10:
			b = append(b, byte('0'+d-1))
		default:
			b = append(b, byte('a'+d-11))
		}
	}
	return string(b)
}

func digit(c byte) uint32 {
	if c <= '9' {
		return uint32(c-'0') + 1
	}
	return uint32(c-'a') + 11
}

// Build writes an NGRAM segment's ngram_postings.lance (at name, in file
// format v) of the (token, row address) pairs s holds (a uint32 sorter):
// a row per token, ascending, each with the 64-bit roaring bitmap of its
// rows, as pylance's create_index_uncommitted writes one. Memory is the
// sorter's budget, a window of tokens and the rows of the largest token.
func Build(ctx context.Context, st storage.Store, s *keysort.Sorter, name string, v lancefile.Version) (*Result, error) {
	w, err := createPostings(ctx, st, name, v, true)
	if err != nil {
		return nil, err
	}
	defer w.sw.Abort()
	res := &Result{}
	var (
		cur  uint32
		have bool
		bm   = roaring64.New()
	)
	flush := func() error {
		if !have {
			return nil
		}
		b, err := bm.ToBytes()
		if err != nil {
			return fmt.Errorf("ngram build: %w", err)
		}
		res.RowsWritten += bm.GetCardinality()
		bm.Clear()
		return w.add(cur, b)
	}
	err = s.Sort(ctx, func(valid bool, value []byte, row uint64) error {
		if !valid || len(value) != 4 {
			return fmt.Errorf("%w: ngram build: a token of %d bytes", errkind.InvalidInput, len(value))
		}
		tok := binary.LittleEndian.Uint32(value)
		if !have || tok != cur {
			if err := flush(); err != nil {
				return err
			}
			cur, have = tok, true
		}
		bm.Add(row)
		return nil
	})
	if err == nil {
		err = flush()
	}
	if err == nil {
		res.Files, err = w.finish()
	}
	if err != nil {
		return nil, err
	}
	res.TokensWritten = w.rows
	return res, nil
}

// TokenRow is a (token, row) pair of a segment.
type TokenRow struct {
	Token uint32
	RowID uint64
}

// Sample streams a segment and returns up to perToken rows of about
// n/perToken of its tokens, evenly spread, to check against the column's
// data.
func Sample(ctx context.Context, st storage.Store, im *pb.IndexMetadata, n, perToken int) ([]TokenRow, error) {
	s, err := Open(ctx, st, im)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	step := max(uint64(1), s.Tokens*uint64(perToken)/uint64(max(n, 1)))
	var out []TokenRow
	c := &cursor{seg: s}
	for k := uint64(0); k < s.Tokens; k++ {
		if c.i++; c.i >= c.n {
			ok, err := c.fill(ctx)
			if err != nil {
				return nil, err
			}
			if !ok {
				break
			}
		}
		if k%step != 0 {
			continue
		}
		bm, err := DecodePosting(c.posting())
		if err != nil {
			return nil, fmt.Errorf("token %d: %w", c.token(), err)
		}
		it := bm.Iterator()
		for j := 0; j < perToken && it.HasNext(); j++ {
			out = append(out, TokenRow{Token: c.token(), RowID: it.Next()})
		}
	}
	return out, nil
}
