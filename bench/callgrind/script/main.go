// Command script prints lua.Take, the script FastLimit sends, for
// bench/callgrind/run.sh.
package main

import (
	"fmt"

	"github.com/fastlimit/fastlimit/lua"
)

func main() { fmt.Print(lua.Take) }
