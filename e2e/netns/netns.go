package netns

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpumux/gpumux/e2e/internal/hostcheck"
)

// Prefix begins the name of every namespace and root-namespace link the
// package makes.
const Prefix = "gmxe2e-"

// NodeInterface is the name of a node's link to the bridge, in its
// namespace.
const NodeInterface = "eth0"

// maxLinkName is the longest network interface name Linux takes.
const maxLinkName = 15

// firstNodeHost is the host number of the first node's address on the
// subnet; the root namespace has host number 1.
const firstNodeHost = 10

// Network is a bridge, the root namespace's link to it and the node
// namespaces on it.
type Network struct {
	// Name is the network's name, part of every name it makes.
	Name string
	// Subnet is the network's IPv4 subnet.
	Subnet *net.IPNet
	// HostAddr is the root namespace's address on the network: where a
	// node reaches the test's own servers.
	HostAddr net.IP

	t        testing.TB
	bridgeNS string // the namespace holding the bridge
	hostLink string // the root namespace's end of its link to the bridge

	mu    sync.Mutex
	nodes []*Node

	closeOnce sync.Once
	closeErr  error
}

// Node is a network namespace on the network: one simulated host.
type Node struct {
	// Name is the node's name in the network (as given to AddNode).
	Name string
	// NS is the namespace's name (`ip netns list`).
	NS string
	// Path is the namespace's binding, /run/netns/NS: for nsenter --net
	// and hostcheck.Owner.NetNS.
	Path string
	// Interface is the node's link to the bridge, in its namespace
	// (NodeInterface).
	Interface string
	// Addr is the node's address on the network.
	Addr net.IP
}

// New builds the network NAME on subnet (an IPv4 CIDR such as
// "10.213.0.0/24", of at most 254 hosts): the bridge's namespace and the
// root namespace's link to it, with the subnet's first address. What a
// killed run of the same network left is removed first, logged. It
// registers a t.Cleanup that calls Close. New calls t.Fatal on error, and
// when the subnet is already routed in the root namespace.
func New(ctx context.Context, t testing.TB, name, subnet string) *Network {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatalf("netns: network namespaces need root; euid is %d", os.Geteuid())
	}
	for _, tool := range []string{"ip", "nsenter"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("netns: %s not found (Debian packages iproute2 and util-linux; scripts/install-deps.sh installs them): %v", tool, err)
		}
	}
	hostLink := Prefix + name
	if name == "" || len(hostLink) > maxLinkName || strings.ContainsAny(name, "/ \t") {
		t.Fatalf("netns: network name %q: want 1 to %d characters without / or blanks", name, maxLinkName-len(Prefix))
	}
	ip, ipnet, err := net.ParseCIDR(subnet)
	if err != nil || ip.To4() == nil {
		t.Fatalf("netns: subnet %q: want an IPv4 CIDR such as 10.213.0.0/24", subnet)
	}
	if ones, bits := ipnet.Mask.Size(); bits-ones < 3 || bits-ones > 8 {
		t.Fatalf("netns: subnet %q: want a prefix length of /24 to /29", subnet)
	}
	n := &Network{
		Name:     name,
		Subnet:   ipnet,
		HostAddr: hostAddr(ipnet, 1),
		t:        t,
		bridgeNS: Prefix + name + "-net",
		hostLink: hostLink,
	}
	if err := n.removeStale(ctx); err != nil {
		t.Fatalf("netns: removing what an earlier run of network %s left: %v", name, err)
	}
	if err := checkUnrouted(ipnet); err != nil {
		t.Fatalf("netns: %v", err)
	}
	t.Cleanup(func() {
		// What an explicit Close found, its caller has reported.
		n.closeOnce.Do(func() {
			if n.closeErr = n.teardown(); n.closeErr != nil {
				t.Errorf("netns: %v", n.closeErr)
			}
		})
	})
	prefixLen, _ := ipnet.Mask.Size()
	steps := [][]string{
		{"netns", "add", n.bridgeNS},
		{"-n", n.bridgeNS, "link", "set", "lo", "up"},
		{"-n", n.bridgeNS, "link", "add", "br0", "type", "bridge"},
		{"-n", n.bridgeNS, "link", "set", "br0", "up"},
		{"link", "add", n.hostLink, "type", "veth", "peer", "name", "host", "netns", n.bridgeNS},
		{"-n", n.bridgeNS, "link", "set", "host", "master", "br0", "up"},
		{"addr", "add", fmt.Sprintf("%s/%d", n.HostAddr, prefixLen), "dev", n.hostLink},
		{"link", "set", n.hostLink, "up"},
	}
	for _, s := range steps {
		if err := ipCmd(ctx, s...); err != nil {
			t.Fatalf("netns: building network %s: %v", name, err)
		}
	}
	t.Logf("netns: network %s on %s: bridge in namespace %s, root namespace at %s (%s)", name, ipnet, n.bridgeNS, n.HostAddr, n.hostLink)
	return n
}

