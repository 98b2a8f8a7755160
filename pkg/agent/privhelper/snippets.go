package privhelper

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"regexp"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/flexplane/flexplane/pkg/support/atomicfile"
	helperv1 "github.com/flexplane/flexplane/proto/flexplane/helper/v1"
)

// SnippetMode is a snippet file's mode: a VM's user-data may hold secrets.
const SnippetMode = 0o600

// MaxSnippetBytes bounds a snippet's size.
const MaxSnippetBytes = 256 << 10

// snippetNameRE is what a snippet's file name may be.
var snippetNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// CheckSnippetName returns an error saying what a snippet's name may be
// when name is not such a name: a plain file name, never a path.
func CheckSnippetName(name string) error {
	if !snippetNameRE.MatchString(name) || strings.Contains(name, "..") {
		return fmt.Errorf("snippet name %q: want 1 to 128 of A-Z, a-z, 0-9, '.', '_', '-', starting with a letter or digit, without \"..\"", name)
	}
	return nil
}

// snippetDir opens dir, which must be one of the configured snippet
// directories, as a root that no name can leave (os.Root: no "..", no
// symbolic link out of it).
func (s *service) snippetDir(dir, name string) (*os.Root, error) {
	if err := CheckSnippetName(name); err != nil {
		return nil, status.Error(codes.InvalidArgument, "privhelper: "+err.Error())
	}
	if !configured(s.h.cfg.SnippetDirs, dir) {
		s.h.log.Warn("privhelper: refused a snippet outside the snippet directories", "dir", dir, "name", name)
		return nil, status.Errorf(codes.PermissionDenied, "privhelper: %q is not a snippet directory of this node", dir)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, status.Errorf(codes.Internal, "privhelper: snippet directory: %v", err)
	}
	r, err := os.OpenRoot(dir)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "privhelper: snippet directory: %v", err)
	}
	return r, nil
}

// WriteSnippet implements helperv1.HelperServiceServer.
func (s *service) WriteSnippet(_ context.Context, req *helperv1.WriteSnippetRequest) (*helperv1.WriteSnippetResponse, error) {
	if len(req.GetData()) > MaxSnippetBytes {
		return nil, status.Errorf(codes.InvalidArgument, "privhelper: snippet is %d bytes, more than %d", len(req.GetData()), MaxSnippetBytes)
	}
	r, err := s.snippetDir(req.GetDir(), req.GetName())
	if err != nil {
		return nil, err
	}
	defer r.Close()
	if err := atomicfile.WriteFileIn(r, req.GetName(), req.GetData(), SnippetMode); err != nil {
		return nil, status.Errorf(codes.Internal, "privhelper: write snippet: %v", err)
	}
	s.h.log.Info("privhelper: snippet written", "dir", req.GetDir(), "name", req.GetName(), "bytes", len(req.GetData()))
	return &helperv1.WriteSnippetResponse{}, nil
}

// DeleteSnippet implements helperv1.HelperServiceServer.
func (s *service) DeleteSnippet(_ context.Context, req *helperv1.DeleteSnippetRequest) (*helperv1.DeleteSnippetResponse, error) {
	r, err := s.snippetDir(req.GetDir(), req.GetName())
	if err != nil {
		return nil, err
	}
	defer r.Close()
	err = r.Remove(req.GetName())
	if errors.Is(err, fs.ErrNotExist) {
		return &helperv1.DeleteSnippetResponse{}, nil
	}
	if err != nil {
		return nil, status.Errorf(codes.Internal, "privhelper: delete snippet: %v", err)
	}
	s.h.log.Info("privhelper: snippet deleted", "dir", req.GetDir(), "name", req.GetName())
	return &helperv1.DeleteSnippetResponse{Deleted: true}, nil
}
