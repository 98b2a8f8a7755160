//go:build linux

package edge

import (
	"errors"
	"fmt"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/flexplane/flexplane/pkg/support/nsnet"
)

// ifbName is the gateway's IFB device: traffic arriving on the uplink is redirected to
// it and shaped on its way out (this kernel has no policing action, so ingress is
// shaped as an IFB's egress).
const ifbName = "ifb-uplink"

// shape sets the bandwidth limits (of IP packets, headers included): a token bucket on the uplink's egress (the VDC's
// egress) and on the IFB that receives the uplink's ingress (the VDC's ingress).
func shape(ns string, g Gateway) error {
	h, err := nsnet.Handle(ns)
	if err != nil {
		return err
	}
	defer h.Close()
	ul, err := h.LinkByName("uplink")
	if err != nil {
		return err
	}
	if err := tbf(h, ul, g.EgressMbps); err != nil {
		return fmt.Errorf("egress: %w", err)
	}
	if g.IngressMbps == 0 {
		if l, err := h.LinkByName(ifbName); err == nil {
			if err := h.LinkDel(l); err != nil {
				return err
			}
		}
		ing := &netlink.Ingress{QdiscAttrs: netlink.QdiscAttrs{LinkIndex: ul.Attrs().Index, Handle: netlink.MakeHandle(0xffff, 0), Parent: netlink.HANDLE_INGRESS}}
		if err := h.QdiscDel(ing); err != nil && !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.EINVAL) {
			return err
		}
		return nil
	}
	ifb, err := h.LinkByName(ifbName)
	if err != nil {
		if err := h.LinkAdd(&netlink.Ifb{LinkAttrs: netlink.LinkAttrs{Name: ifbName, TxQLen: 1000}}); err != nil {
			return fmt.Errorf("ifb: %w", err)
		}
		if ifb, err = h.LinkByName(ifbName); err != nil {
			return err
		}
	}
	if err := h.LinkSetUp(ifb); err != nil {
		return err
	}
	if err := tbf(h, ifb, g.IngressMbps); err != nil {
		return fmt.Errorf("ingress: %w", err)
	}
	ing := &netlink.Ingress{QdiscAttrs: netlink.QdiscAttrs{LinkIndex: ul.Attrs().Index, Handle: netlink.MakeHandle(0xffff, 0), Parent: netlink.HANDLE_INGRESS}}
	if err := h.QdiscReplace(ing); err != nil {
		return fmt.Errorf("ingress qdisc: %w", err)
	}
	fs, err := h.FilterList(ul, netlink.MakeHandle(0xffff, 0))
	if err != nil {
		return err
	}
	if len(fs) > 0 {
		return nil
	}
	f := &netlink.U32{
		FilterAttrs: netlink.FilterAttrs{LinkIndex: ul.Attrs().Index, Parent: netlink.MakeHandle(0xffff, 0), Priority: 1, Protocol: unix.ETH_P_ALL},
		Sel:         &netlink.TcU32Sel{Flags: nlTcU32Terminal, Nkeys: 1, Keys: []netlink.TcU32Key{{Mask: 0, Val: 0}}},
		Actions:     []netlink.Action{netlink.NewMirredAction(ifb.Attrs().Index)},
	}
	if err := h.FilterAdd(f); err != nil {
		return fmt.Errorf("redirect to ifb: %w", err)
	}
	return nil
}

// nlTcU32Terminal is TC_U32_TERMINAL: a match ends the classification.
const nlTcU32Terminal = 1

// tbf puts a token bucket of mbps on l's egress (replacing what is there), or removes
// it for 0.
func tbf(h *netlink.Handle, l netlink.Link, mbps int) error {
	attrs := netlink.QdiscAttrs{LinkIndex: l.Attrs().Index, Handle: netlink.MakeHandle(1, 0), Parent: netlink.HANDLE_ROOT}
	if mbps == 0 {
		qs, err := h.QdiscList(l)
		if err != nil {
			return err
		}
		for _, q := range qs {
			if q.Type() == "tbf" && q.Attrs().Parent == netlink.HANDLE_ROOT {
				return h.QdiscDel(q)
			}
		}
		return nil
	}
	// The limit counts IP bytes; the bucket counts frames, 14 bytes of Ethernet
	// header more per (full-sized, 1500-byte) packet.
	rate := uint64(mbps) * 1_000_000 / 8 * 1514 / 1500 // bytes per second
	// A bucket of 100 ms of traffic: on a busy node the qdisc's dequeue (a
	// softirq) may come tens of milliseconds late, and a smaller bucket
	// loses the tokens of the wait, delivering less than the limit (at load
	// 20 on two cores a 10 ms bucket gave 36-38 of 40 Mbit/s, a 50 ms one
	// 18.7 of 20 once). Over a second or more the rate stays the limit.
	burst := uint32(max(rate/10, 16*1514))
	q := &netlink.Tbf{QdiscAttrs: attrs, Rate: rate, Limit: burst * 4, Buffer: netlink.Xmittime(rate, burst)}
	return h.QdiscReplace(q)
}
