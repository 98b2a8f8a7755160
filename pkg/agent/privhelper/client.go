package privhelper

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	edgev1 "github.com/flexplane/flexplane/proto/flexplane/edge/v1"
	helperv1 "github.com/flexplane/flexplane/proto/flexplane/helper/v1"
)

// Client is the agent's connection to its helper.
type Client struct {
	conn   *grpc.ClientConn
	helper helperv1.HelperServiceClient
	edge   edgev1.EdgeServiceClient
}

// Dial connects to the helper listening on the unix socket path; the
// connection is made at the first call.
func Dial(path string) (*Client, error) {
	conn, err := grpc.NewClient("unix://"+path,
		grpc.WithTransportCredentials(insecure.NewCredentials()), // a local socket the kernel authenticates (SO_PEERCRED)
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxChunk+64<<10)))
	if err != nil {
		return nil, fmt.Errorf("privhelper: dial %s: %w", path, err)
	}
	return &Client{conn: conn, helper: helperv1.NewHelperServiceClient(conn), edge: edgev1.NewEdgeServiceClient(conn)}, nil
}

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

// WriteSnippet writes name in dir through the helper.
func (c *Client) WriteSnippet(ctx context.Context, dir, name string, data []byte) error {
	_, err := c.helper.WriteSnippet(ctx, &helperv1.WriteSnippetRequest{Dir: dir, Name: name, Data: data})
	return err
}

// DeleteSnippet removes name from dir through the helper; false when there
// was no such file.
func (c *Client) DeleteSnippet(ctx context.Context, dir, name string) (bool, error) {
	resp, err := c.helper.DeleteSnippet(ctx, &helperv1.DeleteSnippetRequest{Dir: dir, Name: name})
	return resp.GetDeleted(), err
}

// EdgeServer is an EdgeService that forwards every call to the helper's:
// what the agent serves on the mesh when a helper runs its gateways. The
// helper's answers, errors and their codes included, are passed on as
// they are.
func (c *Client) EdgeServer() edgev1.EdgeServiceServer { return edgeForwarder{c: c.edge} }

type edgeForwarder struct {
	edgev1.UnimplementedEdgeServiceServer
	c edgev1.EdgeServiceClient
}

func (f edgeForwarder) ApplyGateway(ctx context.Context, req *edgev1.ApplyGatewayRequest) (*edgev1.ApplyGatewayResponse, error) {
	return f.c.ApplyGateway(ctx, req)
}

func (f edgeForwarder) RemoveGateway(ctx context.Context, req *edgev1.RemoveGatewayRequest) (*edgev1.RemoveGatewayResponse, error) {
	return f.c.RemoveGateway(ctx, req)
}

func (f edgeForwarder) GatewayStatus(ctx context.Context, req *edgev1.GatewayStatusRequest) (*edgev1.GatewayStatusResponse, error) {
	return f.c.GatewayStatus(ctx, req)
}

func (f edgeForwarder) ListGateways(ctx context.Context, req *edgev1.ListGatewaysRequest) (*edgev1.ListGatewaysResponse, error) {
	return f.c.ListGateways(ctx, req)
}

// Volume is a guest's volume the helper opened: its reads and writes go
// one at a time over one stream until Close.
type Volume struct {
	mu     sync.Mutex // serialises operations; protects stream
	stream grpc.BidiStreamingClient[helperv1.VolumeIORequest, helperv1.VolumeIOResponse]
	cancel context.CancelFunc
	size   int64
}

// OpenVolume asks the helper to open volume (at path) of guest vmid, for
// writing when write is set (the guest must be marked arriving), else for
// reading (marked leaving). The volume stays open until Close or ctx ends.
func (c *Client) OpenVolume(ctx context.Context, vmid uint32, volume, path string, write bool) (*Volume, error) {
	ctx, cancel := context.WithCancel(ctx)
	stream, err := c.helper.VolumeIO(ctx)
	if err == nil {
		err = stream.Send(&helperv1.VolumeIORequest{Op: &helperv1.VolumeIORequest_Open{Open: &helperv1.OpenVolume{Vmid: vmid, Volume: volume, Path: path, Write: write}}})
	}
	var resp *helperv1.VolumeIOResponse
	if err == nil {
		resp, err = stream.Recv()
	}
	if err != nil {
		cancel()
		return nil, err
	}
	return &Volume{stream: stream, cancel: cancel, size: resp.GetSize()}, nil
}

// Size is the volume's size in bytes.
func (v *Volume) Size() int64 { return v.size }

// do sends one operation and reads its answer.
func (v *Volume) do(req *helperv1.VolumeIORequest) (*helperv1.VolumeIOResponse, error) {
	if err := v.stream.Send(req); err != nil {
		// The stream's error is the server's status, read by Recv.
		if _, rerr := v.stream.Recv(); rerr != nil {
			return nil, rerr
		}
		return nil, err
	}
	return v.stream.Recv()
}

// ReadAt implements io.ReaderAt.
func (v *Volume) ReadAt(p []byte, off int64) (int, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	n := 0
	for n < len(p) {
		resp, err := v.do(&helperv1.VolumeIORequest{Op: &helperv1.VolumeIORequest_Read{Read: &helperv1.ReadAt{Offset: off + int64(n), Length: uint32(min(len(p)-n, maxChunk))}}})
		if err != nil {
			return n, err
		}
		n += copy(p[n:], resp.GetData())
		if resp.GetEof() {
			return n, io.EOF
		}
		if len(resp.GetData()) == 0 {
			return n, io.ErrNoProgress
		}
	}
	return n, nil
}

// WriteAt implements io.WriterAt.
func (v *Volume) WriteAt(p []byte, off int64) (int, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	n := 0
	for n < len(p) {
		chunk := p[n : n+min(len(p)-n, maxChunk)]
		resp, err := v.do(&helperv1.VolumeIORequest{Op: &helperv1.VolumeIORequest_Write{Write: &helperv1.WriteAt{Offset: off + int64(n), Data: chunk}}})
		if err != nil {
			return n, err
		}
		if int(resp.GetWritten()) != len(chunk) {
			return n + int(resp.GetWritten()), io.ErrShortWrite
		}
		n += len(chunk)
	}
	return n, nil
}

// Sync makes what was written durable.
func (v *Volume) Sync() error {
	v.mu.Lock()
	defer v.mu.Unlock()
	_, err := v.do(&helperv1.VolumeIORequest{Op: &helperv1.VolumeIORequest_Sync{Sync: &helperv1.Sync{}}})
	return err
}

// Close ends the stream; the helper closes the volume.
func (v *Volume) Close() error {
	v.mu.Lock()
	defer v.mu.Unlock()
	err := v.stream.CloseSend()
	if err == nil {
		if _, rerr := v.stream.Recv(); rerr != nil && !errors.Is(rerr, io.EOF) {
			err = rerr
		}
	}
	v.cancel()
	return err
}