// AddNode adds a namespace NS = Prefix+NETWORK-name on the network, with
// loopback up and the next address of the subnet on its NodeInterface.
// AddNode calls t.Fatal on error.
func (n *Network) AddNode(ctx context.Context, name string) *Node {
	n.t.Helper()
	n.mu.Lock()
	defer n.mu.Unlock()
	peer := "n-" + name
	if name == "" || name == "net" || len(peer) > maxLinkName || strings.ContainsAny(name, "/ \t") {
		n.t.Fatalf("netns: node name %q: want 1 to %d characters without / or blanks, not \"net\"", name, maxLinkName-len("n-"))
	}
	for _, o := range n.nodes {
		if o.Name == name {
			n.t.Fatalf("netns: network %s has a node %s already", n.Name, name)
		}
	}
	host := firstNodeHost + len(n.nodes)
	if ones, bits := n.Subnet.Mask.Size(); host >= 1<<(bits-ones)-1 {
		n.t.Fatalf("netns: subnet %s has no address left for node %s", n.Subnet, name)
	}
	node := &Node{
		Name:      name,
		NS:        Prefix + n.Name + "-" + name,
		Interface: NodeInterface,
		Addr:      hostAddr(n.Subnet, host),
	}
	node.Path = filepath.Join(hostcheck.NetNSDir, node.NS)
	prefixLen, _ := n.Subnet.Mask.Size()
	steps := [][]string{
		{"netns", "add", node.NS},
		{"-n", node.NS, "link", "set", "lo", "up"},
		{"-n", n.bridgeNS, "link", "add", peer, "type", "veth", "peer", "name", node.Interface, "netns", node.NS},
		{"-n", n.bridgeNS, "link", "set", peer, "master", "br0", "up"},
		{"-n", node.NS, "addr", "add", fmt.Sprintf("%s/%d", node.Addr, prefixLen), "dev", node.Interface},
		{"-n", node.NS, "link", "set", node.Interface, "up"},
	}
	// Recorded before it is built, so that Close removes a half-built node.
	n.nodes = append(n.nodes, node)
	for _, s := range steps {
		if err := ipCmd(ctx, s...); err != nil {
			n.t.Fatalf("netns: adding node %s: %v", name, err)
		}
	}
	n.t.Logf("netns: node %s: namespace %s, %s on %s", name, node.NS, node.Addr, node.Interface)
	return node
}

// Command returns a command that runs name with args in the node's
// network namespace (nsenter --net, which then executes name in the same
// process: its pid is the command's).
func (node *Node) Command(name string, args ...string) *exec.Cmd {
	return exec.Command("nsenter", append([]string{"--net=" + node.Path, "--", name}, args...)...)
}

// Close removes the network: it kills what still runs in its namespaces
// (an error: whoever started it should have stopped it), deletes the
// namespaces and the root namespace's link, then checks that nothing of
// the network is left. It is idempotent. New's cleanup closes the network
// unless Close was called, and fails the test with what it found.
func (n *Network) Close() error {
	n.closeOnce.Do(func() { n.closeErr = n.teardown() })
	return n.closeErr
}

func (n *Network) teardown() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var errs []error
	names := []string{n.bridgeNS}
	n.mu.Lock()
	for _, node := range n.nodes {
		names = append(names, node.NS)
	}
	n.mu.Unlock()
	for _, ns := range names {
		procs, err := procsIn(ns)
		if err != nil {
			errs = append(errs, err)
		}
		if err := hostcheck.KillProcs(procs, 10*time.Second); err != nil {
			errs = append(errs, fmt.Errorf("namespace %s: %w", ns, err))
		}
	}
	errs = append(errs, n.remove(ctx, names, false))
	return errors.Join(errs...)
}

// Leftovers lists what of the network exists: its namespaces, their
// bindings and the root namespace's links whose names begin with the
// network's prefix.
func (n *Network) Leftovers() (namespaces, bindings, links []string, err error) {
	prefix := Prefix + n.Name
	if namespaces, err = hostcheck.NetNSes(prefix + "-"); err != nil {
		return nil, nil, nil, err
	}
	if bindings, err = hostcheck.NetNSMounts(prefix + "-"); err != nil {
		return nil, nil, nil, err
	}
	all, err := hostcheck.Links(prefix)
	if err != nil {
		return nil, nil, nil, err
	}
	for _, l := range all {
		if l == n.hostLink || strings.HasPrefix(l, prefix+"-") {
			links = append(links, l)
		}
	}
	return namespaces, bindings, links, nil
}

