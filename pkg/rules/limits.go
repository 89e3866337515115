package rules

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
)

// Default size limits of a rules directory (Options.MaxFileBytes and
// MaxTotalBytes), far above real rule sets (docs/operations.md).
const (
	DefaultMaxFileBytes  = 8 << 20
	DefaultMaxTotalBytes = 32 << 20
)

// ErrTooLarge, wrapped in an *Error naming the file, marks a file over
// Options.MaxFileBytes, or one that takes the files over MaxTotalBytes.
var ErrTooLarge = errors.New("rules too large")

// limits returns o's size limits, defaults filled in; <= 0 means none.
func (o Options) limits() (file, total int64) {
	file, total = o.MaxFileBytes, o.MaxTotalBytes
	if file == 0 {
		file = DefaultMaxFileBytes
	}
	if total == 0 {
		total = DefaultMaxTotalBytes
	}
	return file, total
}

// fileReader reads the rules files of one load within its size limits,
// checking sizes before reading and stopping one byte past the limit.
type fileReader struct {
	maxFile, maxTotal int64 // <= 0: no limit
	total             int64 // bytes read so far
}

func newFileReader(o Options) *fileReader {
	r := &fileReader{}
	r.maxFile, r.maxTotal = o.limits()
	return r
}

// read returns the file's content, an *Error wrapping ErrTooLarge, or a
// file system error.
func (r *fileReader) read(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if err := r.check(path, fi.Size()); err != nil {
		return nil, err
	}
	limit := r.room()
	b := make([]byte, 0, min(fi.Size(), limit)+1) // +1: room to see the end
	b, err = readAllLimit(f, b, limit)
	if err != nil {
		return nil, err
	}
	if err := r.check(path, int64(len(b))); err != nil {
		return nil, err
	}
	r.total += int64(len(b))
	return b, nil
}

// room is the most bytes the next file may hold.
func (r *fileReader) room() int64 {
	room := int64(math.MaxInt64)
	if r.maxFile > 0 {
		room = r.maxFile
	}
	if r.maxTotal > 0 {
		room = min(room, r.maxTotal-r.total)
	}
	return room
}

// check refuses a file of size bytes at path that is over a limit.
func (r *fileReader) check(path string, size int64) error {
	switch {
	case r.maxFile > 0 && size > r.maxFile:
		return &Error{File: path, Err: ErrTooLarge, Msg: fmt.Sprintf(
			"%d bytes, over the limit of %d bytes per rules file", size, r.maxFile)}
	case r.maxTotal > 0 && r.total+size > r.maxTotal:
		return &Error{File: path, Err: ErrTooLarge, Msg: fmt.Sprintf(
			"%d bytes after %d bytes of other rules files, over the limit of %d bytes in all", size, r.total, r.maxTotal)}
	}
	return nil
}

// readAllLimit appends what rd holds to b, up to limit+1 bytes.
func readAllLimit(rd io.Reader, b []byte, limit int64) ([]byte, error) {
	lr := rd
	if limit < math.MaxInt64 {
		lr = io.LimitReader(rd, limit+1)
	}
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := lr.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return b, err
		}
	}
}
