// Command etcd is etcd built from its Go module, so the test control plane does
// not depend on a distribution's (too old) etcd package.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
