package devstack

import (
	"bufio"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"
)

// standIn is a generated stand-in for an OS image: a small file with a
// qcow2 header and deterministic content, served by the local image server
// so that staging downloads it and verifies a real checksum.
type standIn struct {
	Name, Description, Version, File string
}

// standIns are the images of the demo catalog.
func standIns() []standIn {
	return []standIn{
		{Name: "debian-12", Description: "Debian 12 (bookworm), generic cloud image (dev stand-in)", Version: "12.8", File: "debian-12-genericcloud-amd64.qcow2"},
		{Name: "ubuntu-24.04", Description: "Ubuntu 24.04 LTS (noble), server cloud image (dev stand-in)", Version: "24.04", File: "ubuntu-24.04-server-cloudimg-amd64.qcow2"},
	}
}

// standInSize is the size of a stand-in image file.
const standInSize = 2 << 20

// writeStandIn creates path (unless it exists) and returns its SHA-256.
func writeStandIn(path string) (string, error) {
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		tmp := path + ".tmp"
		f, err := os.Create(tmp)
		if err != nil {
			return "", fmt.Errorf("image %s: %w", path, err)
		}
		w := bufio.NewWriter(f)
		// qcow2 v3 header: magic, version, no backing file, 64 KiB
		// clusters, 10 GiB virtual size.
		var hdr [104]byte
		copy(hdr[0:4], "QFI\xfb")
		binary.BigEndian.PutUint32(hdr[4:8], 3)
		binary.BigEndian.PutUint32(hdr[20:24], 16)
		binary.BigEndian.PutUint64(hdr[24:32], 10<<30)
		binary.BigEndian.PutUint32(hdr[96:100], 4)
		binary.BigEndian.PutUint32(hdr[100:104], 104)
		w.Write(hdr[:])
		// Deterministic filler: SHA-256 in counter mode over the name.
		seed := sha256.Sum256([]byte(filepath.Base(path)))
		for n, i := len(hdr), uint64(0); n < standInSize; i++ {
			var ctr [8]byte
			binary.BigEndian.PutUint64(ctr[:], i)
			block := sha256.Sum256(append(seed[:], ctr[:]...))
			k := min(len(block), standInSize-n)
			w.Write(block[:k])
			n += k
		}
		if err := w.Flush(); err != nil {
			f.Close()
			return "", fmt.Errorf("image %s: %w", path, err)
		}
		if err := f.Close(); err != nil {
			return "", fmt.Errorf("image %s: %w", path, err)
		}
		if err := os.Rename(tmp, path); err != nil {
			return "", fmt.Errorf("image %s: %w", path, err)
		}
	} else if err != nil {
		return "", fmt.Errorf("image %s: %w", path, err)
	}
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("image %s: %w", path, err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("image %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// imageServer serves a directory of images over plain HTTP on loopback.
type imageServer struct {
	srv *http.Server
	url string
}

// startImageServer serves dir on ln.
func startImageServer(ln net.Listener, dir string) *imageServer {
	s := &imageServer{
		srv: &http.Server{Handler: http.FileServer(http.Dir(dir)), ReadHeaderTimeout: 10 * time.Second},
		url: "http://" + ln.Addr().String(),
	}
	go func() { _ = s.srv.Serve(ln) }()
	return s
}

func (s *imageServer) Close() error { return s.srv.Close() }
