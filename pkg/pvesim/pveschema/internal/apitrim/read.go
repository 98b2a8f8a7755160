package apitrim

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"os"
)

// ReadFull reads the full api-viewer schema at path, plain JSON or
// gzip-compressed (as the repository carries it, pveschema/upstream).
func ReadFull(path string) ([]byte, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read full schema: %w", err)
	}
	if !bytes.HasPrefix(raw, []byte{0x1f, 0x8b}) {
		return raw, nil
	}
	zr, err := gzip.NewReader(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("read full schema %s: %w", path, err)
	}
	full, err := io.ReadAll(zr)
	if err != nil {
		return nil, fmt.Errorf("read full schema %s: %w", path, err)
	}
	return full, nil
}
