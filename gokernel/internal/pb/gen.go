// Package pb holds our own protobuf definitions of the Lance wire messages
// lance-segmerge touches (proto/*.proto) and the Go code generated from them:
// table, transaction, file schema, column metadata and vector index messages
// here; the 2.0 and 2.1/2.2 page encodings in the sub-packages enc20 and
// enc21 (their message names overlap).
//
// Regenerate with `make proto` (needs protoc on PATH, e.g. Debian's
// protobuf-compiler; protoc-gen-go is a Go tool of this module). The
// generated files are committed.
package pb

//go:generate sh -c "protoc -I proto -I /usr/include --plugin=protoc-gen-go=$(go tool -n protoc-gen-go) --go_out=. --go_opt=module=github.com/lance-segmerge/lance-segmerge/gokernel/internal/pb proto/*.proto"
