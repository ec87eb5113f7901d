package ivf

import (
	"encoding/binary"
	"fmt"
	"math"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/pb"
	"github.com/lance-segmerge/lance-segmerge/gokernel/vecmath"
)

// Tensor is a 2-D array stored in a global buffer (centroids, a PQ codebook,
// an RQ rotation matrix).
type Tensor struct {
	DType pb.Tensor_DataType
	Shape []uint32
	// Data is the raw little-endian values, row-major.
	Data []byte
}

var dtypeBytes = map[pb.Tensor_DataType]int{
	pb.Tensor_BFLOAT16: 2, pb.Tensor_FLOAT16: 2, pb.Tensor_FLOAT32: 4, pb.Tensor_FLOAT64: 8,
	pb.Tensor_UINT8: 1, pb.Tensor_UINT16: 2, pb.Tensor_UINT32: 4, pb.Tensor_UINT64: 8,
}

func tensorFromProto(t *pb.Tensor) (*Tensor, error) {
	if t == nil {
		return nil, nil
	}
	w, ok := dtypeBytes[t.GetDataType()]
	if !ok {
		return nil, fmt.Errorf("%w: tensor data type %d", errkind.Corrupt, t.GetDataType())
	}
	n := uint64(1)
	for _, d := range t.GetShape() {
		n *= uint64(d)
		if n > math.MaxInt32*8 {
			return nil, fmt.Errorf("%w: tensor shape %v", errkind.Corrupt, t.GetShape())
		}
	}
	if uint64(len(t.GetData())) != n*uint64(w) {
		return nil, fmt.Errorf("%w: tensor of shape %v and type %s holds %d bytes, want %d", errkind.Corrupt, t.GetShape(), t.GetDataType(), len(t.GetData()), n*uint64(w))
	}
	return &Tensor{DType: t.GetDataType(), Shape: t.GetShape(), Data: t.GetData()}, nil
}

func (t *Tensor) proto() *pb.Tensor {
	if t == nil {
		return nil
	}
	return &pb.Tensor{DataType: t.DType, Shape: t.Shape, Data: t.Data}
}

// Rows and Cols of a 2-D tensor.
func (t *Tensor) Rows() int {
	if len(t.Shape) == 0 {
		return 0
	}
	return int(t.Shape[0])
}

func (t *Tensor) Cols() int {
	if len(t.Shape) < 2 {
		return 1
	}
	return int(t.Shape[1])
}

// Float64s returns the values widened to float64 (for tolerance checks).
func (t *Tensor) Float64s() ([]float64, bool) {
	w := dtypeBytes[t.DType]
	out := make([]float64, len(t.Data)/w)
	for i := range out {
		b := t.Data[i*w:]
		switch t.DType {
		case pb.Tensor_FLOAT32:
			out[i] = float64(math.Float32frombits(binary.LittleEndian.Uint32(b)))
		case pb.Tensor_FLOAT64:
			out[i] = math.Float64frombits(binary.LittleEndian.Uint64(b))
		case pb.Tensor_FLOAT16:
			out[i] = float64(vecmath.HalfToFloat32(binary.LittleEndian.Uint16(b)))
		case pb.Tensor_BFLOAT16:
			out[i] = float64(math.Float32frombits(uint32(binary.LittleEndian.Uint16(b)) << 16))
		case pb.Tensor_UINT8:
			out[i] = float64(b[0])
		default:
			return nil, false
		}
	}
	return out, true
}

// Model is an IVF message: centroids and, for the file it was read from,
// the row range of every partition.
type Model struct {
	// Centroids is [partitions, dim], or nil (builder-written auxiliary
	// files carry none).
	Centroids *Tensor
	// Lengths is the row count of each partition in the file.
	Lengths []uint32
	// Offsets is the first row of each partition (prefix sums of Lengths).
	Offsets []uint64
	Loss    *float64
}

// DecodeModel decodes an IVF message from a global buffer.
func DecodeModel(b []byte) (*Model, error) {
	m := &pb.Ivf{}
	if err := proto.Unmarshal(b, m); err != nil {
		return nil, fmt.Errorf("%w: ivf: decode IVF message: %w", errkind.Corrupt, err)
	}
	return modelFromProto(m)
}

// decodeModelInPlace is DecodeModel leaving the centroids' bytes in b
// instead of copying them (b must not be reused). A 2048-partition model
// holds 1 MB of centroids, a segment two models, and a plan over a
// thousand deltas reads them all: the copy was two fifths of a cold plan.
// Protobuf decodes the rest (b without the centroid data).
func decodeModelInPlace(b []byte) (*Model, error) {
	rest, tensor, ok := splitField(b, ivfCentroidsTensorField)
	if !ok {
		return DecodeModel(b) // malformed or unusual (the field twice): the plain path says what
	}
	m := &pb.Ivf{}
	if err := proto.Unmarshal(rest, m); err != nil {
		return nil, fmt.Errorf("%w: ivf: decode IVF message: %w", errkind.Corrupt, err)
	}
	if tensor != nil {
		trest, data, ok := splitField(tensor, tensorDataField)
		if !ok {
			return DecodeModel(b)
		}
		t := &pb.Tensor{}
		if err := proto.Unmarshal(trest, t); err != nil {
			return nil, fmt.Errorf("%w: ivf: decode IVF message: %w", errkind.Corrupt, err)
		}
		t.Data = data
		m.CentroidsTensor = t
	}
	return modelFromProto(m)
}

