package netns

import (
	"bufio"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Socket is a socket a process listens on: a TCP socket in the LISTEN
// state or an unconnected UDP socket (it receives from anyone).
type Socket struct {
	PID   int
	Proto string // tcp, tcp6, udp or udp6
	Local netip.AddrPort
	// Netns is the network namespace the socket lives in ("net:[N]"),
	// which is not always the process's own (a socket inherited from a
	// process in another namespace stays there).
	Netns string
	// NetnsInterfaces are the network interfaces of that namespace.
	NetnsInterfaces []string
}

// LoopbackOnly reports whether only the machine itself can reach s: it is
// bound to a loopback address, or to the wildcard address in a namespace
// whose only interface is lo.
func (s Socket) LoopbackOnly() bool {
	a := s.Local.Addr().Unmap()
	if a.IsLoopback() {
		return true
	}
	return a.IsUnspecified() && slices.Equal(s.NetnsInterfaces, []string{"lo"})
}

func (s Socket) String() string {
	return fmt.Sprintf("pid %d %s %s (%s, interfaces %s)", s.PID, s.Proto, s.Local, s.Netns, strings.Join(s.NetnsInterfaces, ","))
}

// ListeningSockets lists the sockets the processes pids listen on, reading
// /proc: each process's open socket inodes (/proc/PID/fd) looked up in the
// socket tables (/proc/PID/net/{tcp,tcp6,udp,udp6}) of every namespace one
// of the processes is in. A process that has exited meanwhile is left out.
func ListeningSockets(pids []int) ([]Socket, error) {
	type entry struct {
		proto string
		local netip.AddrPort
		ns    string
	}
	byInode := map[string]entry{}
	ifaces := map[string][]string{}
	for _, pid := range pids {
		ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", pid))
		if err != nil {
			continue // gone
		}
		if _, ok := ifaces[ns]; ok {
			continue
		}
		names, err := interfaces(pid)
		if err != nil {
			continue
		}
		ifaces[ns] = names
		for _, proto := range []string{"tcp", "tcp6", "udp", "udp6"} {
			ents, err := table(fmt.Sprintf("/proc/%d/net/%s", pid, proto), strings.HasPrefix(proto, "tcp"))
			if err != nil {
				return nil, err
			}
			for inode, local := range ents {
				byInode[inode] = entry{proto: proto, local: local, ns: ns}
			}
		}
	}
	var out []Socket
	for _, pid := range pids {
		fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		if err != nil {
			continue
		}
		seen := map[string]bool{}
		for _, fd := range fds {
			l, err := os.Readlink(filepath.Join(fmt.Sprintf("/proc/%d/fd", pid), fd.Name()))
			if err != nil || !strings.HasPrefix(l, "socket:[") {
				continue
			}
			inode := strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")
			e, ok := byInode[inode]
			if !ok || seen[inode] {
				continue
			}
			seen[inode] = true
			out = append(out, Socket{PID: pid, Proto: e.proto, Local: e.local, Netns: e.ns, NetnsInterfaces: ifaces[e.ns]})
		}
	}
	return out, nil
}

// interfaces lists the interfaces of pid's network namespace.
func interfaces(pid int) ([]string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/dev", pid))
	if err != nil {
		return nil, err
	}
	var names []string
	for i, line := range strings.Split(string(b), "\n") {
		name, _, ok := strings.Cut(line, ":")
		if i < 2 || !ok {
			continue
		}
		names = append(names, strings.TrimSpace(name))
	}
	slices.Sort(names)
	return names, nil
}

// table reads a /proc/net socket table: the local address of every
// listening socket (TCP state LISTEN, UDP not connected) by inode.
func table(path string, tcp bool) (map[string]netip.AddrPort, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("netns: sockets: %w", err)
	}
	defer f.Close()
	out := map[string]netip.AddrPort{}
	sc := bufio.NewScanner(f)
	sc.Scan() // header
	for sc.Scan() {
		fl := strings.Fields(sc.Text())
		if len(fl) < 10 {
			continue
		}
		local, err1 := parseAddr(fl[1])
		remote, err2 := parseAddr(fl[2])
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("netns: sockets: %s: bad line %q", path, sc.Text())
		}
		if tcp && fl[3] != "0A" || !tcp && remote.Port() != 0 {
			continue
		}
		out[fl[9]] = local
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("netns: sockets: %w", err)
	}
	return out, nil
}

// parseAddr parses /proc/net's "0100007F:1F90": the address as 32-bit
// words in host (little-endian) order, the port in hex.
func parseAddr(s string) (netip.AddrPort, error) {
	h, p, ok := strings.Cut(s, ":")
	if !ok {
		return netip.AddrPort{}, fmt.Errorf("no port in %q", s)
	}
	raw, err := hex.DecodeString(h)
	if err != nil || (len(raw) != 4 && len(raw) != 16) {
		return netip.AddrPort{}, fmt.Errorf("bad address %q", s)
	}
	for i := 0; i < len(raw); i += 4 {
		binary.BigEndian.PutUint32(raw[i:], binary.LittleEndian.Uint32(raw[i:]))
	}
	port, err := strconv.ParseUint(p, 16, 16)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("bad port in %q", s)
	}
	a, _ := netip.AddrFromSlice(raw)
	return netip.AddrPortFrom(a, uint16(port)), nil
}
