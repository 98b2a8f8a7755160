package pveapi

import (
	"context"
	"fmt"
	"net/url"

	proxmox "github.com/luthermonson/go-proxmox"
)

// RRDPoint is one point of a node's or a guest's rrddata (Proxmox's
// round-robin database, averaged over the point's slot). A field Proxmox
// left out (no data for the slot: the guest did not run, the node was
// down) is nil. Guests report mem/maxmem and disk I/O, nodes
// memused/memtotal; both report CPU as a fraction of their CPUs and
// network traffic in bytes per second.
type RRDPoint struct {
	Time      int64    `json:"time"`
	CPU       *float64 `json:"cpu"`
	MaxCPU    *float64 `json:"maxcpu"`
	Mem       *float64 `json:"mem"`
	MaxMem    *float64 `json:"maxmem"`
	MemUsed   *float64 `json:"memused"`
	MemTotal  *float64 `json:"memtotal"`
	NetIn     *float64 `json:"netin"`
	NetOut    *float64 `json:"netout"`
	DiskRead  *float64 `json:"diskread"`
	DiskWrite *float64 `json:"diskwrite"`
}

// Used is the point's memory in use in bytes (a guest's mem, a node's
// memused), and Total the memory it has.
func (p RRDPoint) Used() *float64 {
	if p.Mem != nil {
		return p.Mem
	}
	return p.MemUsed
}

// Total is the memory the guest or node has, in bytes.
func (p RRDPoint) Total() *float64 {
	if p.MaxMem != nil {
		return p.MaxMem
	}
	return p.MemTotal
}

// Timeframes are the rrddata timeframes of Proxmox's schema flexplane
// asks for.
var Timeframes = []string{"hour", "day", "week", "month", "year"}

// NodeRRD reads a node's rrddata of timeframe (GET
// /nodes/{node}/rrddata, averages).
func NodeRRD(ctx context.Context, c *proxmox.Client, node, timeframe string) ([]RRDPoint, error) {
	return rrd(ctx, c, fmt.Sprintf("/nodes/%s/rrddata", url.PathEscape(node)), timeframe)
}

// GuestRRD reads a guest's rrddata of timeframe (GET
// /nodes/{node}/qemu/{vmid}/rrddata, averages).
func GuestRRD(ctx context.Context, c *proxmox.Client, node string, vmid int, timeframe string) ([]RRDPoint, error) {
	return rrd(ctx, c, fmt.Sprintf("/nodes/%s/qemu/%d/rrddata", url.PathEscape(node), vmid), timeframe)
}

func rrd(ctx context.Context, c *proxmox.Client, path, timeframe string) ([]RRDPoint, error) {
	var pts []RRDPoint
	q := url.Values{"timeframe": {timeframe}, "cf": {"AVERAGE"}}
	if err := c.Get(ctx, path+"?"+q.Encode(), &pts); err != nil {
		return nil, fmt.Errorf("pveapi: rrddata %s: %w", path, err)
	}
	return pts, nil
}