// Field numbers of the messages decodeModelInPlace takes apart (index.proto).
const (
	ivfCentroidsTensorField protowire.Number = 4
	tensorDataField         protowire.Number = 3
)

// splitField separates the length-delimited field num from the other
// fields of message b: rest holds the others (a fresh buffer, without
// num), value aliases b (nil when the field is absent). ok is false when b
// does not parse or holds num more than once or with another wire type.
func splitField(b []byte, num protowire.Number) (rest, value []byte, ok bool) {
	rest = make([]byte, 0, 64)
	for len(b) > 0 {
		n, typ, tl := protowire.ConsumeTag(b)
		if tl < 0 {
			return nil, nil, false
		}
		vl := protowire.ConsumeFieldValue(n, typ, b[tl:])
		if vl < 0 {
			return nil, nil, false
		}
		if n == num {
			if value != nil || typ != protowire.BytesType {
				return nil, nil, false
			}
			v, _ := protowire.ConsumeBytes(b[tl:])
			value = v[:len(v):len(v)]
		} else {
			rest = append(rest, b[:tl+vl]...)
		}
		b = b[tl+vl:]
	}
	return rest, value, true
}

func modelFromProto(m *pb.Ivf) (*Model, error) {
	c, err := tensorFromProto(m.GetCentroidsTensor())
	if err != nil {
		return nil, fmt.Errorf("ivf: centroids: %w", err)
	}
	if c != nil && len(c.Shape) != 2 {
		return nil, fmt.Errorf("%w: ivf: centroids tensor has shape %v, want 2-D", errkind.Corrupt, c.Shape)
	}
	out := &Model{Centroids: c, Lengths: m.GetLengths()}
	if m.Loss != nil {
		l := m.GetLoss()
		out.Loss = &l
	}
	if offs := m.GetOffsets(); len(offs) > 0 {
		if len(offs) != len(out.Lengths) {
			return nil, fmt.Errorf("%w: ivf: %d offsets for %d lengths", errkind.Corrupt, len(offs), len(out.Lengths))
		}
	}
	// Stored offsets are ignored, as Lance's merger does: they must be the
	// prefix sums anyway, and recomputing them cannot disagree with lengths.
	out.Offsets = make([]uint64, len(out.Lengths))
	var sum uint64
	for i, n := range out.Lengths {
		out.Offsets[i] = sum
		sum += uint64(n)
	}
	if c != nil && len(out.Lengths) > 0 && c.Rows() != len(out.Lengths) {
		return nil, fmt.Errorf("%w: ivf: %d centroids for %d partitions", errkind.Corrupt, c.Rows(), len(out.Lengths))
	}
	return out, nil
}

// NumPartitions is the number of IVF partitions.
func (m *Model) NumPartitions() int {
	if m.Centroids != nil {
		return m.Centroids.Rows()
	}
	return len(m.Lengths)
}

// TotalRows is the sum of the partition lengths.
func (m *Model) TotalRows() uint64 {
	var n uint64
	for _, l := range m.Lengths {
		n += uint64(l)
	}
	return n
}

// Encode serialises the model as Lance writes it: offsets as prefix sums,
// no deprecated flat centroids.
func (m *Model) Encode() ([]byte, error) {
	offs := make([]uint64, len(m.Lengths))
	var sum uint64
	for i, n := range m.Lengths {
		offs[i] = sum
		sum += uint64(n)
	}
	return proto.MarshalOptions{Deterministic: true}.Marshal(&pb.Ivf{
		Offsets:         offs,
		Lengths:         m.Lengths,
		CentroidsTensor: m.Centroids.proto(),
		Loss:            m.Loss,
	})
}

// DecodeTensor decodes a Tensor message from a global buffer.
func DecodeTensor(b []byte) (*Tensor, error) {
	t := &pb.Tensor{}
	if err := proto.Unmarshal(b, t); err != nil {
		return nil, fmt.Errorf("%w: ivf: decode tensor: %w", errkind.Corrupt, err)
	}
	return tensorFromProto(t)
}

// EncodeTensor serialises a Tensor message.
func EncodeTensor(t *Tensor) ([]byte, error) {
	return proto.MarshalOptions{Deterministic: true}.Marshal(t.proto())
}

// Float32Tensor packs rows×cols float32 values (row-major) as a FLOAT32
// tensor.
func Float32Tensor(rows, cols int, v []float32) *Tensor {
	data := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(x))
	}
	return &Tensor{DType: pb.Tensor_FLOAT32, Shape: []uint32{uint32(rows), uint32(cols)}, Data: data}
}

// Float16Tensor is a rows×cols FLOAT16 tensor of v rounded to float16
// (the type of the centroids and codebooks of float16 columns' indices).
func Float16Tensor(rows, cols int, v []float32) *Tensor {
	data := make([]byte, 2*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint16(data[2*i:], vecmath.Float32ToHalf(x))
	}
	return &Tensor{DType: pb.Tensor_FLOAT16, Shape: []uint32{uint32(rows), uint32(cols)}, Data: data}
}

// Float32s returns the values of a FLOAT32, FLOAT16 or FLOAT64 tensor as
// float32.
func (t *Tensor) Float32s() ([]float32, bool) {
	if t.DType == pb.Tensor_FLOAT32 {
		out := make([]float32, len(t.Data)/4)
		for i := range out {
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(t.Data[4*i:]))
		}
		return out, true
	}
	f, ok := t.Float64s()
	if !ok || t.DType == pb.Tensor_UINT8 {
		return nil, false
	}
	out := make([]float32, len(f))
	for i, x := range f {
		out[i] = float32(x)
	}
	return out, true
}
