package lua

import _ "embed"

// Reset forgets the state of limits' keys, whatever their algorithm.
//
//go:embed reset.lua
var Reset string
