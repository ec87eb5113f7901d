package lancefile

import (
	"encoding/binary"
	"fmt"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
)

// FooterLen is the size of the file footer. Part of the file format; never
// change.
const FooterLen = 40

const magic = "LANC"

// Version is a Lance file format version (2.0, 2.1, 2.2), not the raw footer
// numbers.
type Version struct{ Major, Minor uint16 }

var (
	V2_0 = Version{2, 0}
	V2_1 = Version{2, 1}
	V2_2 = Version{2, 2}
)

func (v Version) String() string { return fmt.Sprintf("%d.%d", v.Major, v.Minor) }

// footerNumbers are what a writer puts in the footer for v.
func (v Version) footerNumbers() (uint16, uint16) {
	if v == V2_0 {
		return 0, 3
	}
	return v.Major, v.Minor
}

// ParseVersion parses "2.0", "2.1" or "2.2".
func ParseVersion(s string) (Version, error) {
	switch s {
	case "2.0":
		return V2_0, nil
	case "2.1":
		return V2_1, nil
	case "2.2":
		return V2_2, nil
	}
	return Version{}, fmt.Errorf("%w: lancefile: unsupported file version %q (want 2.0, 2.1 or 2.2)", errkind.InvalidInput, s)
}

type footer struct {
	colMetaStart uint64
	cmoStart     uint64
	gboStart     uint64
	numGlobal    uint32
	numColumns   uint32
	version      Version
}

// parseFooter decodes and checks the last 40 bytes of a file of fileSize
// bytes: every offset must lie inside the file and the tables must sit where
// the reader expects them (the CMO table ends where the GBO table begins,
// which ends where the footer begins).
func parseFooter(b []byte, fileSize int64) (footer, error) {
	if len(b) != FooterLen {
		return footer{}, fmt.Errorf("%w: footer of %d bytes", errkind.Corrupt, len(b))
	}
	if string(b[36:40]) != magic {
		return footer{}, fmt.Errorf("%w: footer magic %q, want %q", errkind.Corrupt, b[36:40], magic)
	}
	f := footer{
		colMetaStart: binary.LittleEndian.Uint64(b[0:]),
		cmoStart:     binary.LittleEndian.Uint64(b[8:]),
		gboStart:     binary.LittleEndian.Uint64(b[16:]),
		numGlobal:    binary.LittleEndian.Uint32(b[24:]),
		numColumns:   binary.LittleEndian.Uint32(b[28:]),
	}
	major, minor := binary.LittleEndian.Uint16(b[32:]), binary.LittleEndian.Uint16(b[34:])
	switch {
	case major == 0 && minor == 3, major == 2 && minor == 0:
		f.version = V2_0
	case major == 2 && (minor == 1 || minor == 2):
		f.version = Version{2, minor}
	case major == 0 && minor <= 2:
		return footer{}, fmt.Errorf("%w: legacy Lance v1 file (footer %d.%d)", errkind.Unsupported, major, minor)
	default:
		return footer{}, fmt.Errorf("%w: file format version %d.%d", errkind.Unsupported, major, minor)
	}
	body := uint64(fileSize) - FooterLen
	if fileSize < FooterLen {
		return footer{}, fmt.Errorf("%w: file of %d bytes is shorter than its footer", errkind.Corrupt, fileSize)
	}
	if f.numGlobal == 0 {
		return footer{}, fmt.Errorf("%w: no global buffers (the schema is global buffer 0)", errkind.Corrupt)
	}
	// Each table entry is 16 bytes; bound the counts by the file size before
	// multiplying, so the arithmetic cannot overflow.
	if uint64(f.numGlobal) > body/16 || uint64(f.numColumns) > body/16 {
		return footer{}, fmt.Errorf("%w: %d global buffers / %d columns do not fit in %d bytes", errkind.Corrupt, f.numGlobal, f.numColumns, fileSize)
	}
	if f.gboStart+16*uint64(f.numGlobal) != body {
		return footer{}, fmt.Errorf("%w: global buffer table [%d,+%d) does not end at the footer (%d)", errkind.Corrupt, f.gboStart, 16*f.numGlobal, body)
	}
	if f.cmoStart+16*uint64(f.numColumns) != f.gboStart {
		return footer{}, fmt.Errorf("%w: column metadata table [%d,+%d) does not end at the global buffer table (%d)", errkind.Corrupt, f.cmoStart, 16*f.numColumns, f.gboStart)
	}
	if f.colMetaStart > f.cmoStart {
		return footer{}, fmt.Errorf("%w: column metadata starts at %d, after its offset table (%d)", errkind.Corrupt, f.colMetaStart, f.cmoStart)
	}
	return f, nil
}

func (f footer) bytes() []byte {
	b := make([]byte, FooterLen)
	binary.LittleEndian.PutUint64(b[0:], f.colMetaStart)
	binary.LittleEndian.PutUint64(b[8:], f.cmoStart)
	binary.LittleEndian.PutUint64(b[16:], f.gboStart)
	binary.LittleEndian.PutUint32(b[24:], f.numGlobal)
	binary.LittleEndian.PutUint32(b[28:], f.numColumns)
	major, minor := f.version.footerNumbers()
	binary.LittleEndian.PutUint16(b[32:], major)
	binary.LittleEndian.PutUint16(b[34:], minor)
	copy(b[36:], magic)
	return b
}
