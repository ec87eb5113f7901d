// Package fold holds the part of tantivy's ASCII folding (the
// AsciiFoldingFilter that pylance 14.0.2's NGRAM and INVERTED analyzers
// apply after lower-casing) that this module reproduces, character for
// character.
//
// Upstream it is a table of thousands of characters. We reproduce it for
// the characters of foldRanges and decomposedRanges, where
// test_scalar_build.py checks every character against pylance (Latin-1
// and Extended-A fold by latinFold's table, decomposedRanges by NFKD, the
// rest are letters of scripts that do not fold). Callers refuse a text
// with any other non-ASCII character rather than guess.
package fold

import (
	"sync"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// foldRanges are the code points whose folding is known here.
var foldRanges = []struct{ lo, hi rune }{
	{0x00A0, 0x017F}, // Latin-1 Supplement, Latin Extended-A
	{0x0370, 0x03FF}, // Greek
	{0x0400, 0x04FF}, // Cyrillic
	{0x0590, 0x05FF}, // Hebrew
	{0x0600, 0x06FF}, // Arabic
	{0x0900, 0x097F}, // Devanagari
	{0x3040, 0x30FF}, // Hiragana, Katakana
	{0x4E00, 0x9FFF}, // CJK Unified Ideographs
	{0xAC00, 0xD7A3}, // Hangul syllables
}

// decomposedRanges fold to the ASCII letters and digits of each
// character's compatibility decomposition (NFKD), marks and other
// characters dropped; pylance 14.0.2 folds every one of them so
// (test_ngram_build_writes_what_pylance_writes). They count as known.
var decomposedRanges = []struct{ lo, hi rune }{
	{0x0180, 0x024F}, // Latin Extended-B (Romanian, Pinyin tones...)
	{0x1E00, 0x1EFF}, // Latin Extended Additional (Vietnamese, Welsh...)
	{0x0250, 0x02AF}, // IPA Extensions
	{0x2070, 0x209F}, // superscripts and subscripts
	{0x2C60, 0x2C7C}, // Latin Extended-C (pylance folds U+2C7D otherwise)
	{0xA720, 0xA7F0}, // Latin Extended-D (and U+A7F1 on otherwise)
	{0xFB00, 0xFB06}, // Latin ligatures (ﬁ is "fi")
	{0xFF00, 0xFFEF}, // halfwidth and fullwidth forms (Ａ is "a")
}

// Known reports whether r's folding is known here: r is ASCII, or in a
// range of foldRanges or decomposedRanges.
func Known(r rune) bool {
	if r < utf8.RuneSelf {
		return true
	}
	for _, g := range foldRanges {
		if r >= g.lo && r <= g.hi {
			return true
		}
	}
	for _, g := range decomposedRanges {
		if r >= g.lo && r <= g.hi {
			return true
		}
	}
	return false
}

// latinFold is what a lower-cased Latin-1 or Latin Extended-A character
// folds to, where that is made of ASCII letters and digits (others fold
// to punctuation or not at all, and end every token they are part of).
// Built on first use: at package init it was a tenth of loading the
// kernel, in every process, whether or not it indexes text.
var latinFold = sync.OnceValue(buildLatinFold)

// Letters returns what r, lower-cased, folds to where that is made of
// ASCII letters and digits; ok is false for a character that keeps its
// form (a letter of a script that does not fold) or folds to punctuation
// or nothing. Callers check Known first.
func Letters(r rune) (to string, ok bool) {
	to, ok = latinFold()[unicode.ToLower(r)]
	return to, ok
}

func buildLatinFold() map[rune]string {
	latinFold := map[rune]string{}
	add := func(to string, rs string) {
		for _, r := range rs {
			latinFold[r] = to
		}
	}
	add("a", "àáâãäåāăąª")
	add("ae", "æ")
	add("c", "çćĉċč")
	add("d", "ðďđ")
	add("e", "èéêëēĕėęě")
	add("g", "ĝğġģ")
	add("h", "ĥħ")
	add("i", "ìíîïĩīĭįı")
	add("ij", "ĳ")
	add("j", "ĵ")
	add("k", "ķĸ")
	add("l", "ĺļľŀł")
	add("n", "ñńņňŉŋ")
	add("o", "òóôõöøōŏőº")
	add("oe", "œ")
	add("r", "ŕŗř")
	add("s", "śŝşšſ")
	add("ss", "ß")
	add("t", "ţťŧ")
	add("th", "þ")
	add("u", "ùúûüũūŭůűų")
	add("w", "ŵ")
	add("y", "ýÿŷ")
	add("z", "źżž")
	add("1", "¹")
	add("2", "²")
	add("3", "³")
	add("14", "¼") // as pylance 14.0.2 folds them: no fraction slash
	add("12", "½")
	add("34", "¾")
	// NFKD splits ẚ into "a" and a modifier letter (NFD keeps it whole);
	// ẛ decomposes to ſ, folded above. Characters without a
	// decomposition (ƀ, ƒ, ẜ, Ỻ...) do not fold, in pylance as here.
	for _, g := range decomposedRanges {
		for r := g.lo; r <= g.hi; r++ {
			var to []byte
			for _, d := range norm.NFKD.String(string(unicode.ToLower(r))) {
				switch {
				case d < utf8.RuneSelf && (unicode.IsLetter(d) || unicode.IsDigit(d)):
					to = append(to, byte(d))
				case latinFold[d] != "":
					to = append(to, latinFold[d]...)
				}
			}
			if len(to) > 0 {
				latinFold[unicode.ToLower(r)] = string(to)
			}
		}
	}
	return latinFold
}
