package fts

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math/bits"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
)

// The token dictionary of a partition is a map from token to token id in
// the binary format of the Rust fst crate (0.4, format version 3):
//
//	u64 version (3) | u64 type (0) | nodes | u64 key count | u64 root address | u32 checksum
//
// A node's address is the offset of its last byte, its state byte; nodes
// are read backwards from there and point at lower addresses (children are
// written first). Address 0 is the final node without transitions and
// with output 0, never stored. The checksum is CRC-32C of every byte
// before it, masked as Snappy masks it. A key's value is the sum of the
// transition outputs on its path plus the final output of its last node.
//
// State byte, top two bits: 11 one transition to the node just before,
// output 0; 10 one transition with a stored target; 0F any number of
// transitions, F = final. One-transition nodes keep their input byte in
// the low 6 bits as a code into commonInputs (0: a byte before the state
// byte holds it).

const (
	fstVersion    = 3
	fstHeaderLen  = 16
	fstFooterLen  = 16 // key count, root address (the checksum follows)
	fstMinLen     = fstHeaderLen + fstFooterLen
	fstIndexAbove = 32 // nodes with more transitions carry a 256-byte index
)

// commonInputs lists the bytes a one-transition node can name in its
// state byte, code i+1 for byte commonInputs[i]. Part of the format.
const commonInputs = "te/oasripcnw.hlm-du012g=:bf3y5&_4v9678k%?xCDASFIBEjPTzRNM+LOqHG"

var commonCode = func() (c [256]byte) {
	for i := 0; i < len(commonInputs); i++ {
		c[commonInputs[i]] = byte(i + 1)
	}
	return c
}()

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func fstChecksum(b []byte) uint32 {
	c := crc32.Checksum(b, castagnoli)
	return (c>>15 | c<<17) + 0xa282ead8
}

// packSize is the number of bytes needed for v (1 for 0).
func packSize(v uint64) int { return max(1, (bits.Len64(v)+7)/8) }

func readPacked(b []byte, at, size int) (uint64, error) {
	if size < 1 || size > 8 || at < 0 || at+size > len(b) {
		return 0, fmt.Errorf("%w: fst: %d-byte integer at %d of %d bytes", errkind.Corrupt, size, at, len(b))
	}
	var v uint64
	for i := size - 1; i >= 0; i-- {
		v = v<<8 | uint64(b[at+i])
	}
	return v, nil
}

type fstTrans struct {
	in     byte
	out    uint64
	target int
}

type fstNode struct {
	final    bool
	finalOut uint64
	trans    []fstTrans
}

// decodeNode decodes the node at addr (its state byte) of an fst of
// len(b) bytes, nodes living in [fstHeaderLen, limit).
func decodeNode(b []byte, addr int, dst *fstNode) error {
	dst.final, dst.finalOut, dst.trans = false, 0, dst.trans[:0]
	if addr == 0 {
		dst.final = true
		return nil
	}
	bad := func(what string) error {
		return fmt.Errorf("%w: fst: node at %d: %s", errkind.Corrupt, addr, what)
	}
	if addr < fstHeaderLen || addr >= len(b)-fstFooterLen-4 {
		return bad("address out of range")
	}
	state := b[addr]
	switch state >> 6 {
	case 3, 2:
		code := state & 0x3f
		p := addr - 1
		in := byte(0)
		if code == 0 {
			in = b[p]
			p--
		} else if int(code) > len(commonInputs) {
			return bad("input code")
		} else {
			in = commonInputs[code-1]
		}
		if state>>6 == 3 { // target: the node just before
			end := p + 1
			if end-1 < fstHeaderLen {
				return bad("target out of range")
			}
			dst.trans = append(dst.trans, fstTrans{in: in, target: end - 1})
			return nil
		}
		if p < fstHeaderLen {
			return bad("truncated")
		}
		ps := b[p]
		tsize, osize := int(ps>>4), int(ps&0xf)
		end := p - tsize - osize
		if end < fstHeaderLen {
			return bad("truncated")
		}
		var out uint64
		var err error
		if osize > 0 {
			if out, err = readPacked(b, end, osize); err != nil {
				return err
			}
		}
		delta, err := readPacked(b, end+osize, tsize)
		if err != nil {
			return err
		}
		t, err := target(end, delta)
		if err != nil {
			return bad(err.Error())
		}
		dst.trans = append(dst.trans, fstTrans{in: in, out: out, target: t})
		return nil
	}
	dst.final = state&0x40 != 0
	n := int(state & 0x3f)
	p := addr - 1
	if n == 0 {
		if p < fstHeaderLen {
			return bad("truncated")
		}
		n = int(b[p])
		if n == 1 {
			n = 256
		}
		p--
	}
	if p < fstHeaderLen {
		return bad("truncated")
	}
	ps := b[p]
	tsize, osize := int(ps>>4), int(ps&0xf)
	if n > 0 && tsize == 0 {
		return bad("transitions without addresses")
	}
	in := p
	if n > fstIndexAbove {
		in -= 256
	}
	finalSlot := 0
	if dst.final {
		finalSlot = osize
	}
	end := in - n - n*tsize - n*osize - finalSlot
	if end < fstHeaderLen {
		return bad("truncated")
	}
	prev := -1
	for i := 0; i < n; i++ {
		c := int(b[in-1-i])
		if c <= prev {
			return bad("inputs not ascending")
		}
		prev = c
		delta, err := readPacked(b, in-n-(i+1)*tsize, tsize)
		if err != nil {
			return err
		}
		t, err := target(end, delta)
		if err != nil {
			return bad(err.Error())
		}
		var out uint64
		if osize > 0 {
			if out, err = readPacked(b, in-n-n*tsize-(i+1)*osize, osize); err != nil {
				return err
			}
		}
		dst.trans = append(dst.trans, fstTrans{in: byte(c), out: out, target: t})
	}
	if dst.final && osize > 0 {
		v, err := readPacked(b, end, osize)
		if err != nil {
			return err
		}
		dst.finalOut = v
	}
	return nil
}

