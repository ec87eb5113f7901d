package fts

import "strings"

// English stemming as pylance 14.0.2 stems: the Snowball English
// algorithm (Porter2) in its 3.x revision, whose differences from the
// original Porter2 matter here (checked word for word against pylance on
// 29,000 English words, python/tests/test_fts_build.py samples them):
// more prefixes that fix R1 (past, univers, later, emerg, organ, inter),
// "ogist" to "og", no undoubling after a leading a/e/o ("added" stays
// "add"), and dying/lying/tying, inning/outing/evening... handled in step
// 1b. Characters are runes; only ASCII letters are vowels.

// stemPrefixes fix R1 to their length.
var stemPrefixes = []string{"gener", "commun", "arsen", "past", "univers", "later", "emerg", "organ", "inter"}

// stemExceptions are words stemmed as a whole.
var stemExceptions = map[string]string{
	"skis": "ski", "skies": "sky",
	"idly": "idl", "gently": "gentl", "ugly": "ugli", "early": "earli", "only": "onli", "singly": "singl",
	"sky": "sky", "news": "news", "howe": "howe", "atlas": "atlas", "cosmos": "cosmos", "bias": "bias", "andes": "andes",
}

type stemmer struct {
	w      []rune
	p1, p2 int
}

func isVowel(r rune) bool {
	switch r {
	case 'a', 'e', 'i', 'o', 'u', 'y':
		return true
	}
	return false
}

// stemEnglish stems a lower-cased word.
func stemEnglish(word string) string {
	if s, ok := stemExceptions[word]; ok {
		return s
	}
	w := []rune(word)
	if len(w) < 3 {
		return word
	}
	if w[0] == '\'' {
		w = w[1:]
	}
	yFound := false
	for i := range w {
		if w[i] == 'y' && (i == 0 || isVowel(w[i-1])) {
			w[i] = 'Y'
			yFound = true
		}
	}
	s := &stemmer{w: w}
	s.markRegions()
	s.step1a()
	s.step1b()
	s.step1c()
	s.step2()
	s.step3()
	s.step4()
	s.step5()
	if yFound {
		for i, r := range s.w {
			if r == 'Y' {
				s.w[i] = 'y'
			}
		}
	}
	return string(s.w)
}

// afterVowelRun returns the index after the first non-vowel that follows
// a vowel at or after from, or len(w).
func afterVowelRun(w []rune, from int) int {
	i := from
	for i < len(w) && !isVowel(w[i]) {
		i++
	}
	for i < len(w) && isVowel(w[i]) {
		i++
	}
	if i >= len(w) {
		return len(w)
	}
	return i + 1
}

func (s *stemmer) markRegions() {
	s.p1 = -1
	for _, p := range stemPrefixes {
		if len(s.w) >= len(p) && string(s.w[:len(p)]) == p { // prefixes are ASCII
			s.p1 = len(p)
			break
		}
	}
	if s.p1 < 0 {
		s.p1 = afterVowelRun(s.w, 0)
	}
	s.p2 = afterVowelRun(s.w, s.p1)
}

func (s *stemmer) hasSuffix(suf string) bool {
	n := len(s.w)
	k := len(suf) // suffixes are ASCII
	if k > n {
		return false
	}
	for i := 0; i < k; i++ {
		if s.w[n-k+i] != rune(suf[i]) {
			return false
		}
	}
	return true
}

// longest returns the longest of sufs the word ends with, or "".
func (s *stemmer) longest(sufs ...string) string {
	best := ""
	for _, suf := range sufs {
		if len(suf) > len(best) && s.hasSuffix(suf) {
			best = suf
		}
	}
	return best
}

func (s *stemmer) replace(suf, with string) {
	s.w = append(s.w[:len(s.w)-len(suf)], []rune(with)...)
}

func (s *stemmer) hasVowel(lo, hi int) bool {
	for _, r := range s.w[lo:hi] {
		if isVowel(r) {
			return true
		}
	}
	return false
}

// shortV reports whether w[:end] ends with a short syllable: a
// non-vowel other than w, x or Y after a vowel after a non-vowel, a
// non-vowel after a vowel that starts the word, or "past".
func (s *stemmer) shortV(end int) bool {
	w := s.w[:end]
	n := len(w)
	if n >= 3 && !isVowel(w[n-1]) && w[n-1] != 'w' && w[n-1] != 'x' && w[n-1] != 'Y' && isVowel(w[n-2]) && !isVowel(w[n-3]) {
		return true
	}
	if n == 2 && !isVowel(w[1]) && isVowel(w[0]) {
		return true
	}
	return n >= 4 && string(w[n-4:]) == "past"
}

func (s *stemmer) step1a() {
	if suf := s.longest("'", "'s", "'s'"); suf != "" {
		s.replace(suf, "")
	}
	switch suf := s.longest("sses", "ied", "ies", "s", "us", "ss"); suf {
	case "sses":
		s.replace(suf, "ss")
	case "ied", "ies":
		if len(s.w)-len(suf) >= 2 {
			s.replace(suf, "i")
		} else {
			s.replace(suf, "ie")
		}
	case "s":
		// delete when a vowel comes before the letter before the s
		if n := len(s.w) - 1; n >= 2 && s.hasVowel(0, n-1) {
			s.replace(suf, "")
		}
	}
}

