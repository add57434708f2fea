#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""Writes the synthetic hwloc v2 XML topologies used by tests/topo/.

Run from the repository root: python3 tests/data/make_topo_fixtures.py
The layouts (and so the tests' expectations) are described below; the XML
follows what hwloc 2.9's `lstopo --of xml` writes for a real machine:
NUMA nodes and host bridges are children of their package, PCI bridges
and devices nest below the host bridge.

topo_2s8gpu.xml  two sockets; each: 1 NUMA node, 8 cores x 2 threads
                 (package 0: cores 0-7 = PUs 0-7 + 16-23, package 1: cores
                 8-15 = PUs 8-15 + 24-31), one host bridge with 2 PCIe
                 switches of 2 H100s each (GPUs 12,13 | 22,23 on socket 0,
                 92,93 | a2,a3 on socket 1), a Mellanox NIC on switch 0000:10
                 and an ASPEED VGA (not NVIDIA) on socket 0's host bridge.
topo_1s2gpu.xml  one socket, 1 NUMA node, 6 cores x 1 thread (PUs 0-5); two
                 NVIDIA GPUs each on its own root port (no shared switch):
                 0000:01:00.0 (VGA class 0300) and 0000:02:00.0 (3D 0302).
topo_cpu2.xml    like this CI machine: one socket, 1 NUMA node, 2 cores x 1
                 thread, a virtio NIC, no GPU.
"""


class Gen:
    def __init__(self):
        self.gp = 0

    def gpi(self):
        self.gp += 1
        return self.gp


def mask(pus):
    v = 0
    for p in pus:
        v |= 1 << p
    return "0x%08x" % v


def cpu_attrs(pus, nodes):
    m, n = mask(pus), mask(nodes)
    return ('cpuset="%s" complete_cpuset="%s" nodeset="%s" complete_nodeset="%s"'
            % (m, m, n, n))


def pci_dev(g, ind, busid, cls, vendor, device, children=""):
    return ('%s<object type="PCIDev" gp_index="%d" pci_busid="%s" '
            'pci_type="%04x [%04x:%04x] [%04x:0000] a1" pci_link_speed="16.000000"/>\n'
            % (ind, g.gpi(), busid, cls, vendor, device, vendor))


def bridge(g, ind, busid, secondary, children):
    head = ('%s<object type="Bridge" gp_index="%d" bridge_type="1-1" depth="1" '
            'pci_busid="%s" pci_type="0604 [10b5:c010] [0000:0000] b0" '
            'pci_link_speed="16.000000" bridge_pci="0000:[%s]">\n'
            % (ind, g.gpi(), busid, secondary))
    return head + children + "%s</object>\n" % ind


def host_bridge(g, ind, buses, children):
    return ('%s<object type="Bridge" gp_index="%d" bridge_type="0-1" depth="0" '
            'bridge_pci="0000:[%s]">\n' % (ind, g.gpi(), buses)
            + children + "%s</object>\n" % ind)


def package(g, os_index, node, cores, io=""):
    """cores: list of PU lists, one per core (core os_index = first PU)."""
    pus = sorted(p for c in cores for p in c)
    s = ('    <object type="Package" os_index="%d" %s gp_index="%d">\n'
         % (os_index, cpu_attrs(pus, [node]), g.gpi()))
    s += ('      <object type="NUMANode" os_index="%d" %s gp_index="%d" '
          'local_memory="68719476736"/>\n' % (node, cpu_attrs(pus, [node]), g.gpi()))
    for c in cores:
        s += ('      <object type="Core" os_index="%d" %s gp_index="%d">\n'
              % (c[0], cpu_attrs(c, [node]), g.gpi()))
        for p in c:
            s += ('        <object type="PU" os_index="%d" %s gp_index="%d"/>\n'
                  % (p, cpu_attrs([p], [node]), g.gpi()))
        s += "      </object>\n"
    s += io
    s += "    </object>\n"
    return s


def topology(g, all_pus, nodes, body, host):
    m, n = mask(all_pus), mask(nodes)
    return ('<?xml version="1.0" encoding="UTF-8"?>\n'
            '<!DOCTYPE topology SYSTEM "hwloc2.dtd">\n'
            '<topology version="2.0">\n'
            '  <object type="Machine" os_index="0" cpuset="%s" complete_cpuset="%s" '
            'allowed_cpuset="%s" nodeset="%s" complete_nodeset="%s" allowed_nodeset="%s" '
            'gp_index="%d">\n'
            '    <info name="Backend" value="Linux"/>\n'
            '    <info name="HostName" value="%s"/>\n'
            % (m, m, m, n, n, n, g.gpi(), host)
            + body + "  </object>\n</topology>\n")


def switch_with_gpus(g, ind, up_bus, gpu_buses, extra=""):
    inner = ""
    for i, b in enumerate(gpu_buses):
        inner += bridge(g, ind + "  ", "0000:%02x:%02x.0" % (up_bus + 1, i),
                        "%02x-%02x" % (b, b),
                        pci_dev(g, ind + "    ", "0000:%02x:00.0" % b, 0x0302, 0x10de, 0x2330))
    inner += extra
    last = max(gpu_buses) + 1
    return bridge(g, ind, "0000:%02x:00.0" % up_bus, "%02x-%02x" % (up_bus + 1, last), inner)


def two_socket():
    g = Gen()
    ind = "        "
    nic = bridge(g, ind + "  ", "0000:11:02.0", "14-14",
                 pci_dev(g, ind + "    ", "0000:14:00.0", 0x0200, 0x15b3, 0x101b))
    io0 = host_bridge(g, "      ", "00-7f",
                      switch_with_gpus(g, ind, 0x10, [0x12, 0x13], nic)
                      + switch_with_gpus(g, ind, 0x20, [0x22, 0x23])
                      + bridge(g, ind, "0000:00:1c.0", "30-30",
                               pci_dev(g, ind + "  ", "0000:30:00.0", 0x0300, 0x1a03, 0x2000)))
    io1 = host_bridge(g, "      ", "80-ff",
                      switch_with_gpus(g, ind, 0x90, [0x92, 0x93])
                      + switch_with_gpus(g, ind, 0xa0, [0xa2, 0xa3]))
    p0 = package(g, 0, 0, [[c, c + 16] for c in range(0, 8)], io0)
    p1 = package(g, 1, 1, [[c, c + 16] for c in range(8, 16)], io1)
    return topology(g, range(32), [0, 1], p0 + p1, "node-2s8gpu")


def one_socket():
    g = Gen()
    ind = "        "
    io = host_bridge(g, "      ", "00-0f",
                     bridge(g, ind, "0000:00:01.0", "01-01",
                            pci_dev(g, ind + "  ", "0000:01:00.0", 0x0300, 0x10de, 0x2204))
                     + bridge(g, ind, "0000:00:03.0", "02-02",
                              pci_dev(g, ind + "  ", "0000:02:00.0", 0x0302, 0x10de, 0x20b5)))
    p0 = package(g, 0, 0, [[c] for c in range(6)], io)
    return topology(g, range(6), [0], p0, "node-1s2gpu")


def cpu_only():
    g = Gen()
    io = host_bridge(g, "      ", "00-00",
                     pci_dev(g, "        ", "0000:00:03.0", 0x0200, 0x1af4, 0x1041))
    p0 = package(g, 0, 0, [[0], [1]], io)
    return topology(g, range(2), [0], p0, "node-cpu2")


if __name__ == "__main__":
    for name, text in [("topo_2s8gpu.xml", two_socket()),
                       ("topo_1s2gpu.xml", one_socket()),
                       ("topo_cpu2.xml", cpu_only())]:
        with open("tests/data/" + name, "w") as f:
            f.write(text)