// target resolves a stored delta against a node's first byte: children
// lie below it; 0 is the empty final node.
func target(end int, delta uint64) (int, error) {
	if delta == 0 {
		return 0, nil
	}
	if delta > uint64(end-fstHeaderLen) {
		return 0, fmt.Errorf("target %d bytes before %d", delta, end)
	}
	return end - int(delta), nil
}

// fstTokens decodes a token dictionary of n tokens (n checked by the
// caller against the rows of the partition's posting lists) of totalLen
// bytes in all, whose values are the dense ids 0..n-1, into tokens[id].
func fstTokens(b []byte, n int, totalLen uint64) ([]string, error) {
	if len(b) < fstMinLen+4 || n < 0 {
		return nil, fmt.Errorf("%w: fst of %d bytes for %d tokens", errkind.Corrupt, len(b), n)
	}
	if v := binary.LittleEndian.Uint64(b); v != fstVersion {
		return nil, fmt.Errorf("%w: fst format version %d (3 is read)", errkind.Unsupported, v)
	}
	foot := len(b) - 4
	if got, want := binary.LittleEndian.Uint32(b[foot:]), fstChecksum(b[:foot]); got != want {
		return nil, fmt.Errorf("%w: fst checksum %#x, want %#x", errkind.Corrupt, got, want)
	}
	count := binary.LittleEndian.Uint64(b[foot-16:])
	root := binary.LittleEndian.Uint64(b[foot-8:])
	if count != uint64(n) {
		return nil, fmt.Errorf("%w: fst holds %d keys, the token set %d", errkind.Corrupt, count, n)
	}
	if root >= uint64(foot-16) {
		return nil, fmt.Errorf("%w: fst root %d of %d bytes", errkind.Corrupt, root, len(b))
	}
	out := make([]string, n)
	seen := make([]bool, n)
	found := 0
	type frame struct {
		addr, depth int
		in          byte // the input leading here (depth > 0)
		acc         uint64
	}
	// Depth-first over the trie; every node reached counts, so a corrupt
	// file whose nodes share or loop cannot make the walk run long.
	stack := []frame{{addr: int(root)}}
	var key []byte
	var node fstNode
	steps, keyBytes := 0, uint64(0)
	for len(stack) > 0 {
		f := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		// Each node visited after the root ends a distinct key prefix.
		if steps++; uint64(steps) > min(totalLen, 1<<32)+uint64(n)+1 {
			return nil, fmt.Errorf("%w: fst walk visits more nodes than the file holds", errkind.Corrupt)
		}
		if f.depth > 0 {
			key = append(key[:f.depth-1], f.in)
		}
		if err := decodeNode(b, f.addr, &node); err != nil {
			return nil, err
		}
		if node.final {
			v := f.acc + node.finalOut
			if v >= uint64(n) || seen[v] {
				return nil, fmt.Errorf("%w: fst token id %d of %d tokens", errkind.Corrupt, v, n)
			}
			seen[v] = true
			out[v] = string(key)
			found++
			keyBytes += uint64(len(key))
		}
		if len(node.trans) > 0 && f.depth >= 1<<16 {
			return nil, fmt.Errorf("%w: fst key longer than 65536 bytes", errkind.Corrupt)
		}
		for i := len(node.trans) - 1; i >= 0; i-- {
			t := node.trans[i]
			stack = append(stack, frame{addr: t.target, depth: f.depth + 1, in: t.in, acc: f.acc + t.out})
		}
	}
	if found != n || keyBytes != totalLen {
		return nil, fmt.Errorf("%w: fst holds %d tokens of %d bytes, the token set says %d of %d", errkind.Corrupt, found, keyBytes, n, totalLen)
	}
	return out, nil
}

