package bufpool

import "testing"

func TestPool(t *testing.T) {
	tests := []struct {
		name     string
		get      int
		wantCap  int
		reused   bool // after a Put of the same class
		putOther []byte
	}{
		{"small requests get the smallest class", 100, 1 << 12, true, nil},
		{"a small delta's column keeps its size", 9000, 1 << 14, true, nil},
		{"rounded up to a power of two", 100_000, 1 << 17, true, nil},
		{"exact power of two", 1 << 20, 1 << 20, true, nil},
		{"foreign buffers are not pooled", 1 << 18, 1 << 18, false, make([]byte, 0, 300_000)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := New(64 << 20)
			b := p.Get(tt.get)
			if cap(b) != tt.wantCap || len(b) != 0 {
				t.Fatalf("Get(%d): len %d cap %d, want cap %d", tt.get, len(b), cap(b), tt.wantCap)
			}
			if tt.putOther != nil {
				p.Put(tt.putOther)
				if p.Held() != 0 {
					t.Fatalf("pooled a foreign buffer")
				}
				return
			}
			b = append(b, 1, 2, 3)
			p.Put(b)
			if p.Held() != tt.wantCap {
				t.Fatalf("held %d", p.Held())
			}
			c := p.Get(tt.get)
			if got := &c[:1][0] == &b[:1][0]; got != tt.reused || len(c) != 0 {
				t.Fatalf("reused %v (len %d), want %v", got, len(c), tt.reused)
			}
			if p.Held() != 0 {
				t.Fatalf("held %d after Get", p.Held())
			}
		})
	}
}

func TestPoolLimit(t *testing.T) {
	p := New(3 << 20)
	a, b := p.Get(1<<21), p.Get(1<<21)
	p.Put(a)
	p.Put(b) // over the limit: dropped
	if p.Held() != 1<<21 {
		t.Fatalf("held %d, want %d", p.Held(), 1<<21)
	}
}
