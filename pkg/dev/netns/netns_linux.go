package netns

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"syscall"

	"github.com/jsimonetti/rtnetlink"
	"golang.org/x/sys/unix"
)

// Isolate makes cmd start in a new network namespace (and, when this
// process is not root, a new user namespace in which the caller is root, so
// that it may bring lo up), with EnvInside set; it dies with this process
// (parent-death signal). cmd.Env, when nil, becomes this process's
// environment. The started program must call LoopbackUp (Main does).
func Isolate(cmd *exec.Cmd) {
	if cmd.Env == nil {
		cmd.Env = os.Environ()
	}
	cmd.Env = append(cmd.Env, EnvInside+"=1")
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	attr := cmd.SysProcAttr
	attr.Cloneflags |= syscall.CLONE_NEWNET
	attr.Pdeathsig = syscall.SIGKILL
	if os.Geteuid() != 0 {
		attr.Cloneflags |= syscall.CLONE_NEWUSER
		attr.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}}
		attr.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}}
		attr.GidMappingsEnableSetgroups = false
	}
}

// LoopbackUp brings the loopback interface of this process's network
// namespace up (a new namespace starts with it down) and gives it Address.
//
// It refuses a namespace with any other interface: it is not one of
// Isolate's.
func LoopbackUp() error {
	ifs, err := net.Interfaces()
	if err != nil {
		return fmt.Errorf("netns: loopback up: %w", err)
	}
	for _, i := range ifs {
		if i.Name != "lo" {
			return fmt.Errorf("netns: loopback up: this network namespace has interface %s besides lo: it is not isolated (%s set by hand?)", i.Name, EnvInside)
		}
	}
	if err := setUp("lo"); err != nil {
		return fmt.Errorf("netns: loopback up: %w", err)
	}
	if err := AddLoopbackAddress(Address); err != nil {
		return fmt.Errorf("netns: loopback up: %w", err)
	}
	return nil
}

// AddLoopbackAddress gives lo of this process's network namespace the IPv4
// address ip (a /32), for a test that needs addresses that are neither
// loopback ones nor any machine's (198.18.0.0/15) in a namespace of its
// own (Inside). An address lo has already is no error.
func AddLoopbackAddress(ip string) error {
	addr := net.ParseIP(ip).To4()
	if addr == nil {
		return fmt.Errorf("netns: address %q is not IPv4", ip)
	}
	lo, err := net.InterfaceByName("lo")
	if err != nil {
		return fmt.Errorf("netns: address %s: %w", ip, err)
	}
	c, err := rtnetlink.Dial(nil)
	if err != nil {
		return fmt.Errorf("netns: address %s: %w", ip, err)
	}
	defer c.Close()
	err = c.Address.New(&rtnetlink.AddressMessage{
		Family: unix.AF_INET, PrefixLength: 32, Index: uint32(lo.Index),
		Attributes: &rtnetlink.AddressAttributes{Address: addr, Local: addr},
	})
	if err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("netns: address %s: %w", ip, err)
	}
	return nil
}

// setUp sets the interface name up.
func setUp(name string) error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
}

// DialerOf returns a dial function that connects from inside the network
// namespace of process pid (e.g. to a loopback address of a stack Isolate
// started), for a test that plays the operator of what runs there. The
// socket is made on an OS thread that enters the namespace and ends with the
// dial. It needs CAP_SYS_ADMIN (root).
func DialerOf(pid int) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		type result struct {
			c   net.Conn
			err error
		}
		ch := make(chan result, 1)
		go func() {
			// Never unlocked: the thread, in another namespace, ends with
			// this goroutine.
			runtime.LockOSThread()
			fd, err := unix.Open(fmt.Sprintf("/proc/%d/ns/net", pid), unix.O_RDONLY|unix.O_CLOEXEC, 0)
			if err != nil {
				ch <- result{err: fmt.Errorf("netns: dial in the namespace of %d: %w", pid, err)}
				return
			}
			err = unix.Setns(fd, unix.CLONE_NEWNET)
			unix.Close(fd)
			if err != nil {
				ch <- result{err: fmt.Errorf("netns: dial in the namespace of %d (it needs root): %w", pid, err)}
				return
			}
			c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			ch <- result{c, err}
		}()
		r := <-ch
		return r.c, r.err
	}
}
