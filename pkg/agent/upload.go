package agent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"regexp"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	agentv1 "github.com/flexplane/flexplane/proto/flexplane/agent/v1"
)

// Uploads. A tenant's image reaches a node's storage through the agent:
// the orchestrator streams the file's bytes (UploadVolume) and the agent
// forwards them as they come, as the multipart body of one POST to the
// local Proxmox's upload endpoint, with its own token. The agent holds at
// most one chunk of the file; it hashes what it forwards, and a stream of
// another length than announced (a client that went away, a cut
// connection) aborts the POST, so Proxmox stores nothing.

// MaxUploadBytes bounds a file UploadVolume takes.
const MaxUploadBytes = 64 << 30

// uploadExt is the file name each uploadable content type takes.
var uploadExt = map[string]*regexp.Regexp{
	"import": regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}\.(qcow2|raw|img)$`),
	"iso":    regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}\.iso$`),
}

// checkUpload validates the first message of an upload.
func checkUpload(first *agentv1.UploadVolumeRequest) error {
	if !segmentName(first.GetStorage()) {
		return status.Errorf(codes.InvalidArgument, "agent: %q is not a storage id", first.GetStorage())
	}
	re := uploadExt[first.GetContent()]
	if re == nil {
		return status.Errorf(codes.InvalidArgument, "agent: content %q is not import or iso", first.GetContent())
	}
	if name := first.GetFilename(); !re.MatchString(name) || strings.Contains(name, "..") {
		return status.Errorf(codes.InvalidArgument, "agent: %q is not a file name of %s content", name, first.GetContent())
	}
	if n := first.GetSize(); n < 0 || n > MaxUploadBytes {
		return status.Errorf(codes.InvalidArgument, "agent: size %d is not between 0 (unknown) and %d bytes", n, int64(MaxUploadBytes))
	}
	return nil
}

// errProxmoxStopped is Proxmox no longer reading an upload's body.
var errProxmoxStopped = errors.New("proxmox stopped reading the upload")

// errShortUpload is a stream of another length than it announced.
var errShortUpload = errors.New("upload of another length than announced")

// UploadVolume implements the agent's UploadVolume RPC.
func (s *service) UploadVolume(stream agentv1.AgentService_UploadVolumeServer) error {
	first, err := stream.Recv()
	if err != nil {
		return status.Errorf(codes.InvalidArgument, "agent: upload: no first message: %v", err)
	}
	if err := checkUpload(first); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	path := "/nodes/" + s.a.cfg.NodeName + "/storage/" + url.PathEscape(first.GetStorage()) + "/upload"
	type answer struct {
		resp pveResponse
		err  error
	}
	done := make(chan answer, 1)
	go func() {
		resp, err := s.a.pve.send(ctx, http.MethodPost, path, "", pr, mw.FormDataContentType())
		pr.CloseWithError(err) // unblocks the writer when Proxmox stops reading
		done <- answer{resp, err}
	}()
	h := sha256.New()
	n, err := s.forward(stream, first, mw, h)
	if errors.Is(err, errProxmoxStopped) {
		// Proxmox answered before it read the whole file: say why.
		a := <-done
		if a.err == nil && a.resp.status != http.StatusOK {
			return status.Errorf(codes.FailedPrecondition, "agent: upload of %s: proxmox answered %d %s", first.GetFilename(), a.resp.status, a.resp.reason)
		}
		return status.Errorf(codes.Unavailable, "agent: upload of %s: %v", first.GetFilename(), err)
	}
	if err != nil {
		pw.CloseWithError(err)
		cancel()
		<-done
		s.a.log.Warn("agent: upload aborted", "storage", first.GetStorage(), "file", first.GetFilename(), "bytes", n, "err", err)
		if errors.Is(err, errShortUpload) {
			return status.Errorf(codes.DataLoss, "agent: upload of %s: %v (size %d)", first.GetFilename(), err, first.GetSize())
		}
		if c := status.Code(err); c != codes.Unknown && c != codes.OK {
			return err
		}
		return status.Errorf(codes.Aborted, "agent: upload of %s: %v", first.GetFilename(), err)
	}
	pw.CloseWithError(mw.Close())
	a := <-done
	if a.err != nil {
		return status.Errorf(codes.Unavailable, "agent: upload of %s: proxmox: %v", first.GetFilename(), a.err)
	}
	if a.resp.status != http.StatusOK {
		return status.Errorf(codes.FailedPrecondition, "agent: upload of %s: proxmox answered %d %s", first.GetFilename(), a.resp.status, a.resp.reason)
	}
	var out struct {
		Data string `json:"data"`
	}
	if err := json.Unmarshal(a.resp.body, &out); err != nil || out.Data == "" {
		return status.Errorf(codes.Internal, "agent: upload of %s: no task in proxmox's answer", first.GetFilename())
	}
	s.a.log.Info("agent: uploaded", "storage", first.GetStorage(), "file", first.GetFilename(), "bytes", n, "upid", out.Data)
	return stream.SendAndClose(&agentv1.UploadVolumeResponse{
		Upid: out.Data, Sha256: hex.EncodeToString(h.Sum(nil)), Size: n,
		Volume: first.GetStorage() + ":" + first.GetContent() + "/" + first.GetFilename(),
	})
}

// forward writes the form's fields and then the stream's data into mw,
// hashing it into h; it returns the number of bytes of the file written,
// and an error when the stream broke or its length is not the announced
// size.
func (s *service) forward(stream agentv1.AgentService_UploadVolumeServer, first *agentv1.UploadVolumeRequest, mw *multipart.Writer, h io.Writer) (int64, error) {
	if err := mw.WriteField("content", first.GetContent()); err != nil {
		return 0, err
	}
	fw, err := mw.CreateFormFile("filename", first.GetFilename())
	if err != nil {
		return 0, err
	}
	w := io.MultiWriter(fw, h)
	size, exact := first.GetSize(), first.GetSize() > 0
	if !exact {
		size = MaxUploadBytes
	}
	var n int64
	msg := first
	for {
		data := msg.GetData()
		if n+int64(len(data)) > size {
			return n, fmt.Errorf("%w: more than %d bytes", errShortUpload, size)
		}
		if _, err := w.Write(data); err != nil {
			return n, fmt.Errorf("%w: %v", errProxmoxStopped, err)
		}
		n += int64(len(data))
		msg, err = stream.Recv()
		if errors.Is(err, io.EOF) {
			if exact && n != size {
				return n, fmt.Errorf("%w: it ended at %d", errShortUpload, n)
			}
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}