// removeStale removes what an earlier run of this network left (a test
// killed before its cleanup ran): processes in its namespaces, the
// namespaces and the root namespace's link, each logged.
func (n *Network) removeStale(ctx context.Context) error {
	namespaces, bindings, links, err := n.Leftovers()
	if err != nil {
		return err
	}
	if len(namespaces)+len(bindings)+len(links) == 0 {
		return nil
	}
	n.t.Logf("netns: network %s: an earlier run left namespaces %v, bindings %v, links %v: removing them", n.Name, namespaces, bindings, links)
	var errs []error
	for _, ns := range namespaces {
		procs, err := procsIn(ns)
		if err != nil {
			errs = append(errs, err)
		}
		if err := hostcheck.KillProcs(procs, 10*time.Second); err != nil {
			n.t.Logf("netns: namespace %s of an earlier run: %v", ns, err)
		}
	}
	errs = append(errs, n.remove(ctx, namespaces, true))
	return errors.Join(errs...)
}

// remove deletes the namespaces and the root namespace's link (missing
// ones are no error when quiet), then reports what of the network is
// still there.
func (n *Network) remove(ctx context.Context, namespaces []string, quiet bool) error {
	var errs []error
	for _, ns := range namespaces {
		if _, err := os.Stat(filepath.Join(hostcheck.NetNSDir, ns)); os.IsNotExist(err) && quiet {
			continue
		}
		if err := ipCmd(ctx, "netns", "delete", ns); err != nil {
			errs = append(errs, err)
		}
	}
	// Deleting the bridge's namespace deletes the link's other end, and
	// with it the link; a half-built network may have the link alone.
	if _, err := net.InterfaceByName(n.hostLink); err == nil {
		if err := ipCmd(ctx, "link", "delete", n.hostLink); err != nil {
			// The kernel tears a deleted namespace down after `ip netns
			// delete` returns: the link may have gone since it was seen.
			if _, gone := net.InterfaceByName(n.hostLink); gone == nil {
				errs = append(errs, err)
			}
		}
	}
	var namespacesLeft, bindings, links []string
	err := hostcheck.Settle(5*time.Second, func() (bool, error) {
		var err error
		namespacesLeft, bindings, links, err = n.Leftovers()
		return len(namespacesLeft)+len(bindings)+len(links) == 0, err
	})
	if err != nil {
		errs = append(errs, err)
	}
	if len(namespacesLeft)+len(bindings)+len(links) > 0 {
		errs = append(errs, fmt.Errorf("network %s left namespaces %v, bindings %v, links %v", n.Name, namespacesLeft, bindings, links))
	}
	return errors.Join(errs...)
}

// procsIn lists the live processes in the named namespace.
func procsIn(ns string) ([]hostcheck.Proc, error) {
	path := filepath.Join(hostcheck.NetNSDir, ns)
	if _, err := os.Stat(path); os.IsNotExist(err) {
		return nil, nil
	}
	procs, err := hostcheck.Procs[hostcheck.Proc](hostcheck.Owner{NetNS: path})
	if err != nil {
		return nil, fmt.Errorf("processes in namespace %s: %w", ns, err)
	}
	return procs, nil
}

// checkUnrouted fails when an interface of the root namespace has an
// address on subnet: the network would be unreachable through its link.
func checkUnrouted(subnet *net.IPNet) error {
	ifs, err := net.Interfaces()
	if err != nil {
		return fmt.Errorf("listing network interfaces: %w", err)
	}
	for _, i := range ifs {
		addrs, err := i.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			if in, ok := a.(*net.IPNet); ok && (subnet.Contains(in.IP) || in.Contains(subnet.IP)) {
				return fmt.Errorf("subnet %s overlaps %s of interface %s in the root namespace: pick another subnet", subnet, in, i.Name)
			}
		}
	}
	return nil
}

// hostAddr is host number h of subnet.
func hostAddr(subnet *net.IPNet, h int) net.IP {
	ip := make(net.IP, 4)
	copy(ip, subnet.IP.To4())
	ip[3] += byte(h)
	return ip
}

// ipCmd runs `ip args...`.
func ipCmd(ctx context.Context, args ...string) error {
	out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
