// Package benchproc forwards to internal/testing/procstat, child and
// loopback for the benchmarks that still import it; it goes once they
// import those.
package benchproc

import (
	"github.com/fastlimit/fastlimit/internal/testing/child"
	"github.com/fastlimit/fastlimit/internal/testing/loopback"
	"github.com/fastlimit/fastlimit/internal/testing/procstat"
)

type (
	Ports       = loopback.Ports
	RedisStats  = procstat.RedisStats
	CommandTime = procstat.CommandTime
)

var (
	ChildEnv      = child.Env
	LoadAverages  = procstat.LoadAverages
	ProcCPU       = procstat.ProcCPU
	MachineCPU    = procstat.MachineCPU
	ParseInfo     = procstat.ParseInfo
	TimedCommands = procstat.TimedCommands
)
