// Command rankprog is a rank program the launcher's tests build from
// source to check that gorun builds Go package paths.
package main

import (
	"fmt"
	"os"
	"strings"
)

func main() {
	fmt.Printf("rankprog rank %s of %s: %s\n", os.Getenv("GORUN_RANK"), os.Getenv("GORUN_SIZE"), strings.Join(os.Args[1:], " "))
}