// fstBuilder writes an fst map from keys added in strictly ascending byte
// order. It keeps only the nodes on the path of the last key (no suffix
// sharing: the map is valid, not minimal), so memory is bounded by the
// longest key; each key's value is its last node's final output.
type fstBuilder struct {
	out   []byte
	stack []*fstNode // stack[i]: the node after i bytes of the last key
	last  []byte
	count uint64
	// scratch
	idx [256]byte
}

func newFSTBuilder() *fstBuilder {
	b := &fstBuilder{out: make([]byte, fstHeaderLen, 1<<12), stack: []*fstNode{{}}}
	binary.LittleEndian.PutUint64(b.out, fstVersion)
	return b
}

// add adds key with value v; keys must arrive strictly ascending.
func (b *fstBuilder) add(key []byte, v uint64) error {
	if b.count > 0 && string(key) <= string(b.last) {
		return fmt.Errorf("%w: fst keys out of order: %q after %q", errkind.InvalidInput, key, b.last)
	}
	p := 0
	for p < len(key) && p < len(b.last) && key[p] == b.last[p] {
		p++
	}
	b.compileAbove(p)
	for i := p; i < len(key); i++ {
		b.stack[i].trans = append(b.stack[i].trans, fstTrans{in: key[i], target: -1})
		b.stack = append(b.stack, &fstNode{})
	}
	n := b.stack[len(key)]
	n.final, n.finalOut = true, v
	b.last = append(b.last[:0], key...)
	b.count++
	return nil
}

// compileAbove writes every node of the stack deeper than depth, deepest
// first, and points its parent's last transition at it.
func (b *fstBuilder) compileAbove(depth int) {
	for len(b.stack)-1 > depth {
		top := b.stack[len(b.stack)-1]
		b.stack = b.stack[:len(b.stack)-1]
		parent := b.stack[len(b.stack)-1]
		parent.trans[len(parent.trans)-1].target = b.compile(top)
	}
}

// compile appends one node (always in the any-transitions form) and
// returns its address.
func (b *fstBuilder) compile(n *fstNode) int {
	if n.final && n.finalOut == 0 && len(n.trans) == 0 {
		return 0
	}
	end := len(b.out)
	tsize, osize := 0, 0
	anyOut := n.finalOut != 0
	for _, t := range n.trans {
		tsize = max(tsize, packSize(delta(end, t.target)))
		anyOut = anyOut || t.out != 0
	}
	if anyOut {
		osize = packSize(n.finalOut)
		for _, t := range n.trans {
			osize = max(osize, packSize(t.out))
		}
	}
	put := func(v uint64, size int) {
		for i := 0; i < size; i++ {
			b.out = append(b.out, byte(v>>(8*i)))
		}
	}
	if n.final && osize > 0 {
		put(n.finalOut, osize)
	}
	k := len(n.trans)
	if osize > 0 {
		for i := k - 1; i >= 0; i-- {
			put(n.trans[i].out, osize)
		}
	}
	for i := k - 1; i >= 0; i-- {
		put(delta(end, n.trans[i].target), tsize)
	}
	for i := k - 1; i >= 0; i-- {
		b.out = append(b.out, n.trans[i].in)
	}
	if k > fstIndexAbove {
		for i := range b.idx {
			b.idx[i] = 255
		}
		for i, t := range n.trans {
			b.idx[t.in] = byte(i)
		}
		b.out = append(b.out, b.idx[:]...)
	}
	b.out = append(b.out, byte(tsize<<4|osize))
	state := byte(0)
	if n.final {
		state = 0x40
	}
	switch {
	case k >= 1 && k <= 63:
		state |= byte(k)
	case k == 256:
		b.out = append(b.out, 1)
	default:
		b.out = append(b.out, byte(k))
	}
	b.out = append(b.out, state)
	return len(b.out) - 1
}

// delta is the stored distance from a node's first byte to a target.
func delta(end, target int) uint64 {
	if target == 0 {
		return 0
	}
	return uint64(end - target)
}

// finish compiles the root and returns the file's bytes.
func (b *fstBuilder) finish() []byte {
	b.compileAbove(0)
	root := b.compile(b.stack[0])
	b.out = binary.LittleEndian.AppendUint64(b.out, b.count)
	b.out = binary.LittleEndian.AppendUint64(b.out, uint64(root))
	return binary.LittleEndian.AppendUint32(b.out, fstChecksum(b.out))
}
