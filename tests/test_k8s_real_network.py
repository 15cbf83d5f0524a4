"""The pure parts of the real-cluster tier's pod network (scripts/k8s/real_network.py): the
addresses, the CNI/kube-proxy/CoreDNS configurations and the clash check. The I/O (bridge,
iptables, processes) is exercised by `scripts/k8s/test_real.sh`."""
import ipaddress
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts" / "k8s"))

from real_network import (NetSettings, cni_conflist, corefile, find_clash,  # noqa: E402
                          kube_proxy_config)

S = NetSettings()


def test_addresses_come_from_the_ranges():
    assert S.gateway == "10.244.0.1"
    assert S.api_service_ip == "10.96.0.1"
    other = NetSettings(pod_cidr="172.31.7.0/24", service_cidr="172.31.8.0/24")
    assert (other.gateway, other.api_service_ip) == ("172.31.7.1", "172.31.8.1")


def test_cni_config_is_a_bridge_on_the_pod_subnet_without_masquerade(tmp_path):
    conf = cni_conflist(S, tmp_path / "ipam")
    bridge, portmap = conf["plugins"]
    assert bridge["type"] == "bridge" and bridge["bridge"] == S.bridge
    assert bridge["isGateway"] and bridge["hairpinMode"] and not bridge["ipMasq"]
    ipam = bridge["ipam"]
    assert ipam["type"] == "host-local" and ipam["dataDir"] == str(tmp_path / "ipam")
    assert ipam["ranges"] == [[{"subnet": S.pod_cidr, "gateway": S.gateway}]]
    assert portmap == {"type": "portmap", "capabilities": {"portMappings": True}}


def test_kube_proxy_uses_iptables_and_leaves_the_machine_alone(tmp_path):
    cfg = kube_proxy_config(S, tmp_path / "kc", "node-a", 1111, 2222)
    assert cfg["mode"] == "iptables" and cfg["clusterCIDR"] == S.pod_cidr
    assert cfg["hostnameOverride"] == "node-a"
    assert cfg["clientConnection"]["kubeconfig"] == str(tmp_path / "kc")
    assert cfg["healthzBindAddress"] == "127.0.0.1:1111"
    assert cfg["metricsBindAddress"] == "127.0.0.1:2222"
    # no NodePorts on localhost (would set route_localnet) nor on the external address
    assert cfg["iptables"]["localhostNodePorts"] is False
    assert cfg["nodePortAddresses"] == [f"{S.gateway}/32"]
    # 0: keep the machine's conntrack limits and timeouts
    assert cfg["conntrack"]["maxPerCore"] == 0 and cfg["conntrack"]["min"] == 0


def test_corefile_serves_the_cluster_domain_on_the_gateway_only(tmp_path):
    text = corefile(S, tmp_path / "kc", 3333, 4444)
    assert f"bind {S.gateway}" in text
    assert f"kubernetes {S.cluster_domain} in-addr.arpa ip6.arpa" in text
    assert f"kubeconfig {tmp_path / 'kc'} local" in text
    assert "health 127.0.0.1:3333" in text and "ready 127.0.0.1:4444" in text
    assert "forward" not in text     # nothing is resolved off this machine
    assert text.count("{") == text.count("}")


ROUTES = ["default via 192.0.2.1 dev eth0",
          "192.0.2.0/24 dev eth0 proto kernel scope link src 192.0.2.2",
          "local 127.0.0.0/8 dev lo table local proto kernel scope host src 127.0.0.1",
          "local 192.0.2.2 dev eth0 table local proto kernel scope host src 192.0.2.2"]
ADDRS = ["1: lo    inet 127.0.0.1/8 scope host lo\\       valid_lft forever",
         "2: eth0    inet 192.0.2.2/24 brd 192.0.2.255 scope global eth0\\       valid_lft"]


def test_no_clash_on_an_ordinary_machine():
    assert find_clash(S, ROUTES, ADDRS) is None


def test_a_route_into_the_pod_subnet_is_a_clash():
    why = find_clash(S, ROUTES + ["10.244.0.0/16 via 192.0.2.9 dev eth0"], ADDRS)
    assert why is not None and "10.244.0.0/24" in why and "10.244.0.0/16" in why


def test_an_address_in_the_service_range_is_a_clash():
    addrs = ADDRS + ["3: eth1    inet 10.96.0.77/28 scope global eth1\\       valid_lft"]
    why = find_clash(S, ROUTES, addrs)
    assert why is not None and "10.96.0.77/28" in why and "eth1" in why


def test_clash_check_agrees_with_ipaddress_on_random_ranges():
    for n in range(0, 256, 17):
        net = ipaddress.ip_network(f"10.{n}.0.0/16")
        why = find_clash(S, ROUTES + [f"{net} dev eth9"], ADDRS)
        overlaps = net.overlaps(ipaddress.ip_network(S.pod_cidr)) or \
            net.overlaps(ipaddress.ip_network(S.service_cidr))
        assert (why is not None) == overlaps, net
