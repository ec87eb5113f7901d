package pybind

/*
#include <stdlib.h>
extern char **environ;
static char *segmerge_env_at(int i) { return environ[i]; }
*/
import "C"

import "github.com/lance-segmerge/lance-segmerge/gokernel/storage"

// Go copies the process environment once, when the runtime starts (here:
// when Python loads the extension); variables Python sets later
// (os.environ["AZURE_STORAGE_ACCOUNT_KEY"] = ...) reach C's environ, not
// Go's copy. The stores read their environment fallbacks from C's, as
// pylance (Rust's std::env) does.
func init() { storage.Environ = hostEnviron }

func hostEnviron() []string {
	var out []string
	for i := 0; ; i++ {
		p := C.segmerge_env_at(C.int(i))
		if p == nil {
			return out
		}
		out = append(out, C.GoString(p))
	}
}
