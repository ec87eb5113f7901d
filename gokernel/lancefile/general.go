package lancefile

import (
	"encoding/binary"
	"fmt"

	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/pb/enc21"
)

// maxDecompressedBytes bounds what one compressed buffer may claim to
// expand to (a mini-block chunk or a dictionary; real ones are KiB).
const maxDecompressedBytes = 256 << 20

// zstdDecoder is shared: DecodeAll is safe for concurrent use. Its memory
// is bounded by maxDecompressedBytes.
var zstdDecoder, _ = zstd.NewReader(nil, zstd.WithDecoderMaxMemory(maxDecompressedBytes), zstd.WithDecoderConcurrency(2))

// zstdMagic starts a bare zstd frame.
const zstdMagic = 0xFD2FB528

// decompress undoes Lance's general (buffer) compression:
//
//	LZ4:  [u32 LE uncompressed size][LZ4 block]
//	ZSTD: [u64 LE uncompressed size][zstd frame], or a bare zstd frame
func decompress(scheme enc21.CompressionScheme, b []byte) ([]byte, error) {
	switch scheme {
	case enc21.CompressionScheme_COMPRESSION_ALGORITHM_LZ4:
		if len(b) < 4 {
			return nil, fmt.Errorf("%w: lz4 buffer of %d bytes", errkind.Corrupt, len(b))
		}
		n := binary.LittleEndian.Uint32(b)
		if n > maxDecompressedBytes {
			return nil, fmt.Errorf("%w: lz4 buffer claims %d bytes", errkind.Corrupt, n)
		}
		out := make([]byte, n)
		got, err := lz4.UncompressBlock(b[4:], out)
		if err != nil || got != int(n) {
			return nil, fmt.Errorf("%w: lz4 block: %d of %d bytes: %v", errkind.Corrupt, got, n, err)
		}
		return out, nil
	case enc21.CompressionScheme_COMPRESSION_ALGORITHM_ZSTD:
		frame := b
		if len(b) >= 4 && binary.LittleEndian.Uint32(b) != zstdMagic {
			if len(b) < 8 {
				return nil, fmt.Errorf("%w: zstd buffer of %d bytes", errkind.Corrupt, len(b))
			}
			if n := binary.LittleEndian.Uint64(b); n > maxDecompressedBytes {
				return nil, fmt.Errorf("%w: zstd buffer claims %d bytes", errkind.Corrupt, n)
			}
			frame = b[8:]
		}
		out, err := zstdDecoder.DecodeAll(frame, nil)
		if err != nil {
			return nil, fmt.Errorf("%w: zstd frame: %w", errkind.Corrupt, err)
		}
		return out, nil
	}
	return nil, fmt.Errorf("%w: compression scheme %v", errkind.Unsupported, scheme)
}
