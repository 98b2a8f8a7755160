package privhelper

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	helperv1 "github.com/flexplane/flexplane/proto/flexplane/helper/v1"
)

// maxChunk bounds the data of one read or write of VolumeIO.
const maxChunk = 1 << 20

// checkVolume checks that the helper may open path as volume of guest
// vmid: the guest's config on this node carries mark and names volume as
// a disk, and path is a file of that guest (vm-<vmid>-... or
// base-<vmid>-...) in one of the volume directories. The helper trusts
// its own reading of the node's files, never the agent's word.
func (s *service) checkVolume(o *helperv1.OpenVolume, mark string) error {
	vmid, volume, path := o.GetVmid(), o.GetVolume(), o.GetPath()
	storage, name, ok := strings.Cut(volume, ":")
	if vmid == 0 || !ok || storage == "" || name == "" || strings.Contains(volume, "..") {
		return status.Errorf(codes.InvalidArgument, "privhelper: %q of guest %d is not a volume id", volume, vmid)
	}
	if !filepath.IsAbs(path) || filepath.Clean(path) != path {
		return status.Errorf(codes.InvalidArgument, "privhelper: volume path %q is not a clean absolute path", path)
	}
	cfg, err := guestConfig(s.h.cfg.GuestConfigDir, vmid)
	if errors.Is(err, fs.ErrNotExist) {
		return s.refuse(o, mark, "no guest of this node")
	}
	if err != nil {
		return status.Errorf(codes.Internal, "privhelper: guest %d: %v", vmid, err)
	}
	switch {
	case HasTag(cfg["tags"], mark):
	case mark == LeavingTag && HasTag(cfg["tags"], OutgoingTag) && cfg["template"] == "1":
		// A template copied into another zone: read, as a leaving guest's.
	default:
		return s.refuse(o, mark, "the guest is not marked "+mark)
	}
	disk := false
	for k, v := range cfg {
		if vol, ok := DiskVolume(k, v); ok && vol == volume {
			disk = true
		}
	}
	if !disk {
		return s.refuse(o, mark, "no disk of the guest")
	}
	id := strconv.FormatUint(uint64(vmid), 10)
	base := filepath.Base(path)
	if !strings.HasPrefix(base, "vm-"+id+"-") && !strings.HasPrefix(base, "base-"+id+"-") {
		return s.refuse(o, mark, "the path is no file of the guest")
	}
	for _, d := range s.h.cfg.VolumeDirs {
		if strings.HasPrefix(path, d+"/") {
			return nil
		}
	}
	return s.refuse(o, mark, "the path is in none of the volume directories")
}

func (s *service) refuse(o *helperv1.OpenVolume, mark, why string) error {
	s.h.log.Warn("privhelper: refused a volume", "vmid", o.GetVmid(), "volume", o.GetVolume(), "path", o.GetPath(), "mark", mark, "why", why)
	return status.Errorf(codes.PermissionDenied, "privhelper: volume %s of guest %d: %s", o.GetVolume(), o.GetVmid(), why)
}

// VolumeIO implements helperv1.HelperServiceServer.
func (s *service) VolumeIO(stream grpc.BidiStreamingServer[helperv1.VolumeIORequest, helperv1.VolumeIOResponse]) error {
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	o := first.GetOpen()
	if o == nil {
		return status.Error(codes.InvalidArgument, "privhelper: the first request must open a volume")
	}
	mark, flag := LeavingTag, os.O_RDONLY
	if o.GetWrite() {
		mark, flag = ArrivingTag, os.O_RDWR
	}
	if err := s.checkVolume(o, mark); err != nil {
		return err
	}
	f, err := os.OpenFile(o.GetPath(), flag, 0)
	if err != nil {
		return status.Errorf(codes.Internal, "privhelper: open volume %s: %v", o.GetVolume(), err)
	}
	defer f.Close()
	size, err := f.Seek(0, io.SeekEnd) // a block device's size too
	if err != nil {
		return status.Errorf(codes.Internal, "privhelper: size of volume %s: %v", o.GetVolume(), err)
	}
	s.h.log.Info("privhelper: volume opened", "vmid", o.GetVmid(), "volume", o.GetVolume(), "write", o.GetWrite(), "size", size)
	if err := stream.Send(&helperv1.VolumeIOResponse{Size: size}); err != nil {
		return err
	}
	buf := make([]byte, maxChunk)
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		resp, err := volumeOp(f, o.GetWrite(), size, buf, req)
		if err != nil {
			return err
		}
		if err := stream.Send(resp); err != nil {
			return err
		}
	}
}

// volumeOp does one operation of VolumeIO on f (of size bytes).
func volumeOp(f *os.File, write bool, size int64, buf []byte, req *helperv1.VolumeIORequest) (*helperv1.VolumeIOResponse, error) {
	switch op := req.GetOp().(type) {
	case *helperv1.VolumeIORequest_Read:
		off, n := op.Read.GetOffset(), op.Read.GetLength()
		if off < 0 || n > maxChunk {
			return nil, status.Errorf(codes.InvalidArgument, "privhelper: read of %d bytes at %d: want at most %d at an offset from 0", n, off, maxChunk)
		}
		got, err := f.ReadAt(buf[:n], off)
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, status.Errorf(codes.Internal, "privhelper: read volume: %v", err)
		}
		return &helperv1.VolumeIOResponse{Data: buf[:got], Eof: errors.Is(err, io.EOF)}, nil
	case *helperv1.VolumeIORequest_Write:
		off, data := op.Write.GetOffset(), op.Write.GetData()
		if !write {
			return nil, status.Error(codes.PermissionDenied, "privhelper: the volume is open for reading only")
		}
		if off < 0 || len(data) > maxChunk || off+int64(len(data)) > size {
			return nil, status.Errorf(codes.InvalidArgument, "privhelper: write of %d bytes at %d: want at most %d within the volume's %d bytes", len(data), off, maxChunk, size)
		}
		n, err := f.WriteAt(data, off)
		if err != nil {
			return nil, status.Errorf(codes.Internal, "privhelper: write volume: %v", err)
		}
		return &helperv1.VolumeIOResponse{Written: uint32(n)}, nil
	case *helperv1.VolumeIORequest_Sync:
		if err := f.Sync(); err != nil {
			return nil, status.Errorf(codes.Internal, "privhelper: sync volume: %v", err)
		}
		return &helperv1.VolumeIOResponse{}, nil
	default:
		return nil, status.Error(codes.InvalidArgument, fmt.Sprintf("privhelper: %T is no volume operation after open", op))
	}
}
