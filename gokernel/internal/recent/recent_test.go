package recent

import (
	"fmt"
	"testing"
)

// TestCache: values come back by key, a key put again holds its new
// value, and past its size the oldest put is dropped.
func TestCache(t *testing.T) {
	c := New[int](3)
	for i := range 3 {
		c.Put(fmt.Sprint(i), i)
	}
	c.Put("0", 10) // "0" is now the newest
	c.Put("3", 3)  // drops "1"
	for key, want := range map[string]int{"0": 10, "2": 2, "3": 3, "1": -1} {
		v, ok := c.Get(key)
		if want < 0 && ok || want >= 0 && (!ok || v != want) {
			t.Errorf("Get(%q) = %d, %v; want %d", key, v, ok, want)
		}
	}
}
