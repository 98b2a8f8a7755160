//go:build linux

// Package nsnet works with named Linux network namespaces (those of `ip netns`, bind
// mounts in /run/netns): create, open, delete, and run code or open sockets inside one
// without moving the calling goroutine. A socket keeps the namespace it was created in,
// so a listener or connection made by Listen or Dial may be used from any goroutine.
// Everything here needs CAP_NET_ADMIN and CAP_SYS_ADMIN (root).
package nsnet

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Dir is where named namespaces are bind-mounted.
const Dir = "/run/netns"

// Exists reports whether the named namespace exists: its file in Dir is a mounted
// namespace. The file alone is not enough: creating one makes the file first and
// bind-mounts the namespace onto it after, and entering the bare file fails.
func Exists(name string) bool {
	var st unix.Statfs_t
	if err := unix.Statfs(filepath.Join(Dir, name), &st); err != nil {
		return false
	}
	return st.Type == unix.NSFS_MAGIC
}

// settle waits a moment for a namespace another caller is creating (its file is
// there, the mount not yet) and reports whether it became one.
func settle(name string) bool {
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		if Exists(name) {
			return true
		}
		time.Sleep(5 * time.Millisecond)
	}
	return Exists(name)
}

// Ensure creates the named namespace unless it exists, with its loopback up.
func Ensure(name string) error {
	if Exists(name) {
		return nil
	}
	err := onThread(func() error {
		orig, err := netns.Get()
		if err != nil {
			return err
		}
		defer orig.Close()
		ns, err := netns.NewNamed(name)
		if errors.Is(err, os.ErrExist) {
			// Another caller is creating it, or a crash left its bare file behind.
			if settle(name) {
				if err := netns.Set(orig); err != nil {
					return errors.Join(err, errTainted)
				}
				return nil
			}
			if rerr := os.Remove(filepath.Join(Dir, name)); rerr == nil {
				ns, err = netns.NewNamed(name)
			}
		}
		if err != nil {
			if serr := netns.Set(orig); serr != nil {
				return errors.Join(err, errTainted)
			}
			return err
		}
		ns.Close()
		if err := netns.Set(orig); err != nil {
			return errors.Join(err, errTainted)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("nsnet: create %s: %w", name, err)
	}
	h, err := Handle(name)
	if err != nil {
		return err
	}
	defer h.Close()
	lo, err := h.LinkByName("lo")
	if err == nil {
		err = h.LinkSetUp(lo)
	}
	if err != nil {
		return fmt.Errorf("nsnet: %s: loopback up: %w", name, err)
	}
	return nil
}

// Delete removes the named namespace (its interfaces go when nothing holds it open);
// a missing one is no error.
func Delete(name string) error {
	path := filepath.Join(Dir, name)
	if !Exists(name) {
		// A bare file (a creation under way or a crash's leftover) is no namespace;
		// one still being created is left to its creator.
		if _, err := os.Stat(path); err == nil && !settle(name) {
			if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("nsnet: delete %s: %w", name, err)
			}
			return nil
		}
		if !Exists(name) {
			return nil
		}
	}
	if err := netns.DeleteNamed(name); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("nsnet: delete %s: %w", name, err)
	}
	return nil
}

// List returns the named namespaces whose name starts with prefix.
func List(prefix string) ([]string, error) {
	ents, err := os.ReadDir(Dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("nsnet: list: %w", err)
	}
	var out []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), prefix) {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

// Open opens the named namespace; "" is the caller's (the process's) namespace.
// The caller closes the handle.
func Open(name string) (netns.NsHandle, error) {
	var (
		h   netns.NsHandle
		err error
	)
	if name == "" {
		h, err = netns.GetFromPid(os.Getpid())
	} else {
		h, err = netns.GetFromName(name)
	}
	if err != nil {
		return netns.None(), fmt.Errorf("nsnet: open %q: %w", name, err)
	}
	return h, nil
}

// Handle is a netlink handle working in the named namespace ("" the process's); the
// caller closes it.
func Handle(name string) (*netlink.Handle, error) {
	ns, err := Open(name)
	if err != nil {
		return nil, err
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return nil, fmt.Errorf("nsnet: netlink in %q: %w", name, err)
	}
	return h, nil
}

// Pair is what plugging links from one namespace into another takes:
// netlink handles in both and the inner namespace itself (a link moved
// there is given it).
type Pair struct {
	Outer, Inner *netlink.Handle
	InnerNS      netns.NsHandle
}

// OpenPair opens a Pair of the namespaces outer and inner ("" is the
// process's); the caller closes it.
func OpenPair(outer, inner string) (*Pair, error) {
	oh, err := Handle(outer)
	if err != nil {
		return nil, err
	}
	ih, err := Handle(inner)
	if err != nil {
		oh.Close()
		return nil, err
	}
	ins, err := Open(inner)
	if err != nil {
		oh.Close()
		ih.Close()
		return nil, err
	}
	return &Pair{Outer: oh, Inner: ih, InnerNS: ins}, nil
}

// Close closes the pair's handles.
func (p *Pair) Close() {
	p.Outer.Close()
	p.Inner.Close()
	p.InnerNS.Close()
}

// errTainted is a thread that could not return to its namespace; it is left locked,
// so that the runtime ends it with its goroutine.
var errTainted = errors.New("nsnet: could not return the thread to its namespace")

// onThread runs f on a goroutine locked to its own thread; unless f reports
// errTainted, the thread is unlocked again.
func onThread(f func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		err := f()
		if !errors.Is(err, errTainted) {
			runtime.UnlockOSThread()
		}
		done <- err
	}()
	return <-done
}

// Do runs f with its thread in the named namespace ("" the process's). f must not
// start goroutines expecting them to be in the namespace.
func Do(name string, f func() error) error {
	ns, err := Open(name)
	if err != nil {
		return err
	}
	defer ns.Close()
	return onThread(func() error {
		orig, err := netns.Get()
		if err != nil {
			return err
		}
		defer orig.Close()
		if err := netns.Set(ns); err != nil {
			return fmt.Errorf("nsnet: enter %s: %w", name, err)
		}
		ferr := f()
		if err := netns.Set(orig); err != nil {
			return errors.Join(ferr, err, errTainted)
		}
		return ferr
	})
}

// Listen opens a listener in the named namespace.
func Listen(ctx context.Context, name, network, addr string) (net.Listener, error) {
	var ln net.Listener
	err := Do(name, func() error {
		var err error
		ln, err = (&net.ListenConfig{}).Listen(ctx, network, addr)
		return err
	})
	return ln, err
}

// Dial connects from the named namespace. The connection attempt happens inside it,
// bounded by ctx.
func Dial(ctx context.Context, name, network, addr string) (net.Conn, error) {
	var c net.Conn
	err := Do(name, func() error {
		var err error
		c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
		return err
	})
	return c, err
}

// Sysctl sets a sysctl of the named namespace ("" the process's), such as
// "net/ipv4/ip_forward".
func Sysctl(name, key, value string) error {
	return Do(name, func() error {
		if err := os.WriteFile("/proc/sys/"+key, []byte(value), 0o644); err != nil {
			return fmt.Errorf("nsnet: sysctl %s in %q: %w", key, name, err)
		}
		return nil
	})
}