func (s *stemmer) step1b() {
	suf := s.longest("eed", "eedly", "ed", "edly", "ing", "ingly")
	stem := len(s.w) - len(suf)
	switch suf {
	case "":
		return
	case "eed", "eedly":
		pre := string(s.w[:stem])
		if pre != "proc" && pre != "exc" && pre != "succ" && stem >= s.p1 {
			s.replace(suf, "ee")
		}
		return
	case "ing":
		pre := s.w[:stem]
		if len(pre) == 2 && pre[1] == 'y' && !isVowel(pre[0]) {
			s.w = append(s.w[:1], 'i', 'e') // dying -> die
			return
		}
		switch string(pre) {
		case "inn", "out", "cann", "herr", "earr", "even":
			return
		}
	}
	if !s.hasVowel(0, stem) {
		return
	}
	s.w = s.w[:stem]
	switch {
	case s.hasSuffix("at") || s.hasSuffix("bl") || s.hasSuffix("iz"):
		s.w = append(s.w, 'e')
	case s.endsDouble():
		n := len(s.w)
		if !(n == 3 && (s.w[0] == 'a' || s.w[0] == 'e' || s.w[0] == 'o')) {
			s.w = s.w[:n-1]
		}
	case len(s.w) == s.p1 && s.shortV(len(s.w)):
		s.w = append(s.w, 'e')
	}
}

func (s *stemmer) endsDouble() bool {
	for _, d := range []string{"bb", "dd", "ff", "gg", "mm", "nn", "pp", "rr", "tt"} {
		if s.hasSuffix(d) {
			return true
		}
	}
	return false
}

func (s *stemmer) step1c() {
	n := len(s.w)
	if n >= 3 && (s.w[n-1] == 'y' || s.w[n-1] == 'Y') && !isVowel(s.w[n-2]) {
		s.w[n-1] = 'i'
	}
}

var step2Rules = map[string]string{
	"tional": "tion", "enci": "ence", "anci": "ance", "abli": "able", "entli": "ent",
	"izer": "ize", "ization": "ize", "ational": "ate", "ation": "ate", "ator": "ate",
	"alism": "al", "aliti": "al", "alli": "al", "fulness": "ful", "ousli": "ous", "ousness": "ous",
	"iveness": "ive", "iviti": "ive", "biliti": "ble", "bli": "ble", "ogist": "og", "ogi": "og",
	"fulli": "ful", "lessli": "less", "li": "",
}

var step2Suffixes, step3Suffixes, step4Suffixes []string

func init() {
	for k := range step2Rules {
		step2Suffixes = append(step2Suffixes, k)
	}
	for k := range step3Rules {
		step3Suffixes = append(step3Suffixes, k)
	}
	step4Suffixes = []string{"al", "ance", "ence", "er", "ic", "able", "ible", "ant", "ement", "ment", "ent", "ism", "ate", "iti", "ous", "ive", "ize", "ion"}
}

func (s *stemmer) step2() {
	suf := s.longest(step2Suffixes...)
	if suf == "" || len(s.w)-len(suf) < s.p1 {
		return
	}
	stem := len(s.w) - len(suf)
	switch suf {
	case "ogi":
		if stem == 0 || s.w[stem-1] != 'l' {
			return
		}
	case "li":
		if stem == 0 || !strings.ContainsRune("cdeghkmnrt", s.w[stem-1]) {
			return
		}
	}
	s.replace(suf, step2Rules[suf])
}

var step3Rules = map[string]string{
	"tional": "tion", "ational": "ate", "alize": "al", "icate": "ic", "iciti": "ic", "ical": "ic",
	"ful": "", "ness": "", "ative": "",
}

func (s *stemmer) step3() {
	suf := s.longest(step3Suffixes...)
	if suf == "" || len(s.w)-len(suf) < s.p1 {
		return
	}
	if suf == "ative" && len(s.w)-len(suf) < s.p2 {
		return
	}
	s.replace(suf, step3Rules[suf])
}

func (s *stemmer) step4() {
	suf := s.longest(step4Suffixes...)
	stem := len(s.w) - len(suf)
	if suf == "" || stem < s.p2 {
		return
	}
	if suf == "ion" && (stem == 0 || s.w[stem-1] != 's' && s.w[stem-1] != 't') {
		return
	}
	s.replace(suf, "")
}

func (s *stemmer) step5() {
	n := len(s.w)
	switch {
	case s.hasSuffix("e"):
		if n-1 >= s.p2 || n-1 >= s.p1 && !s.shortV(n-1) {
			s.w = s.w[:n-1]
		}
	case s.hasSuffix("l"):
		if n-1 >= s.p2 && n >= 2 && s.w[n-2] == 'l' {
			s.w = s.w[:n-1]
		}
	}
}
