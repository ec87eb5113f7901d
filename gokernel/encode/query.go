package encode

// What searches need from a model besides encoding: the RQ rotation
// applied to a query (or a centroid) exactly as it is applied to the
// residuals that were encoded.

// Rotate writes the RQ rotation of v into out (len Dim each). It panics on
// a model that is not IVF_RQ.
func (e *Encoder) Rotate(out, v []float32) {
	if e.m.RQ == nil {
		panic("encode: Rotate on a model without RQ parameters")
	}
	e.rotate(out, v)
}
