package supervise

import (
	"fmt"
	"os"
	"strconv"
	"syscall"
)

// Renice sets the calling process's nice value to n on every one of its
// threads. Linux keeps a nice value per thread and a new thread takes its
// creator's, so once every thread has n, so do the threads the Go runtime
// starts later; the loop goes again until a pass finds no thread it had
// not set, in case one started during the pass.
func Renice(n int) error {
	done := map[int]bool{}
	for range 10 {
		tasks, err := os.ReadDir("/proc/self/task")
		if err != nil {
			return fmt.Errorf("renice: %w", err)
		}
		fresh := 0
		for _, t := range tasks {
			tid, err := strconv.Atoi(t.Name())
			if err != nil || done[tid] {
				continue
			}
			if err := syscall.Setpriority(syscall.PRIO_PROCESS, tid, n); err != nil {
				return fmt.Errorf("renice thread %d to %d: %w", tid, n, err)
			}
			done[tid] = true
			fresh++
		}
		if fresh == 0 {
			return nil
		}
	}
	return nil
}
